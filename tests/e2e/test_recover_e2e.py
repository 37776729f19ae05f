"""kill -9 in the middle of a real replay against the simulator, then ``loadgen recover``:
the rows the journal held come back, the lost count is checked against what the server
itself received, run.json says ``incomplete``, and ``analyze`` warns."""

from __future__ import annotations

import json
import os
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

from loadgen.sim.launch import SimProcess
from traces import schema as s
from traces.io import read_journal, read_run_info, write_trace

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


def _received(root_url: str, run_id: str) -> int:
    """Requests the simulator received, by its own per-request records."""
    with httpx.Client(timeout=10) as client:
        return sum(
            client.get(f"{root_url}/debug/requests/{run_id}-q{i}").status_code == 200
            for i in range(_N)
        )


@pytest.mark.slow
def test_kill_9_then_recover_accounts_for_every_request(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "20", "--itl-ms", "25")
    trace = _trace(tmp_path / "t.parquet")
    run_dir = tmp_path / "run"
    run_id = "killed"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "loadgen.cli.root", "replay", str(trace),
            "--base-url", server.base_url, "-o", str(run_dir), "--no-progress",
            "--run-id", run_id, "--no-scrape-metrics",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        journal = run_dir / s.PARTS_DIR / s.JOURNAL_FILE
        deadline = time.monotonic() + 30
        while not journal.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(1.3)  # past the first flush, well before the 3 s schedule ends
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    held = read_journal(journal).num_rows
    assert 0 < held < _N
    time.sleep(0.5)  # let the server see the dropped connections
    received = _received(server.root_url, run_id)

    res = _loadgen("recover", str(run_dir))
    assert res.returncode == 0, res.stderr
    info = read_run_info(run_dir)
    assert info is not None
    assert info.incomplete is not None
    assert info.status == "incomplete"
    assert not (run_dir / s.PARTS_DIR).exists()
    recovered = pq.read_metadata(run_dir / s.REQUESTS_FILE).num_rows
    assert recovered == held == info.incomplete.rows
    true_lost = received - recovered
    reported = info.incomplete.lost
    # A lower bound that misses at most what was sent in the last flush interval (1 s at
    # 100 req/s), never more than were lost.
    assert 0 < reported <= true_lost
    assert true_lost - reported <= _RATE * 1.0
    assert info.incomplete.dispatched <= received
    assert f"{reported} of them lost" in res.stdout
    print(  # the figures for the record (pytest -s)
        f"kill -9: held {held}, recovered {recovered}, server received {received}, "
        f"lost reported {reported}, true {true_lost}"
    )

    analyzed = _loadgen("analyze", str(run_dir), "--json")
    assert analyzed.returncode == 0, analyzed.stderr
    assert json.loads(analyzed.stdout)
    warnings = [line for line in analyzed.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert "incomplete" in warnings[0]

    gated = _loadgen("gate", str(run_dir), "--slo", "ttft_ms.p99<=100000")
    assert gated.returncode == 3, gated.stderr
    assert "incomplete" in gated.stderr

    again = _loadgen("recover", str(run_dir))
    assert again.returncode == 0
    assert "nothing to recover" in again.stdout


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
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        journal = run_dir / "shard-0" / s.PARTS_DIR / s.JOURNAL_FILE
        deadline = time.monotonic() + 60
        while not journal.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(2.3)  # the workers start 1 s after the journal opens; then 1.3 s of run
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
    assert info.incomplete.lost > 0
