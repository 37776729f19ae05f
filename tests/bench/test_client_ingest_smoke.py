"""Smoke test: the client ingest benchmark runs end to end in its tiny mode.

No timing assertions: the machine running the tests is shared and noisy.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "client_ingest.py"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_client_ingest_tiny_runs_and_prints_the_table(tmp_path: Path) -> None:
    out_json = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--tiny", "--json", str(out_json)],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        cwd=SCRIPT.parents[1],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for heading in ("client", "tok/s/core", "ratio", "CPU-s/Mtok", "lag p50 ms", "lag p99 ms"):
        assert heading in proc.stdout
    for kind in ("raw-asyncio", "httpx-raw", "loadgen"):
        assert kind in proc.stdout
    assert "FAILED" not in proc.stdout
    assert out_json.exists()
