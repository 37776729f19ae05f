"""Smoke test: the replay benchmark runs end to end in its quick mode and prints every
figure beside its target. No timing assertions: the machine running the tests is shared
and noisy."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchrun import run_bench


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_replay_schedule_quick_runs_and_prints_each_target(tmp_path: Path) -> None:
    stdout, doc = run_bench(
        "replay_schedule.py",
        *("--quick", "--smoke", "--rates", "500,1000"),
        out_json=tmp_path / "out.json",
        timeout_s=110,
    )
    for line in ("(c) open loop", "baseline, the same", "(d) process start", "(e) closed loop"):
        assert line in stdout
    assert "[target" in stdout
    assert doc["schedule"]["sent_share"] == 1.0
    assert doc["schedule"]["ok_share"] == 1.0
    assert set(doc["schedules"]) == {"500", "1000"}
    assert doc["schedules"]["1000"]["scheduled"] == 800
    assert all(0 < s["client_cores"] < 2 for s in doc["schedules"].values())
    # The raw client sent the same schedule and had every answer in full.
    assert doc["schedules"]["1000"]["baseline"]["answered"] == 800
    assert all(0 < s["baseline"]["client_cores"] < 2 for s in doc["schedules"].values())
    assert "Poisson 1000 req/s" in stdout
    assert doc["shards"]["same_request_set"] is True
    assert doc["shards"]["exit_codes"] == [0, 0]
