"""Run one of ``bench/``'s scripts as a real process, for the benchmarks' smoke tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_bench(script: str, *args: str, out_json: Path, timeout_s: float) -> tuple[str, Any]:
    """Run ``bench/<script>`` with ``args`` and ``--json out_json``; assert it exited 0 and
    return what it printed and the JSON it wrote."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args, "--json", str(out_json)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        cwd=BENCH.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(out_json.read_text())
