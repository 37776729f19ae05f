"""Pick the instance of a pool that serves the next request.

``round-robin`` cycles through the pool; ``least-loaded`` takes the instance holding the
fewest sequences (pending, waiting and running), the lowest index on ties. Pure; must not
import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, TypeVar

RouterPolicy = Literal["round-robin", "least-loaded"]
ROUTER_POLICIES: tuple[RouterPolicy, ...] = ("round-robin", "least-loaded")


class Loaded(Protocol):
    """Anything that can say how many sequences it holds."""

    def load(self) -> int:
        """Sequences held now."""


T = TypeVar("T", bound=Loaded)


class Router:
    """Chooses among a fixed pool of instances by one policy."""

    def __init__(self, policy: RouterPolicy) -> None:
        if policy not in ROUTER_POLICIES:
            raise ValueError(f"unknown router {policy!r}; known: {', '.join(ROUTER_POLICIES)}")
        self.policy: RouterPolicy = policy
        self._turn = itertools.count()

    def choose(self, pool: Sequence[T], extra: Callable[[T], int] | None = None) -> T:
        """The instance of ``pool`` for the next request; ``extra`` adds to each
        instance's load what it has been promised and not yet given (least-loaded)."""
        if len(pool) == 1:
            return pool[0]
        if self.policy == "round-robin":
            return pool[next(self._turn) % len(pool)]
        if extra is None:
            return min(pool, key=lambda inst: inst.load())
        return min(pool, key=lambda inst: inst.load() + extra(inst))
