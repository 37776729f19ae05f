"""Smoke test: the record-cost benchmark runs every way, checks that they write the same
rows (it exits non-zero otherwise) and reports each. No timing assertions here: the
machine running the tests is shared."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchrun import run_bench


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_record_cost_bench_reports_every_way(tmp_path: Path) -> None:
    stdout, doc = run_bench(
        "record_cost.py",
        "--requests",
        "300",
        "--rounds",
        "1",
        "--tokens",
        "4",
        out_json=tmp_path / "out.json",
        timeout_s=50,
    )
    assert "rows: saves" in stdout
    assert set(doc["samples_us"]) == {"common", "record", "rows", "columns"}
    assert all(len(v) == 1 and v[0] > 0 for v in doc["samples_us"].values())
