"""Smoke test: the --max-rate benchmark runs end to end in its quick mode and prints every
rate asked beside its target. No timing assertions here: the machine running the tests is
shared and noisy."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchrun import run_bench


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_max_rate_quick_runs_and_prints_each_rate(tmp_path: Path) -> None:
    stdout, doc = run_bench(
        "max_rate.py", "--quick", "--smoke", out_json=tmp_path / "out.json", timeout_s=110
    )
    assert "[target within 1%]" in stdout
    assert [r["asked_per_s"] for r in doc["rates"]] == [1.0, 50.0, 200.0, 1000.0, 5000.0]
    for r in doc["rates"]:
        assert r["exit_code"] == 0
        assert r["ok_share"] == 1.0
        assert r["achieved_per_s"] > 0
