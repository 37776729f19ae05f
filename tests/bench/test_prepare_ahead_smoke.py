"""Smoke test: the body-preparer benchmark runs both modes (bodies built on the loop, and
ahead of time by the preparer process) on a five-request trace with every kind of body,
and prints its figures and the target. No timing assertion: the machine is shared."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchrun import run_bench


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_prepare_ahead_bench_runs_both_modes(tmp_path: Path) -> None:
    stdout, doc = run_bench(
        "prepare_ahead.py",
        *("--requests", "5", "--image-side", "64", "--loop-bodies", "1"),
        out_json=tmp_path / "out.json",
        timeout_s=170,
    )
    assert "target <= 2 ms" in stdout
    assert "(b) the loop's own CPU per body" in stdout
    assert doc["kinds"] == {"huge": 1, "images": 1, "short": 3}
    for mode in ("inline", "ahead"):
        (run,) = doc["runs"][mode]
        assert run["exit_code"] == 0
        assert run["ok"] == run["requests"] == 5
    assert doc["runs"]["inline"][0]["prepare_ahead"] is None
    assert doc["runs"]["ahead"][0]["prepare_ahead"]["bodies"] >= 2
    assert set(doc["loop_cost"]) == {"1M-token prompt", "16 images"}
