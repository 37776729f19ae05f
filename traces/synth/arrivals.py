"""Seeded arrival processes: when each request of a synthetic trace arrives.

Every process is a renewal process in *operational time* (unit mean gap: exponential for
Poisson, gamma with a coefficient of variation for bursty traffic, or constant) mapped
onto wall time through the inverse of the cumulative rate Λ(t) = ∫ λ. A constant rate
gives the classic processes; a time-varying rate (ramp, steps, diurnal, bursts) gives the
non-homogeneous variants with the same burstiness. Pure stdlib (``random.Random``), so a
seed fixes the times exactly. Imports nothing of the project.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal

ArrivalKind = Literal["poisson", "gamma", "constant", "ramp", "steps", "diurnal", "bursts"]
ARRIVAL_KINDS: Final[tuple[ArrivalKind, ...]] = (
    "poisson",
    "gamma",
    "constant",
    "ramp",
    "steps",
    "diurnal",
    "bursts",
)
DIURNAL_PIECES: Final = 96
"""Linear pieces per diurnal period; the sinusoid is integrated piecewise-linearly."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RateStep:
    """One step of a ``steps`` profile: ``rate`` requests/s for ``duration_s`` seconds."""

    duration_s: float
    rate: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrivalSpec:
    """Parameters of an arrival process. Rates are requests per second.

    - ``poisson``: exponential gaps at ``rate``.
    - ``gamma``: gamma gaps at ``rate`` with coefficient of variation ``cv`` (1 = Poisson,
      > 1 bursty, < 1 smoother than Poisson).
    - ``constant``: gaps of exactly ``1/rate``.
    - ``ramp``: rate rises (or falls) linearly from ``rate_from`` to ``rate_to`` over
      ``ramp_s`` seconds, then holds ``rate_to``.
    - ``steps``: piecewise-constant ``steps``, the last one held.
    - ``diurnal``: ``rate * (1 + amplitude * sin(2π t / period_s))``.
    - ``bursts``: ``rate`` as the base, ``rate * burst_factor`` during the first
      ``burst_s`` seconds of every ``burst_every_s`` seconds.

    The time-varying kinds use ``cv`` too (default 1: Poisson), so bursts within a ramp can
    be modelled.
    """

    kind: ArrivalKind = "poisson"
    rate: float = 1.0
    cv: float = 1.0
    rate_from: float = 1.0
    rate_to: float = 10.0
    ramp_s: float = 60.0
    steps: tuple[RateStep, ...] = ()
    period_s: float = 600.0
    amplitude: float = 0.5
    burst_factor: float = 5.0
    burst_s: float = 10.0
    burst_every_s: float = 60.0

    def __post_init__(self) -> None:
        if self.kind not in ARRIVAL_KINDS:
            raise ValueError(f"unknown arrival kind {self.kind!r}")
        if self.cv <= 0:
            raise ValueError("cv must be positive")
        if self.kind in ("poisson", "gamma", "constant", "diurnal", "bursts") and self.rate <= 0:
            raise ValueError("rate must be positive")
        if self.kind == "ramp" and (self.rate_from < 0 or self.rate_to <= 0 or self.ramp_s <= 0):
            raise ValueError("a ramp needs rate_from >= 0, rate_to > 0 and a positive length")
        if self.kind == "steps":
            if not self.steps:
                raise ValueError("a steps profile needs at least one step")
            if any(st.duration_s <= 0 or st.rate < 0 for st in self.steps):
                raise ValueError("steps need positive durations and non-negative rates")
            if self.steps[-1].rate <= 0:
                raise ValueError("the last step's rate must be positive (it is held)")
        if self.kind == "diurnal" and not (0 <= self.amplitude < 1 and self.period_s > 0):
            raise ValueError("diurnal needs 0 <= amplitude < 1 and a positive period")
        if self.kind == "bursts" and not (
            self.burst_factor > 0 and 0 < self.burst_s < self.burst_every_s
        ):
            raise ValueError("bursts need burst_factor > 0 and 0 < burst_s < burst_every_s")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Piece:
    """Rate varies linearly from ``r0`` at ``t0`` to ``r1`` at ``t1`` (``t1`` may be inf)."""

    t0: float
    t1: float
    r0: float
    r1: float


