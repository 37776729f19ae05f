"""Smoke test: the wake-up benchmark runs both mechanisms at each rate asked and reports
their figures. No timing assertions here: the machine running the tests is shared."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchrun import run_bench


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_wakeup_bench_reports_both_mechanisms(tmp_path: Path) -> None:
    stdout, doc = run_bench(
        "wakeup.py",
        "--rates",
        "200,1000",
        "--seconds",
        "0.3",
        "--rounds",
        "1",
        out_json=tmp_path / "out.json",
        timeout_s=50,
    )
    assert "CPU per 1k req/s" in stdout
    seen = {(r["rate"], r["kind"]) for r in doc["rows"]}
    assert seen == {(200.0, "spin"), (200.0, "timer"), (1000.0, "spin"), (1000.0, "timer")}
    for row in doc["rows"]:
        assert row["cpu"] > 0
        assert 0 < row["on_time"] <= 1
        assert row["p99_ms"] >= 0  # the wait never returns before its due time
