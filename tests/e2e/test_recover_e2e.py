"""kill -9 of one ``--workers 2`` shard in the middle of a real replay against the
simulator: the replay exits 4, merges the dead shard's journal, and counts what it lost
exactly against what the server itself received (kill -9 of the whole replay, SIGINT and
SIGTERM: ``test_signals_e2e``)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from loadgen.cli.root import cli
from loadgen.sim.config import DEFAULT_MODEL_NAME
from loadgen.sim.launch import SimProcess
from traces import schema as s
from traces.io import read_run_info, write_trace

pytestmark = pytest.mark.serial  # times a real server or process: run alone

SimFactory = Callable[..., SimProcess]

_N = 300
_RATE = 100.0


def _trace(path: Path) -> Path:
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(_N)],
                "arrival_s": [i / _RATE for i in range(_N)],
                "input_tokens": [32] * _N,
                # Long enough that many are in flight at the kill, short enough that many
                # finish and are flushed before it.
                "output_tokens": [5 + (i * 37) % 60 for i in range(_N)],
            }
        ),
        path,
    )
    return path


def _loadgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen.cli.root", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _received(root_url: str) -> int:
    """Generation requests the simulator received (``sim:requests_received_total``)."""
    text = httpx.get(f"{root_url}/metrics", timeout=10).text
    found = re.search(r"^sim:requests_received_total\{[^}]*\} ([0-9.e+]+)$", text, re.M)
    assert found is not None
    return int(float(found.group(1)))


def _shard_pids(parent: int) -> list[int]:
    """The replay's worker processes (spawned), in start order."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    pids = []
    for pid in sorted(map(int, children)):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"spawn_main" in cmdline:
            pids.append(pid)
    return pids


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_a_dead_worker_is_exit_4_and_its_rows_are_merged(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "20", "--itl-ms", "25")
    trace = _trace(tmp_path / "t.parquet")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "loadgen.cli.root", "replay", str(trace),
            "--base-url", server.base_url, "-o", str(run_dir), "--no-progress",
            "--run-id", "dead", "--no-scrape-metrics", "--workers", "2",
            "--no-preflight", "--model", DEFAULT_MODEL_NAME,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        records = [run_dir / f"shard-{k}" / s.PARTS_DIR / s.DISPATCH_FILE for k in (0, 1)]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if all(r.exists() and r.stat().st_size > 0 for r in records):
                break  # both shards are sending
            time.sleep(0.01)
        time.sleep(1.3)  # past the first journal flush, before the 3 s schedule ends
        shards = _shard_pids(proc.pid)
        assert len(shards) == 2
        os.kill(shards[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 4, err
    assert "worker 0 died (SIGKILL)" in err
    info = read_run_info(run_dir)
    assert info is not None
    assert info.incomplete is not None
    assert info.status == "incomplete"
    assert "worker 0 died" in info.incomplete.cause
    for k in (0, 1):
        assert (run_dir / f"shard-{k}" / s.REQUESTS_FILE).exists()
        assert not (run_dir / f"shard-{k}" / s.PARTS_DIR).exists()
    rows = [pq.read_metadata(run_dir / f"shard-{k}" / s.REQUESTS_FILE).num_rows for k in (0, 1)]
    assert rows[1] == _N // 2  # the live shard finished its half
    assert 0 < rows[0] < _N // 2
    assert info.incomplete.rows == sum(rows)
    assert info.incomplete.exact
    time.sleep(0.3)  # the server reads what the dead process's sockets had sent
    true_lost = _received(server.root_url) - sum(rows)
    # The dispatch record: exact, or one too many if the shard died between a record and
    # its write (loadgen.dispatched).
    assert 0 <= info.incomplete.lost - true_lost <= 1
    assert not (run_dir / s.RUN_LOCK).exists()


def _gone(pid: int) -> bool:
    """The process has ended (reaped, or a zombie nobody reaps in a container)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_workers_die_with_their_killed_parent(tmp_path: Path, sim: SimFactory) -> None:
    """kill -9 of the ``--workers`` parent: its workers stop too (PR_SET_PDEATHSIG) and
    give up the run's lock, so that ``loadgen recover`` can merge the run at once."""
    server = sim("--ttft-ms", "5", "--itl-ms", "5")
    trace = tmp_path / "t.parquet"
    n = 600  # over 30 s: the workers would not end by themselves while the test waits
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [i / 20 for i in range(n)],
                "input_tokens": [32] * n,
                "output_tokens": [5] * n,
            }
        ),
        trace,
    )
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "loadgen.cli.root", "replay", str(trace),
            "--base-url", server.base_url, "-o", str(run_dir), "--no-progress",
            "--run-id", "orphans", "--no-scrape-metrics", "--workers", "2",
            "--no-preflight", "--model", DEFAULT_MODEL_NAME, "--grace", "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    shards: list[int] = []
    try:
        records = [run_dir / f"shard-{k}" / s.PARTS_DIR / s.DISPATCH_FILE for k in (0, 1)]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if all(r.exists() and r.stat().st_size > 0 for r in records):
                break  # both shards are sending
            time.sleep(0.01)
        shards = _shard_pids(proc.pid)
        assert len(shards) == 2
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 15  # --grace 1, then each merges its shard
        while time.monotonic() < deadline and not all(_gone(pid) for pid in shards):
            time.sleep(0.05)
        alive = [pid for pid in shards if not _gone(pid)]
        assert not alive, f"workers {alive} outlived their parent"
    finally:
        proc.kill()
        for pid in shards:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    res = CliRunner().invoke(cli, ["recover", str(run_dir)])  # in this process: faster
    assert res.exit_code == 0, res.output
    assert not (run_dir / s.RUN_LOCK).exists()
