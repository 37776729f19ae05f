"""Seeded fault decisions: which requests fail, and how, reproducible from the trace alone.

Each request's fate is a pure function of ``(seed, key)`` where the key is its
``X-Request-Id`` (or, when it sends none, the request's arrival counter), so a replayed trace
meets the same faults whatever its timing. Every kind has its own independent draw; when more
than one hits, the first in the order 429, 500, drop wins; a stall and a malformed chunk
combine with a drop. The slow-accept delay is drawn per request too (``accept_delays``).
Loading (503 for ``loading_s`` after start) is not drawn: it depends only on the time.

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
    malformed: bool = False

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
        self._malformed_rate = config.malformed_rate
        self._accept_rate = config.accept_delay_rate if config.accept_delay_ms > 0 else 0.0
        self._active = (
            any(rate > 0 for _, rate in self._rates)
            or config.stall_rate > 0
            or config.malformed_rate > 0
        )

    def accept_delays(self, key: str) -> bool:
        """Whether the request identified by ``key`` is held by the slow-accept delay."""
        rate = self._accept_rate
        return rate > 0 and (rate >= 1.0 or uniform(self._seed, key, "accept") < rate)

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
        rate = self._malformed_rate
        malformed = rate > 0 and uniform(self._seed, key, "malformed") < rate
        if kind is FaultKind.NONE and not stall and not malformed:
            return NO_FAULT
        return FaultPlan(kind=kind, stall=stall, malformed=malformed)