def _pieces(spec: ArrivalSpec) -> Iterator[_Piece]:
    """The rate profile as an endless sequence of linear pieces."""
    inf = math.inf
    if spec.kind in ("poisson", "gamma", "constant"):
        yield _Piece(t0=0.0, t1=inf, r0=spec.rate, r1=spec.rate)
    elif spec.kind == "ramp":
        yield _Piece(t0=0.0, t1=spec.ramp_s, r0=spec.rate_from, r1=spec.rate_to)
        yield _Piece(t0=spec.ramp_s, t1=inf, r0=spec.rate_to, r1=spec.rate_to)
    elif spec.kind == "steps":
        t = 0.0
        for st in spec.steps[:-1]:
            yield _Piece(t0=t, t1=t + st.duration_s, r0=st.rate, r1=st.rate)
            t += st.duration_s
        last = spec.steps[-1].rate
        yield _Piece(t0=t, t1=inf, r0=last, r1=last)
    elif spec.kind == "diurnal":
        dt = spec.period_s / DIURNAL_PIECES
        k = 0
        while True:
            t0, t1 = k * dt, (k + 1) * dt
            yield _Piece(t0=t0, t1=t1, r0=_diurnal(spec, t0), r1=_diurnal(spec, t1))
            k += 1
    else:  # bursts
        k = 0
        while True:
            start = k * spec.burst_every_s
            high = spec.rate * spec.burst_factor
            yield _Piece(t0=start, t1=start + spec.burst_s, r0=high, r1=high)
            yield _Piece(
                t0=start + spec.burst_s, t1=start + spec.burst_every_s, r0=spec.rate, r1=spec.rate
            )
            k += 1


def _diurnal(spec: ArrivalSpec, t: float) -> float:
    return spec.rate * (1.0 + spec.amplitude * math.sin(2.0 * math.pi * t / spec.period_s))


def _solve_in_piece(piece: _Piece, area: float) -> float:
    """Time offset x from ``piece.t0`` at which ∫ rate over [t0, t0 + x] equals ``area``."""
    width = piece.t1 - piece.t0
    slope = 0.0 if math.isinf(width) else (piece.r1 - piece.r0) / width
    if abs(slope) < 1e-15:
        return area / piece.r0 if piece.r0 > 0 else 0.0
    # r0 x + slope x²/2 = area; the stable root of the quadratic.
    disc = piece.r0 * piece.r0 + 2.0 * slope * area
    return 2.0 * area / (piece.r0 + math.sqrt(max(disc, 0.0)))


def expected_duration(spec: ArrivalSpec, count: int) -> float:
    """Seconds until the cumulative rate Λ(t) reaches ``count``: the expected span of
    ``count`` requests."""
    return _map_to_time(spec, [float(count)])[0]


def _map_to_time(spec: ArrivalSpec, targets: list[float]) -> list[float]:
    """Λ⁻¹ of non-decreasing operational times ``targets``."""
    out: list[float] = []
    pieces = _pieces(spec)
    piece = next(pieces)
    done = 0.0  # Λ at piece.t0
    for u in targets:
        while True:
            width = piece.t1 - piece.t0
            area = math.inf if math.isinf(width) else (piece.r0 + piece.r1) * width / 2.0
            if u - done <= area:
                break
            done += area
            piece = next(pieces)
        out.append(piece.t0 + _solve_in_piece(piece, u - done))
    return out


def arrival_times(
    spec: ArrivalSpec,
    rng: random.Random,
    *,
    count: int | None = None,
    duration_s: float | None = None,
) -> list[float]:
    """Arrival offsets in seconds from the trace start, non-decreasing.

    Stops after ``count`` arrivals or at the first arrival past ``duration_s``, whichever
    comes first; at least one of them must be given. The first arrival is one gap after 0
    (the process is not anchored at an arrival).
    """
    if count is None and duration_s is None:
        raise ValueError("give a request count, a duration or both")
    limit_u = math.inf
    if duration_s is not None:
        limit_u = _cumulative(spec, duration_s)
    targets: list[float] = []
    u = 0.0
    cv = 1.0 if spec.kind == "poisson" else spec.cv
    shape = 1.0 / (cv * cv)
    while count is None or len(targets) < count:
        if spec.kind == "constant":
            u += 1.0
        elif cv == 1.0:
            u += rng.expovariate(1.0)
        else:
            u += rng.gammavariate(shape, 1.0 / shape)
        if u > limit_u:
            break
        targets.append(u)
    times = _map_to_time(spec, targets)
    if duration_s is not None:
        # Rounding in Λ⁻¹ must not push the last arrival past the window.
        times = [min(t, duration_s) for t in times]
    return times


def _cumulative(spec: ArrivalSpec, t: float) -> float:
    """Λ(t): the expected number of arrivals in [0, t]."""
    total = 0.0
    for piece in _pieces(spec):
        if t <= piece.t0:
            break
        end = min(t, piece.t1)
        width = piece.t1 - piece.t0
        slope = 0.0 if math.isinf(width) else (piece.r1 - piece.r0) / width
        x = end - piece.t0
        total += piece.r0 * x + slope * x * x / 2.0
        if end >= t:
            break
    return total
