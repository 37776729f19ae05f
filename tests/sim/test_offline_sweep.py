"""Offline sweeps: the offline engine over several loads as a sweep directory, and
demo-compare's crossover found on it (exact: the same on every run)."""

from __future__ import annotations

from pathlib import Path

from analyzers.compare.sweep import SweepOptions, analyze_sweep
from analyzers.goodput import SLOTargets
from analyzers.slo.parse import SLOSet
from loadgen.cli.demo.disagg import engines, write_trace
from loadgen.cli.demo.offline import SIDES, check_loads, find_crossover, grid

OPTIONS = SweepOptions(slos=SLOSet(goodput=SLOTargets(ttft_ms=1000.0, tpot_ms=15.0)))


def test_demo_compare_bisects_the_crossover_on_offline_sweeps(tmp_path: Path) -> None:
    trace = tmp_path / "trace.parquet"
    write_trace(trace, 40, seed=1)
    loads = grid(5.5, 6.0)
    found = find_crossover(
        tmp_path / "offline", trace, engines(1.0), loads, OPTIONS, bisect_steps=2
    )
    verdict = found.verdict
    # Monolith's mixed batches break the 15 ms TPOT first: disagg wins from between the
    # grid's 5.5 (both all good) and 6 req/s (monolith 92.5%), bisected to 0.5/4.
    assert (verdict.kind, verdict.winner) == ("crossover", "disagg")
    assert verdict.load is not None
    assert 5.5 < verdict.load <= 6.0
    assert f"bisected to {verdict.load - 0.5 / 4:.3g}-{verdict.load:.3g}" in verdict.text
    assert found.simulated == len(loads) + 2
    for side in SIDES:
        # A sweep directory as loadgen sweep writes one: the grid's loads, every step valid.
        analysis = analyze_sweep(tmp_path / "offline" / side, OPTIONS)
        assert [s.offered for s in analysis.steps] == list(loads)
        assert all(s.valid and s.requests == 40 for s in analysis.steps)
        probes = analyze_sweep(tmp_path / "offline" / f"probes-{side}", OPTIONS)
        assert len(probes.steps) == 2
    below, above = check_loads(verdict, loads)
    assert below < verdict.load < above
