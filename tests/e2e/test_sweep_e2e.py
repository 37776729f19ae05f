"""A small real sweep against the simulator, analysed; and the demo-compare command."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from html import escape
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzers.compare.sweep import SweepOptions as AnalysisOptions
from analyzers.compare.sweep import analyze_sweep
from analyzers.goodput import SLOTargets
from analyzers.slo.parse import SLOSet
from loadgen.cli.root import cli
from loadgen.run.session import SessionOptions
from loadgen.run.sweep import SweepOptions, parse_rates, run_sweep
from loadgen.sim.launch import SimProcess

SimFactory = Callable[..., SimProcess]
pytestmark = pytest.mark.slow


def _trace(path: Path) -> Path:
    from traces.synth.arrivals import ArrivalSpec
    from traces.synth.trace import SynthConfig, write_synth

    write_synth(
        SynthConfig(requests=30, arrival=ArrivalSpec(kind="poisson", rate=20.0), seed=3), path
    )
    return path


def test_sweep_cli_writes_results_per_step(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "20", "--itl-ms", "2")
    trace = _trace(tmp_path / "trace.parquet")
    out = tmp_path / "sweep"
    args = ["sweep", str(trace), "--base-url", server.base_url, "-o", str(out)]
    result = CliRunner().invoke(cli, [*args, "--rates", "1x,2x", "--cooldown", "0"])
    assert result.exit_code == 0, result.output
    for step in ("step-0", "step-1"):
        results = json.loads((out / step / "results.json").read_text())
        assert results["completed"] + results["failed"] == 30


def test_sweep_against_simulator(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "20", "--itl-ms", "2")
    trace = _trace(tmp_path / "trace.parquet")
    options = SweepOptions(
        session=SessionOptions(
            trace_path=trace,
            run_dir=tmp_path / "sweep",
            base_url=server.base_url,
            scrape_metrics=False,
        ),
        steps=parse_rates("0.5x,1x,2x"),
        cooldown_s=0.2,
    )
    result = asyncio.run(run_sweep(options, install_signal_handlers=False))
    assert result.stop_reason == "completed"
    assert len(result.steps) == 3
    doc = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert [s["dir"] for s in doc["steps"]] == ["step-0", "step-1", "step-2"]
    assert doc["trace"]["sha256"]
    assert doc["mode"] == "scale"
    offered = [s["offered"] for s in doc["steps"]]
    assert offered[1] == pytest.approx(2 * offered[0])
    assert offered[2] == pytest.approx(4 * offered[0])
    analysis = analyze_sweep(
        tmp_path / "sweep", AnalysisOptions(slos=SLOSet(goodput=SLOTargets(ttft_ms=500)))
    )
    assert [s.offered for s in analysis.steps] == sorted(offered)
    assert all(s.error_rate == 0 for s in analysis.steps)
    # A step sent late on a loaded machine withholds the knee, and says so.
    invalid = [s for s in analysis.steps if not s.valid]
    if invalid:
        assert analysis.knee is None
        assert analysis.knee_note.startswith("no verdict: knee withheld")
    else:
        assert analysis.knee is not None
    out = CliRunner().invoke(cli, ["analyze", str(tmp_path / "sweep"), "--slo-ttft-ms", "500"])
    assert out.exit_code == 0, out.output
    assert "knee" in out.output


def test_sweep_until_breach_cli(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "20", "--itl-ms", "2")
    trace = _trace(tmp_path / "trace.parquet")
    out = CliRunner().invoke(
        cli,
        [
            "sweep", str(trace), "--base-url", server.base_url, "-o", str(tmp_path / "s"),
            "--rates", "1x,2x,4x", "--until-slo-breach", "--slo", "ttft_ms.p50<=1",
            "--cooldown", "0",
        ],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert len(doc["steps"]) == 1
    assert doc["status"].endswith("at step-0")


def test_demo_compare_quick(tmp_path: Path) -> None:
    # A quarter speed keeps the test short (it checks the wiring, not the verdict).
    args = ["demo-compare", "--quick", "--clock-scale", "0.25", "-o", str(tmp_path / "d")]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert "predicted break-even" in out.output
    # The last word is the crossover against the prediction, or the verdict as is (withheld
    # with its reason, or a winner); the same text as verdict.json and the page.
    doc = json.loads((tmp_path / "d" / "verdict.json").read_text())
    verdict = doc["sweeps"]["verdict"]
    lines = out.output.splitlines()
    if verdict["kind"] == "crossover":
        assert any(line.startswith("crossover: measured") for line in lines)
    else:
        assert f"verdict: {verdict['text']}" in "\n".join(lines)
    assert f"• {verdict['text']}" in lines
    assert (verdict["withheld_reason"] is not None) == verdict["withheld"]
    assert (tmp_path / "d" / "monolith" / "sweep.json").is_file()
    assert (tmp_path / "d" / "disagg" / "step-2" / "requests.parquet").is_file()
    report = tmp_path / "d" / "report.html"
    assert report.is_file()
    assert "report:" in out.output
    html = report.read_text()
    assert escape(verdict["text"]) in html
    assert "<svg" in html
    assert "https://" not in html.replace("https://www.w3.org", "")
    assert (tmp_path / "d" / "report.md").is_file()
