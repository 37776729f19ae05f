"""Smoke test: the closed-loop TTFT benchmark replays a few streams against the stub server
and reports the error of the first wave and of the rest, and the stall log. No timing
assertion: the machine running the tests is shared."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchrun import run_bench


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_closed_loop_ttft_bench_reports_both_waves(tmp_path: Path) -> None:
    stdout, doc = run_bench(
        "closed_loop_ttft.py",
        *("--streams", "8", "--itl-ms", "5", "--tokens", "10", "--seconds", "1"),
        out_json=tmp_path / "out.json",
        timeout_s=110,
    )
    assert "target mean <= 1 ms, p99 <= 3 ms" in stdout
    assert "event-loop stalls over 20 ms" in stdout
    assert doc["requests"] == doc["ok"] > 8
    assert doc["first_wave"]["n"] == 8
    assert doc["rest"]["n"] == doc["ok"] - 8
    for wave in ("first_wave", "rest"):
        summary = doc[wave]
        assert summary["min_ms"] <= summary["median_ms"] <= summary["max_ms"]
        assert 0.0 <= summary["positive_share"] <= 1.0
