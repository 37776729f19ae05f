"""Smoke test: the client ingest benchmark runs end to end in its tiny mode.

No timing assertions: the machine running the tests is shared and noisy.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from benchrun import run_bench


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_client_ingest_tiny_runs_and_prints_the_table(tmp_path: Path) -> None:
    stdout, doc = run_bench(
        "client_ingest.py", "--quick", "--tiny", out_json=tmp_path / "out.json", timeout_s=50
    )
    for heading in ("client", "tok/s/core", "ratio", "CPU-s/Mtok", "lag p50 ms", "lag p99 ms"):
        assert heading in stdout
    for kind in ("raw-asyncio", "httpx-raw", "loadgen"):
        assert kind in stdout
    assert "FAILED" not in stdout
    assert set(doc["summary"]) >= {"raw-asyncio", "httpx-raw", "loadgen"}
