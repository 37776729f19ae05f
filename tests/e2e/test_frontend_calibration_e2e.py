"""``loadgen plan calibrate RUN`` measures a front end it is not told: a simulator with a
front end on its engine's core (``--frontend-ms 12``) that costs the engine half of its
time (``--frontend-share 0.5``), or all of it, replayed over loopback.

The trace: three prompts of 2,000 tokens alone 1 s apart (the alone prefill, about 57 ms
of model time on one H100 at the catalog's efficiency, in one step of the default 2,048
tokens; the front end's latency), then twice a 2,000-token prompt with four short ones
arriving during its prefill, 15 ms of model time apart. Each short one's 12 ms at the
front end lands in the long prefill, which the engine stretches by the share of it;
``plan calibrate`` reads the share from that stretch. The simulator runs 4x slower than
model time (``--clock-scale 4``): the replay's own timing (loopback, the event loop, a
busy machine's scheduling) is part of what the calibration has to live with, and at 1x
a machine with both cores busy put the front end 4 ms off (16.0 for 12) once in three
runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from replaying import replay
from tracefiles import write_arrivals

from loadgen.cli.root import cli
from loadgen.sim.launch import SimProcess

pytestmark = pytest.mark.serial  # times a real server: run alone

SimFactory = Callable[..., SimProcess]

LONG, SHORT = 2000, 64
FRONTEND_MS = 12.0
ARRIVALS = 4
SCALE = 4.0


def _trace(path: Path) -> Path:
    arrivals: list[float] = [0.0, 1.0, 2.0]
    inputs = [LONG] * 3
    for start in (3.0, 4.0):
        arrivals.append(start)
        inputs.append(LONG)
        for k in range(1, ARRIVALS + 1):
            arrivals.append(start + (0.005 + 0.015 * k) * SCALE)
            inputs.append(SHORT)
    return write_arrivals(path, arrivals, inputs, id_width=2)


@pytest.mark.parametrize("share", [0.5, 1.0])
def test_calibrate_measures_the_front_ends_share(
    tmp_path: Path, sim: SimFactory, share: float
) -> None:
    server = sim(
        "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--clock-scale", f"{SCALE:g}",
        "--frontend-ms", f"{FRONTEND_MS:g}", "--frontend-share", f"{share:g}",
    )  # fmt: skip
    run_dir = replay(
        _trace(tmp_path / "t.parquet"), tmp_path / "run", server.base_url, scrape_metrics=False
    ).run_dir
    result = CliRunner().invoke(
        cli, ["plan", "calibrate", str(run_dir), "-o", str(tmp_path / "p.toml"), "--summary"]
    )
    assert result.exit_code == 0, result.output
    print(f"\n{result.output}")
    front = re.search(r"front end: ([\d.]+) ms a request", result.output)
    assert front is not None, result.output
    assert float(front.group(1)) == pytest.approx(FRONTEND_MS, abs=2.0), result.output
    found = re.search(
        r"front end's share of its engine: ([\d.]+) \(median of (\d+) prefills with (\d+) "
        r"arrivals during them",
        result.output,
    )
    assert found is not None, result.output
    assert int(found.group(2)) == 2, result.output
    assert int(found.group(3)) == 2 * ARRIVALS, result.output
    assert float(found.group(1)) == pytest.approx(share, abs=0.15), result.output
