"""``demo-compare``'s offline half: the crossover on the offline engine, and the offline
side of the HTTP checks.

Both deployments are swept on :mod:`loadgen.sim.offline` (virtual time: exact, a
fraction of a second per load) over a grid of loads, written as sweep directories; the
crossover of the two goodput curves (``analyzers.compare.confirm.offline_verdict``) is
then bisected on the load to ``BISECT_STEPS`` halvings of the grid step. The loads of the
HTTP checks (``check_loads``) sit a quarter below and above it; ``offline_checks``
simulates them too, so that the console puts both numbers side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from analyzers.compare.confirm import bisected, leads, offline_verdict
from analyzers.compare.crossover import SweepComparison, compare_sweeps
from analyzers.compare.sweep import SweepAnalysis, SweepOptions, analyze_sweep
from analyzers.compare.verdict import ComparisonVerdict
from loadgen.schedule import mean_rate, time_factor
from loadgen.sim.config import EngineConfig
from loadgen.sim.offline.engine import OfflineLoad
from loadgen.sim.offline.sweep import OfflineSweep
from traces.io import read_trace
from traces.records import TraceRequest

SIDES = ("monolith", "disagg")
GRID_STEP = 0.5
"""Loads of the offline grid: every ``GRID_STEP`` req/s across the plan's range."""
BISECT_STEPS = 6
"""Halvings of the grid step around the crossover (0.5 req/s / 64: under 0.01 req/s)."""
CHECK_SPREAD = 0.25
"""The HTTP checks sit at the crossover times (1 - spread) and (1 + spread)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OfflineCrossover:
    """The offline sweeps' comparison (grid only), the verdict (bisected), and how many
    loads were simulated per deployment."""

    comparison: SweepComparison
    verdict: ComparisonVerdict
    simulated: int


class _Sweeps:
    """One offline sweep per deployment over the same trace."""

    def __init__(
        self, base: Path, trace: Path, engines: dict[str, EngineConfig], prefix: str = ""
    ) -> None:
        self.requests: list[TraceRequest] = read_trace(trace)
        self.arrivals = [r.arrival_s for r in self.requests]
        rate = mean_rate(self.arrivals)
        self.sweeps = {
            side: OfflineSweep(
                base / f"{prefix}{side}",
                trace,
                self.requests,
                replace(engine, time_scale=1.0),
                labels={"name": side},
                mean_rate_per_s=rate,
            )
            for side, engine in engines.items()
        }

    def step(self, rate: float) -> dict[str, Path]:
        load = OfflineLoad(time_factor=time_factor(self.arrivals, rate=rate))
        return {side: s.step(load, offered=rate) for side, s in self.sweeps.items()}

    def close(self) -> dict[str, Path]:
        for s in self.sweeps.values():
            s.close()
        return {side: s.sweep_dir for side, s in self.sweeps.items()}


def _goodput(run_dir: Path, options: SweepOptions) -> float:
    """The run's goodput (a fraction) as ``analyze`` counts it, without the rest of it."""
    from analyzers.frames import scan_run, select_rows
    from analyzers.goodput import goodput

    rows = select_rows(scan_run(run_dir), options.selection)
    (overall, *_) = goodput(rows, options.slos.goodput)
    return overall.goodput.fraction if overall.goodput is not None else 0.0


def grid(low: float, high: float) -> tuple[float, ...]:
    """``low`` to ``high`` every ``GRID_STEP``."""
    n = round((high - low) / GRID_STEP)
    return tuple(round(low + i * GRID_STEP, 6) for i in range(n + 1))


def find_crossover(
    base: Path,
    trace: Path,
    engines: dict[str, EngineConfig],
    loads: tuple[float, ...],
    options: SweepOptions,
    *,
    bisect_steps: int = BISECT_STEPS,
) -> OfflineCrossover:
    """Sweep ``loads`` offline for both deployments under ``base``, find the crossover and
    bisect it ``bisect_steps`` times (probes in ``base/probes-*``)."""
    sweeps = _Sweeps(base, trace, engines)
    for rate in loads:
        sweeps.step(rate)
    dirs = sweeps.close()
    comparison = compare_sweeps(dirs[SIDES[0]], dirs[SIDES[1]], options)
    verdict = offline_verdict(comparison.points, *SIDES, tie=options.tie)
    simulated = len(loads)
    if verdict.kind == "crossover" and verdict.load is not None:
        joint = [p.load for p in comparison.points]
        high = min(x for x in joint if x >= verdict.load)
        low = max((x for x in joint if x < high), default=high)
        probes = _Sweeps(base, trace, engines, prefix="probes-")
        winner_is_b = verdict.winner == SIDES[1]
        for _ in range(bisect_steps if low < high else 0):
            mid = round((low + high) / 2, 6)
            runs = probes.step(mid)
            a, b = (_goodput(runs[side], options) for side in SIDES)
            if leads(a, b, winner_is_b, options.tie):
                high = mid
            else:
                low = mid
            simulated += 1
        probes.close()
        verdict = bisected(verdict, low, high, tie=options.tie)
    comparison = replace(
        comparison, verdict=verdict, verdicts=(*comparison.verdicts[:-1], verdict.text)
    )
    return OfflineCrossover(comparison=comparison, verdict=verdict, simulated=simulated)


def check_loads(verdict: ComparisonVerdict, loads: tuple[float, ...]) -> tuple[float, float]:
    """The two loads the HTTP checks run: around the crossover, or the ends of ``loads``
    without one."""
    if verdict.kind == "crossover" and verdict.load is not None:
        x = verdict.load
        return round(x * (1 - CHECK_SPREAD), 2), round(x * (1 + CHECK_SPREAD), 2)
    return loads[0], loads[-1]


def offline_checks(
    base: Path,
    trace: Path,
    engines: dict[str, EngineConfig],
    loads: tuple[float, ...],
    options: SweepOptions,
) -> dict[str, SweepAnalysis]:
    """The offline runs at the checks' loads, analysed as sweeps (one per deployment)."""
    sweeps = _Sweeps(base, trace, engines)
    for rate in loads:
        sweeps.step(rate)
    dirs = sweeps.close()
    return {side: analyze_sweep(dirs[side], options, label=side) for side in SIDES}
