"""Seeded fault decisions: which requests fail, and how, reproducible from the trace alone.

Each request's fate is a pure function of ``(seed, key)`` where the key is its
``X-Request-Id`` (or, when it sends none, the request's arrival counter), so a replayed trace
meets the same faults whatever its timing. Every kind has its own independent draw; when more
than one hits, the first in the order 429, 500, drop wins; a stall combines with a drop.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import Enum

from loadgen.sim.config import SimConfig


class FaultKind(Enum):
    """What the simulator does to one request."""

    NONE = "none"
    RATE_LIMITED = "rate_limited"  # HTTP 429 with Retry-After: 1
    ERROR = "error"  # HTTP 500
    DROP = "drop"  # stream starts, then the connection is closed mid-body


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultPlan:
    """The faults decided for one request."""

    kind: FaultKind
    stall: bool

    @property
    def is_rejection(self) -> bool:
        """Whether the request is answered with an error status instead of a completion."""
        return self.kind in (FaultKind.RATE_LIMITED, FaultKind.ERROR)


NO_FAULT = FaultPlan(kind=FaultKind.NONE, stall=False)


def uniform(seed: int, key: str, salt: str) -> float:
    """A deterministic draw in [0, 1) from ``(seed, key, salt)``."""
    digest = hashlib.blake2b(f"{seed}\x00{salt}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


class FaultInjector:
    """Decides each request's :class:`FaultPlan` from the configured rates and seed."""

    def __init__(self, config: SimConfig) -> None:
        self._seed = config.seed
        self._rates = (
            (FaultKind.RATE_LIMITED, config.rate_429),
            (FaultKind.ERROR, config.error_rate),
            (FaultKind.DROP, config.drop_rate),
        )
        self._stall_rate = config.stall_rate
        self._active = any(rate > 0 for _, rate in self._rates) or config.stall_rate > 0

    def decide(self, key: str) -> FaultPlan:
        """The faults of the request identified by ``key``."""
        if not self._active:
            return NO_FAULT
        kind = FaultKind.NONE
        for candidate, rate in self._rates:
            if rate > 0 and uniform(self._seed, key, candidate.value) < rate:
                kind = candidate
                break
        stall = self._stall_rate > 0 and uniform(self._seed, key, "stall") < self._stall_rate
        if kind is FaultKind.NONE and not stall:
            return NO_FAULT
        return FaultPlan(kind=kind, stall=stall)
