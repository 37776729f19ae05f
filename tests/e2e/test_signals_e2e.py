"""Signals at random points of a real ``loadgen replay`` against the simulator, with every
request accounted for against the server's own count (``sim:requests_received_total``:
every generation request whose head arrived).

- SIGINT, SIGTERM: the replay stops gracefully; rows in ``requests.parquet`` == requests
  the server received, exactly.
- kill -9, then ``loadgen recover`` (or the first ``loadgen analyze``, which recovers on
  its own): rows recovered + lost reported == requests the server received. The lost
  count comes from the dispatch record (``loadgen.dispatched``), written just before each
  request's bytes go to its socket with no ``await`` in between, so at most one request
  per process can be recorded and not sent when the process dies: the tolerance is +1
  (reported may exceed the truth by one, never fall short); in practice it is exact.
- while the replay lives, ``loadgen recover`` refuses it (exit 2) and ``analyze`` leaves it
  alone.

The delays are drawn from seeded generators (the seeds are in the parameters); the default
cases take a few seconds each, ``LOADGEN_LONG_FUZZ=1`` runs many more points, both
transports, closed loop and two workers.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
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

_N = 600
_RATE = 200.0
_LONG = os.environ.get("LOADGEN_LONG_FUZZ") == "1"
_RECEIVED = re.compile(r"^sim:requests_received_total\{[^}]*\} ([0-9.e+]+)$", re.M)


def _trace(path: Path) -> Path:
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(_N)],
                "arrival_s": [i / _RATE for i in range(_N)],
                "input_tokens": [32] * _N,
                # Many in flight at any moment, many finished between two journal flushes.
                "output_tokens": [5 + (i * 37) % 40 for i in range(_N)],
            }
        ),
        path,
    )
    return path


def _received(server: SimProcess) -> int:
    text = httpx.get(f"{server.root_url}/metrics", timeout=10).text
    found = _RECEIVED.search(text)
    assert found is not None, "the simulator exposes no sim:requests_received_total"
    return int(float(found.group(1)))


@dataclass(frozen=True, slots=True, kw_only=True)
class _Ran:
    code: int
    stdout: str
    stderr: str


def _loadgen(*args: str) -> _Ran:
    """A command in this process (the replay is the separate process that matters; an
    interpreter per command would double the test's time)."""
    result = CliRunner().invoke(cli, list(args))
    return _Ran(code=result.exit_code, stdout=result.stdout, stderr=result.stderr)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Case:
    sig: signal.Signals
    seed: int
    transport: str = "fast"
    extra: tuple[str, ...] = ()
    workers: int = 1


def _replay(case: _Case, trace: Path, server: SimProcess, run_dir: Path) -> subprocess.Popen[str]:
    # No preflight: its probe would be a request the server counts and the run does not.
    return subprocess.Popen(
        [
            sys.executable, "-m", "loadgen.cli.root", "replay", str(trace),
            "--base-url", server.base_url, "-o", str(run_dir), "--no-progress",
            "--run-id", f"sig{case.seed}", "--no-scrape-metrics", "--no-preflight",
            "--model", DEFAULT_MODEL_NAME, "--transport", case.transport,
            "--workers", str(case.workers), *case.extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _dispatching(run_dir: Path, workers: int, proc: subprocess.Popen[str]) -> None:
    """Wait (bounded) until every shard has sent a request: the signal handlers are then
    installed and the dispatch record exists."""
    dirs = [run_dir] if workers == 1 else [run_dir / f"shard-{k}" for k in range(workers)]
    records = [d / s.PARTS_DIR / s.DISPATCH_FILE for d in dirs]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if all(r.exists() and r.stat().st_size > 0 for r in records):
            return
        time.sleep(0.01)
    raise AssertionError(f"the replay never dispatched (exit {proc.poll()})")


def _rows(run_dir: Path, workers: int) -> int:
    if workers == 1:
        return int(pq.read_metadata(run_dir / s.REQUESTS_FILE).num_rows)
    return sum(
        pq.read_metadata(run_dir / f"shard-{k}" / s.REQUESTS_FILE).num_rows for k in range(workers)
    )


def _shard_pid(parent: int, k: int) -> int:
    """Shard ``k``'s process (spawned workers, in start order)."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    pids = [
        pid
        for pid in sorted(map(int, children))
        if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    return pids[k]


def _run_case(case: _Case, tmp_path: Path, sim: SimFactory, *, via: str = "recover") -> str:
    """Run one case and check its accounting; return the figures as one line."""
    server = sim("--ttft-ms", "20", "--itl-ms", "10")
    trace = _trace(tmp_path / "t.parquet")
    run_dir = tmp_path / "run"
    rng = random.Random(case.seed)
    proc = _replay(case, trace, server, run_dir)
    try:
        _dispatching(run_dir, case.workers, proc)
        time.sleep(rng.uniform(0.2, 2.5))  # the run's schedule lasts 3 s
        target = proc.pid
        if case.sig == signal.SIGKILL and case.workers > 1:
            target = _shard_pid(proc.pid, rng.randrange(case.workers))
        os.kill(target, case.sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    time.sleep(0.3)  # the server reads what the dead process's sockets had sent
    received = _received(server)
    if case.sig != signal.SIGKILL:
        info = read_run_info(run_dir)
        assert info is not None
        if info.status == "interrupted":
            assert proc.returncode == 130, err  # README: an interrupted run exits 130
        else:  # a loaded machine: the replay ended first and the signal met the summary
            assert info.status == "completed", err
            assert proc.returncode in (0, -case.sig, 130), err
        rows = _rows(run_dir, case.workers)
        assert info.result is not None
        assert info.result.rows == rows
        assert not (run_dir / s.PARTS_DIR).exists()
        assert not list(run_dir.rglob(s.DISPATCH_FILE))
        assert not (run_dir / s.RUN_LOCK).exists()
        assert rows == received, f"{case}: {rows} rows, the server received {received}"
        return f"{case.sig.name} seed {case.seed}: rows {rows} == received {received}"
    if case.workers > 1:  # the session recovered the dead shard itself
        assert proc.returncode == 4, err
        assert "died (SIGKILL)" in err
    else:
        assert proc.returncode == -signal.SIGKILL
        if via == "recover":
            res = _loadgen("recover", str(run_dir))
            assert res.code == 0, res.stderr
            assert "of them lost (sent, never recorded)" in res.stdout
            again = _loadgen("recover", str(run_dir))
            assert again.code == 0, again.stderr
            assert "nothing to recover" in again.stdout
        else:
            res = _loadgen("analyze", str(run_dir), "--json")
            assert res.code == 0, res.stderr
            assert json.loads(res.stdout)
            lines = res.stderr.splitlines()
            assert lines[0].startswith(f"recovered {run_dir}: incomplete"), res.stderr
            assert any(line.startswith("warning:") and "incomplete" in line for line in lines)
            gated = _loadgen("gate", str(run_dir), "--slo", "ttft_ms.p99<=100000")
            assert gated.code == 3, gated.stderr
            assert "recovered" not in gated.stderr  # once is enough
            assert "incomplete" in gated.stderr
    info = read_run_info(run_dir)
    assert info is not None
    assert info.status == "incomplete"
    assert info.incomplete is not None
    assert info.incomplete.exact
    assert not list(run_dir.rglob(s.PARTS_DIR))
    assert not (run_dir / s.RUN_LOCK).exists()
    rows = _rows(run_dir, case.workers)
    assert rows == info.incomplete.rows
    true_lost = received - rows
    reported = info.incomplete.lost
    # +1 per process at most: a record written, the process killed before its write.
    assert 0 <= reported - true_lost <= 1, f"{case}: lost {reported} reported, {true_lost} true"
    assert 0 <= info.incomplete.dispatched - received <= 1
    shape = " ".join((case.transport, *case.extra))
    return (
        f"kill -9 seed {case.seed} ({shape}, workers {case.workers}): rows {rows} / "
        f"received {received}; lost reported "
        f"{reported}, true {true_lost}"
    )


_DEFAULT = [  # seeds whose kills fall after the first journal flush (1 s): rows and losses
    (_Case(sig=signal.SIGINT, seed=13), "recover"),
    (_Case(sig=signal.SIGTERM, seed=14, transport="httpx"), "recover"),
    (_Case(sig=signal.SIGKILL, seed=17), "recover"),
    (
        _Case(sig=signal.SIGKILL, seed=19, transport="httpx", extra=("--concurrency", "40")),
        "analyze",
    ),
]
_MORE = [
    (_Case(sig=sig, seed=seed, transport=transport, extra=extra, workers=workers), via)
    for seed in range(100, 106)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
    for transport, extra, workers, via in (
        ("fast", (), 1, "recover"),
        ("httpx", (), 1, "analyze"),
        ("fast", ("--concurrency", "40"), 1, "recover"),
        # A 6 s schedule: spawned workers may start a second or more late on a loaded
        # machine and send what was due at once, so 3 s could be over before the signal.
        ("fast", ("--time-scale", "2"), 2, "recover"),
    )
]


def _case_id(case: _Case) -> str:
    closed = "-closed" if "--concurrency" in case.extra else ""
    return f"{case.sig.name}-{case.seed}-{case.transport}-w{case.workers}{closed}"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize(
    ("case", "via"),
    _DEFAULT + (_MORE if _LONG else []),
    ids=lambda v: _case_id(v) if isinstance(v, _Case) else str(v),
)
def test_every_request_the_server_received_is_a_row_or_counted_lost(
    case: _Case, via: str, tmp_path: Path, sim: SimFactory
) -> None:
    print(_run_case(case, tmp_path, sim, via=via))  # the figures, for the record (-s)


@pytest.mark.slow
def test_a_live_run_is_neither_recovered_nor_replayed_into(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "20", "--itl-ms", "10")
    trace = _trace(tmp_path / "t.parquet")
    run_dir = tmp_path / "run"
    case = _Case(sig=signal.SIGINT, seed=0, extra=("--time-scale", "3"))  # a 9 s schedule
    proc = _replay(case, trace, server, run_dir)
    try:
        _dispatching(run_dir, 1, proc)
        refused = _loadgen("recover", str(run_dir))
        analyzed = _loadgen("analyze", str(run_dir), "--json")
        again = _loadgen(
            "replay", str(trace), "--base-url", server.base_url, "-o", str(run_dir),
            "--overwrite", "--no-preflight", "--model", DEFAULT_MODEL_NAME, "--no-progress",
        )  # fmt: skip
        assert proc.poll() is None, "the run ended before the checks: make it longer"
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert refused.code == 2, refused.stderr
    assert "a replay is still writing this run (pid" in refused.stderr
    assert analyzed.code == 0, analyzed.stderr
    assert "recovered" not in analyzed.stderr
    assert "is still running (pid" in analyzed.stderr
    assert again.code == 2, again.stderr
    assert "still writing this run" in again.stderr
    assert proc.returncode == 130, err  # README: an interrupted run exits 130
    info = read_run_info(run_dir)
    assert info is not None
    assert info.status == "interrupted"
    time.sleep(0.2)
    assert _rows(run_dir, 1) == _received(server)
