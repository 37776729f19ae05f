"""sweep and compare take the server's time scale from run.json's deployment (a simulator
publishes its own) when no flag gives one."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from runbuilders import make_run, make_sweep

from analyzers.compare.sweep import analyze_sweep
from analyzers.frames import recorded_time_scale
from loadgen.cli.root import cli


def _publish_scale(run: Path, scale: float) -> None:
    doc = json.loads((run / "run.json").read_text())
    doc["deployment"] = {
        "facts": [{"key": "time_scale", "value": scale, "source": "simulator card"}],
        "unavailable": [],
    }
    (run / "run.json").write_text(json.dumps(doc))


def test_a_sweep_without_a_time_scale_takes_its_steps_recorded_one(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path / "sw", {2.0: 1.0, 4.0: 1.0})
    assert analyze_sweep(sweep).time_scale == 1.0
    for step in ("step-0", "step-1"):
        _publish_scale(sweep / step, 0.5)
    analysis = analyze_sweep(sweep)
    assert analysis.time_scale == 0.5
    # Wall loads of 2 and 4 req/s on a simulator at half time are 1 and 2 model req/s, and
    # its latencies twice the wall ones.
    assert [s.offered for s in analysis.steps] == [1.0, 2.0]
    doc = json.loads((sweep / "sweep.json").read_text())
    doc["server_time_scale"] = 0.25  # a flag given to loadgen sweep wins
    (sweep / "sweep.json").write_text(json.dumps(doc))
    assert analyze_sweep(sweep).time_scale == 0.25


def test_compare_reads_the_time_scale_from_the_first_run(tmp_path: Path) -> None:
    a, b = make_run(tmp_path / "a", n=60, seed=1), make_run(tmp_path / "b", n=60, seed=2)
    assert recorded_time_scale(a) is None
    plain = CliRunner().invoke(
        cli, ["compare", str(a), str(b), "--json", "--resamples", "20", "--metrics", "ttft_ms"]
    )
    assert plain.exit_code == 0, plain.output
    _publish_scale(a, 0.5)
    scale = recorded_time_scale(a)
    assert scale is not None
    assert (scale.time_scale, scale.source) == (0.5, "simulator card")
    scaled = CliRunner().invoke(
        cli, ["compare", str(a), str(b), "--json", "--resamples", "20", "--metrics", "ttft_ms"]
    )
    assert scaled.exit_code == 0, scaled.output
    assert "time scale 0.5 from" in scaled.stderr
    # Latencies on the model clock: twice the wall ones at time scale 0.5.
    wall, model = (json.loads(r.stdout)["metrics"][0]["base"] for r in (plain, scaled))
    assert model == 2 * wall
