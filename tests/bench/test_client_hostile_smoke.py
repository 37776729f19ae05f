"""Smoke test: the hostile-server benchmark runs end to end in its quick mode, one row per
scenario with the outcome each must have. No timing or memory assertions here: the
machine running the tests is shared and noisy (tests/loadgen/test_hostile.py checks the
bounds on ratios and on the client's own allocations)."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchrun import run_bench

OUTCOMES = {
    "endless_error": "http_error",
    "huge_error": "http_error",
    "long_line /2": "ok",
    "long_line": "ok",
    "cr_only /2": "ok",
    "cr_only": "ok",
    "close_delimited": "ok",
    "http10": "ok",
    "garbage": "protocol_error",
    "redirect": "http_error",
    "continue": "ok",
    "bad_chunk": "protocol_error",
    "endless_head": "protocol_error",
}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_hostile_quick_runs_and_prints_every_scenario(tmp_path: Path) -> None:
    stdout, doc = run_bench(
        "client_hostile.py", "--quick", out_json=tmp_path / "out.json", timeout_s=110
    )
    for heading in ("scenario", "outcome", "loop CPU s", "stall ms", "peak RSS MB", "ratio"):
        assert heading in stdout
    assert "FAILED" not in stdout
    assert {r["label"]: r["outcome"] for r in doc["rows"]} == OUTCOMES
    for row in doc["rows"]:
        assert row["peak_rss_mb"] > 0
        assert row["cpu_s"] >= 0
