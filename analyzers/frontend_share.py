"""The front end's share of its engine, from prefills that requests arrived during.

``loadgen plan calibrate`` prints it for ``loadgen sim --frontend-share``
(docs/arithmetic.md); :mod:`analyzers.calibration_points` finds the prefills. A request sent to an
idle server with others arriving during its prefill, each waiting behind it (a long
prompt, then short ones a few ms apart), has its prefill lengthened by the part of the
arrivals' front-end work that the engine lost. Placing each arrival's front end (the
median front end, one request at a time from its last byte written) against the prefill
(from the front end of the request itself to its end), the share is the lengthening
over that overlap; the median over such requests with an alone prefill of the same
shape. Only arrivals written after the request's own front end count: requests sent
together (a pair) are taken in by a server's front end before its engine starts (vLLM's
pairs gave shares near 0 where its probes gave 0.2-0.8). ``loadgen sim
--frontend-share``.

Pure Python: must not import ``loadgen``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from analyzers.budget.measurements import Observation


def ms_text(value: float) -> str:
    """``value`` to 0.1 ms, a value that rounds to zero printed as 0.0 (not -0.0)."""
    return f"{round(value, 1) + 0.0:.1f}"


@dataclass(frozen=True, slots=True, kw_only=True)
class OverlappedPrefill:
    """A prefill that requests arrived during (see the module): its shape, its time and
    when the arrivals' last bytes were written, ms after its own (model time)."""

    new_tokens: int
    cached_tokens: int
    prefill_ms: float
    arrivals_ms: tuple[float, ...]
    alone_ms: float | None = None
    """The prefill of the last request of the same shape before it that found the server
    idle (same run): the reference nearest in time (a server's speed drifts)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FrontEndShare:
    """The share of the front end's time its engine loses, and what it rests on."""

    share: float
    prefills: int
    arrivals: int

    def said(self) -> str:
        return (
            f"front end's share of its engine: {self.share:.2f} (median of {self.prefills} "
            f"prefills with {self.arrivals} arrivals during them; loadgen sim --frontend-share)"
        )


def front_end_share(
    overlapped: Sequence[OverlappedPrefill],
    observations: Sequence[Observation],
    front_end_ms: float | None,
) -> FrontEndShare | None:
    """The share (see the module) from prefills with arrivals during them, each against the
    alone prefill of its shape among ``observations``; None without both or without a
    front end. Clipped to [0, 1]."""
    if not overlapped or front_end_ms is None or front_end_ms <= 0:
        return None
    alone = {
        (o.new_tokens, o.cached_tokens): o.seconds * 1e3
        for o in observations
        if o.phase == "prefill" and o.batch == 1 and not o.decoding
    }
    shares: list[float] = []
    arrivals = 0
    for p in overlapped:
        base = p.alone_ms if p.alone_ms is not None else alone.get((p.new_tokens, p.cached_tokens))
        if base is None:
            continue
        start, stop = front_end_ms, front_end_ms + p.prefill_ms  # the engine's prefill
        came = [at for at in p.arrivals_ms if at >= start]  # after its own front end
        free = start  # the front end is busy with the request itself until then
        overlap = 0.0
        for at in came:
            begin = max(at, free)
            free = begin + front_end_ms
            overlap += max(0.0, min(free, stop) - max(begin, start))
        if overlap < front_end_ms / 2:
            continue
        shares.append(min(1.0, max(0.0, (p.prefill_ms - base) / overlap)))
        arrivals += len(came)
    if not shares:
        return None
    return FrontEndShare(share=statistics.median(shares), prefills=len(shares), arrivals=arrivals)
