"""``loadgen replay`` under the limits a machine sets, against the simulator on loopback:
open files (``RLIMIT_NOFILE``) too few for the connections, and a file-size limit
(``RLIMIT_FSIZE``) that makes the recorder's writes fail like a full disk. Each ends in a
clear refusal, a raised limit or one-line failure, never in a silent empty file.

Was, before these checks: ``ulimit -n 256`` with ``--concurrency 1000`` wrote run.json
saying 2,000 rows, an empty requests.parquet and no journal, exit 0; a failing journal
write ended in a traceback, exit 1, run.json left ``running``.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadgen.sim.launch import SimProcess
from traces import schema as s
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


def open_files(soft: int, hard: int) -> Callable[[], None]:
    _, current = resource.getrlimit(resource.RLIMIT_NOFILE)
    if current != resource.RLIM_INFINITY and current < hard:
        pytest.skip(f"this process's hard limit on open files ({current}) is below {hard}")

    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return set_limit


def test_too_few_descriptors_for_the_concurrency_is_refused_before_the_run(
    tmp_path: Path, sim: SimFactory
) -> None:
    done = replay(tmp_path, sim(), 2000, "--concurrency", "1000", limits=open_files(256, 256))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: --concurrency 1000 needs about 10")
    assert "`ulimit -n 10" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_soft_limit_is_raised_for_the_concurrency(tmp_path: Path, sim: SimFactory) -> None:
    done = replay(tmp_path, sim(), 1200, "--concurrency", "600", limits=open_files(256, 4096))
    assert done.returncode == 0, done.stderr
    info = read_run_info(tmp_path / "run")
    assert info is not None
    assert info.result is not None
    table = pq.read_table(tmp_path / "run" / s.REQUESTS_FILE)
    assert table.num_rows == info.result.rows == 1200
    assert set(table.column(s.OUTCOME).to_pylist()) == {s.OUTCOME_OK}


@pytest.mark.slow
def test_an_open_loop_out_of_descriptors_keeps_every_row(tmp_path: Path, sim: SimFactory) -> None:
    """No cap, so no plan to check: the connects beyond the limit are rows, and the merge
    (after the connections are closed) keeps them all."""
    done = replay(tmp_path, sim("--ttft-ms", "300"), 600, limits=open_files(200, 200))
    assert done.returncode == 0, done.stderr
    info = read_run_info(tmp_path / "run")
    assert info is not None
    assert info.result is not None
    table = pq.read_table(tmp_path / "run" / s.REQUESTS_FILE)
    assert table.num_rows == info.result.rows == info.result.dispatched == 600
    outcomes = table.column(s.OUTCOME).to_pylist()
    assert outcomes.count(s.OUTCOME_CONNECT_ERROR) > 0
    assert outcomes.count(s.OUTCOME_CONNECT_ERROR) + outcomes.count(s.OUTCOME_OK) == 600
    assert not (tmp_path / "run" / s.PARTS_DIR).exists()


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
