"""``loadgen replay`` under the limits a machine sets, against the simulator on loopback:
a file-size limit (``RLIMIT_FSIZE``) that makes the recorder's writes fail like a full
disk ends in a one-line failure, never in a silent loss.

Was: a failing journal write ended in a traceback, exit 1, run.json left ``running``.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from loadgen.sim.launch import SimProcess
from traces.io import read_run_info, read_run_table, write_trace

SimFactory = Callable[..., SimProcess]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX resource limits")


def trace_of(path: Path, n: int) -> Path:
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [0.0] * n,
                "input_tokens": [8] * n,
                "output_tokens": [4] * n,
            }
        ),
        path,
    )
    return path


def replay(
    tmp_path: Path, server: SimProcess, n: int, *args: str, limits: Callable[[], None]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "loadgen.cli.root", "replay"),
            str(trace_of(tmp_path / "t.parquet", n)),
            *("--base-url", server.base_url, "-o", str(tmp_path / "run")),
            *("--no-progress", "--no-scrape-metrics", *args),
        ],
        preexec_fn=limits,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_a_recorder_that_cannot_write_stops_the_run_in_one_line(
    tmp_path: Path, sim: SimFactory
) -> None:
    def file_size_limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, resource.RLIM_INFINITY))

    done = replay(
        tmp_path, sim("--itl-ms", "1"), 8000, "--concurrency", "50", limits=file_size_limit
    )
    assert done.returncode == 4, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: run recorder: cannot write to ")
    assert "File too large" in line
    info = read_run_info(tmp_path / "run")
    assert info is not None
    assert info.status == "failed"
    assert info.result is not None
    assert 0 < info.result.rows < info.result.dispatched < 8000  # it stopped dispatching
    assert read_run_table(tmp_path / "run").num_rows == info.result.rows
