"""Smoke test: the replay benchmark runs end to end in its quick mode and prints every
figure beside its target. No timing assertions: the machine running the tests is shared
and noisy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "replay_schedule.py"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_replay_schedule_quick_runs_and_prints_each_target(tmp_path: Path) -> None:
    out_json = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out_json)],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
        cwd=SCRIPT.parents[1],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in ("(c) open loop", "(d) process start", "(e) closed loop", "[target"):
        assert line in proc.stdout
    doc = json.loads(out_json.read_text())
    assert doc["schedule"]["sent_share"] == 1.0
    assert doc["schedule"]["ok_share"] == 1.0
    assert doc["shards"]["same_request_set"] is True
    assert doc["shards"]["exit_codes"] == [0, 0]
