"""Sweep analysis on hand-built sweep directories: curves, knee, crossover, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from runbuilders import make_run

from analyzers.compare.crossover import CurvePoint, compare_sweeps, crossover, interpolate
from analyzers.compare.sweep import SweepOptions, analyze_sweep, is_sweep_dir
from analyzers.goodput import SLOTargets
from analyzers.slo.parse import SLOSet, parse_rules
from loadgen.cli.root import cli


def make_sweep(path: Path, slowness: dict[float, float], sha: str = "abc") -> Path:
    """A sweep whose step at load ``r`` (req/s) runs ``slowness[r]`` times slower."""
    steps = []
    for i, (load, slow) in enumerate(sorted(slowness.items())):
        make_run(path / f"step-{i}", n=120, seed=i, slow=slow)
        steps.append({"index": i, "dir": f"step-{i}", "label": f"{load:g}/s", "offered": load})
    doc = {
        "kind": "llm-loadgen sweep",
        "mode": "rate",
        "load_unit": "req/s",
        "server_time_scale": 1.0,
        "trace": {"sha256": sha},
        "steps": steps,
    }
    (path / "sweep.json").write_text(json.dumps(doc))
    return path


GOODPUT = SweepOptions(slos=SLOSet(goodput=SLOTargets(tpot_ms=15.0)))


def test_curve_and_knee(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path / "mono", {1.0: 1.0, 2.0: 1.0, 4.0: 1.45, 8.0: 2.0})
    assert is_sweep_dir(sweep)
    result = analyze_sweep(sweep, GOODPUT)
    assert [s.offered for s in result.steps] == [1.0, 2.0, 4.0, 8.0]
    assert result.steps[0].goodput == 1.0
    assert result.steps[-1].goodput is not None
    assert result.steps[-1].goodput < 0.5
    assert result.steps[0].tpot_p50_ms is not None
    assert 9 < result.steps[0].tpot_p50_ms < 11
    assert result.knee is not None
    assert result.knee.offered == 2.0
    assert "4/s" in result.knee_note


def test_knee_with_objectives(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path / "s", {1.0: 1.0, 2.0: 1.2, 4.0: 2.0})
    result = analyze_sweep(sweep, SweepOptions(slos=parse_rules(["tpot_ms.p50<=11.5"])))
    assert [s.meets_slo for s in result.steps] == [True, False, False]
    assert result.knee is not None
    assert result.knee.offered == 1.0
    none = analyze_sweep(sweep)
    assert none.knee is None
    assert none.steps[0].meets_slo is None


def test_interpolate_and_crossover() -> None:
    pts = [(1.0, 1.0), (3.0, 0.0)]
    assert interpolate(pts, 2.0) == pytest.approx(0.5)
    assert interpolate(pts, 4.0) is None
    curve = [
        CurvePoint(load=1.0, a=1.0, b=1.0),
        CurvePoint(load=2.0, a=1.0, b=1.0),
        CurvePoint(load=4.0, a=0.6, b=1.0),
        CurvePoint(load=8.0, a=0.2, b=0.9),
    ]
    cross = crossover(curve, "mono", "disagg", tie=0.05)
    assert cross is not None
    assert cross.winner == "disagg"
    # lead 0 at 2 req/s, 0.4 at 4 req/s: reaches 0.05 at 2 + 2 * 0.05 / 0.4 = 2.25
    assert cross.load == pytest.approx(2.25)
    assert crossover(curve[:2], "a", "b") is None


def test_two_sweeps_crossover(tmp_path: Path) -> None:
    mono = make_sweep(tmp_path / "mono", {1.0: 1.0, 2.0: 1.0, 4.0: 1.45, 8.0: 2.0})
    dis = make_sweep(tmp_path / "disagg", {1.0: 1.0, 2.0: 1.0, 4.0: 1.0, 8.0: 1.2})
    c = compare_sweeps(mono, dis, GOODPUT)
    assert c.crossover is not None
    assert c.crossover.winner == "disagg"
    assert 2.0 < c.crossover.load < 4.0
    assert any(v.startswith("crossover: disagg beats mono") for v in c.verdicts)


def test_sweeps_of_different_traces_refused(tmp_path: Path) -> None:
    a = make_sweep(tmp_path / "a", {1.0: 1.0, 2.0: 1.0}, sha="one")
    b = make_sweep(tmp_path / "b", {1.0: 1.0, 2.0: 1.0}, sha="two")
    result = CliRunner().invoke(cli, ["compare", str(a), str(b), "--slo", "goodput>=0.9"])
    assert result.exit_code == 2
    assert "different traces" in result.output


def test_cli_analyze_and_compare_sweeps(tmp_path: Path) -> None:
    mono = make_sweep(tmp_path / "mono", {1.0: 1.0, 2.0: 1.0, 4.0: 1.45})
    dis = make_sweep(tmp_path / "disagg", {1.0: 1.0, 2.0: 1.0, 4.0: 1.0})
    runner = CliRunner()
    out = runner.invoke(cli, ["analyze", str(mono), "--slo-tpot-ms", "15"])
    assert out.exit_code == 0, out.output
    assert "knee: 2 req/s" in out.output
    slo = tmp_path / "slo.toml"
    slo.write_text("[goodput]\ntpot_ms = 15\n")
    md = tmp_path / "c.md"
    out = runner.invoke(
        cli, ["compare", str(mono), str(dis), "--slo", str(slo), "--markdown", str(md)]
    )
    assert out.exit_code == 0, out.output
    assert "crossover" in out.output
    assert "crossover" in md.read_text()
