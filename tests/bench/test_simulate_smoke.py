"""Smoke test: the offline engine's benchmark runs end to end on a few hundred requests and
prints its figure beside the target. No timing assertion: the test machine is shared."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchrun import run_bench


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_simulate_bench_runs_and_prints_its_target(tmp_path: Path) -> None:
    stdout, doc = run_bench(
        "simulate.py", "--requests", "300", out_json=tmp_path / "out.json", timeout_s=110
    )
    assert "Mooncake format" in stdout
    assert "target <= 10 s" in stdout
    assert doc["requests"] == doc["served"] == 300
    assert doc["output_tokens"] > 0
