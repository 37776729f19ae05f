"""Smoke test: the analysis-at-scale benchmark generates a small run and measures each
command it is asked for (exit code, wall time, peak RSS). No timing assertions here."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchrun import run_bench


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_analysis_scale_measures_each_command(tmp_path: Path) -> None:
    stdout, doc = run_bench(
        "analysis_scale.py",
        "--requests",
        "300",
        "--tokens",
        "8",
        "--commands",
        "analyze,decompose",
        "--keep",
        str(tmp_path / "runs"),
        out_json=tmp_path / "out.json",
        timeout_s=110,
    )
    assert "300 requests x 8 tokens" in stdout
    assert [r["command"] for r in doc] == ["analyze", "decompose"]
    for row in doc:
        assert row["rc"] == 0, row
        assert row["wall_s"] > 0
        assert row["cpu_s"] > 0
        assert row["peak_mib"] > 0
