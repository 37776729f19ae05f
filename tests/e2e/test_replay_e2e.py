"""End to end: the replay engine against the simulator, a real HTTP server on loopback.

Nothing here mocks the transport: the timing path is the one users run.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from loadgen.cli.root import cli
from loadgen.clock import Clock
from loadgen.run.health import CLIENT_BOUND_CPU, CLIENT_BOUND_LAG_MS
from loadgen.run.session import SessionOptions, SessionResult, run_session
from loadgen.sim.launch import SimProcess
from traces import schema as s
from traces.io import read_run_info, write_trace

pytestmark = pytest.mark.serial  # times a real server or process: run alone

SimFactory = Callable[..., SimProcess]


def make_trace(
    path: Path,
    n: int,
    *,
    rate: float,
    input_tokens: int = 32,
    output_tokens: int = 10,
    api: str = "chat",
) -> Path:
    arrivals = [i / rate for i in range(n)]
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": arrivals,
                "input_tokens": [input_tokens] * n,
                "output_tokens": [output_tokens] * n,
                "api": [api] * n,
            }
        ),
        path,
    )
    return path


def replay(opts: SessionOptions) -> SessionResult:
    return asyncio.run(run_session(opts, install_signal_handlers=False))


def rows(run_dir: Path) -> list[dict[str, object]]:
    return pq.read_table(run_dir / s.REQUESTS_FILE).to_pylist()  # type: ignore[no-any-return]


def server_records(sim: SimProcess, x_request_ids: list[str]) -> dict[str, dict[str, object]]:
    """The simulator's record of each request, by X-Request-Id (one connection for all)."""
    records = {}
    with httpx.Client() as http:
        for x_request_id in x_request_ids:
            resp = http.get(f"{sim.root_url}/debug/requests/{x_request_id}")
            resp.raise_for_status()
            records[x_request_id] = resp.json()
    return records


CLOCKS_AGREE_MS = 0.01
"""How far two CPUs' readings of one CLOCK_MONOTONIC may disagree: processes on different
(virtual) CPUs read it from their own TSC, which on a VM can be a microsecond apart."""


def at(values: list[float], fraction: float) -> float:
    """The value ``fraction`` of the way up the sorted ``values`` (the nearest rank below)."""
    ordered = sorted(values)
    return ordered[int(fraction * (len(ordered) - 1))]


@pytest.mark.slow
def test_tokens_ttft_and_itl_match_the_simulator(tmp_path: Path, sim: SimFactory) -> None:
    n, tokens = 24, 12
    server = sim("--ttft-ms", "40", "--itl-ms", "15")
    trace = make_trace(tmp_path / "t.parquet", n, rate=12.0, output_tokens=tokens)
    result = replay(
        SessionOptions(trace_path=trace, run_dir=tmp_path / "run", base_url=server.base_url)
    )
    table = rows(result.run_dir)
    assert len(table) == n
    info = read_run_info(result.run_dir)
    assert info is not None
    offset = info.clock.anchor_wall_ns - info.clock.anchor_mono_ns  # epoch ns to perf_counter
    late_ms: list[float] = []  # the simulator: each write after its due time
    first_ms: list[float] = []  # the client: each first-token stamp after its write
    later_ms: list[float] = []  # the client: each later token's stamp after its write
    ttfts: list[float] = []
    itls: list[float] = []
    records = server_records(server, [str(row["x_request_id"]) for row in table])
    for row in table:
        assert row["outcome"] == s.OUTCOME_OK
        offsets = row["chunk_offsets_us"]
        sent, first = row["sent_ns"], row["first_token_ns"]
        assert isinstance(offsets, list)
        assert isinstance(sent, int)
        assert isinstance(first, int)
        assert len(offsets) == row["completion_tokens"] == tokens  # one stamp per token
        assert offsets == sorted(offsets)
        # TTFT's stamp is the first chunk's (the offsets are whole microseconds, rounded down).
        assert 0 <= first - (sent + offsets[0] * 1000) < 1000
        ttfts.append((first - sent) / 1e6)
        itls.extend((b - a) / 1e3 for a, b in itertools.pairwise(offsets))
        rec = records[str(row["x_request_id"])]
        received, due, writes = rec["received_ns"], rec["chunk_due_ns"], rec["chunk_write_ns"]
        assert isinstance(received, int)
        assert isinstance(due, list)
        assert isinstance(writes, list)
        # The simulator's plan has no clock noise in it: the first token 40 ms after the
        # request arrived, then one every 15 ms, to the nanosecond.
        assert due == [received + 40_000_000 + k * 15_000_000 for k in range(tokens)]
        assert len(writes) == tokens
        assert (received - sent + offset) / 1e6 > -CLOCKS_AGREE_MS  # never before it is sent
        stamps = [first - offset] + [sent - offset + us * 1000 for us in offsets[1:]]
        for k, (d, w, t) in enumerate(zip(due, writes, stamps, strict=True)):
            late_ms.append((w - d) / 1e6)
            (first_ms if k == 0 else later_ms).append((t - w) / 1e6)
    lag_ms = first_ms + later_ms
    print(
        f"\nsimulator lateness ms: median {median(late_ms):.3f}, p90 {at(late_ms, 0.9):.3f}, "
        f"p99 {at(late_ms, 0.99):.3f}; client stamp lag ms: min {min(lag_ms):.3f}, first "
        f"tokens median {median(first_ms):.3f}, later median {median(later_ms):.3f}, p90 "
        f"{at(lag_ms, 0.9):.3f}; client TTFT median {median(ttfts):.3f} ms, ITL median "
        f"{median(itls):.3f} ms"
    )
    # Exact, up to the clock (and a later chunk's stamp, rebuilt from whole microseconds, is
    # up to one short): the simulator never writes early, the client never stamps a chunk
    # before it was written.
    assert min(late_ms) > -CLOCKS_AGREE_MS, min(late_ms)
    assert min(lag_ms) > -CLOCKS_AGREE_MS, min(lag_ms)
    # The rest is measured against this run's own jitter. The simulator's lateness is how
    # long this machine took to wake a process for a chunk (tens of microseconds idle,
    # milliseconds under load); the client's stamp lag is a loopback hop and one such
    # wake-up. A stamp taken late by construction (after parsing, with a fixed offset, at
    # the next read's time) moves all the stamps it touches, the promptest included; load
    # only delays some. So: the promptest stamp is no later than the simulator's median
    # lateness; the first token's promptest is no later than the later tokens' median plus
    # this run's jitter (the simulator's lateness from its median to its p90): on some hosts
    # every first token lags a few microseconds more than the later ones (2026-12-04, both
    # before and after that day's changes: all 24 above 0.062 ms against a later median of
    # 0.055, the simulator's median to p90 spanning 0.04-0.07 ms), while a stamp late by
    # construction is later by a parse or a read; half of either kind come within the
    # simulator's p90 lateness, nine in ten within its p99.
    assert min(lag_ms) <= median(late_ms), (min(lag_ms), median(late_ms))
    jitter = at(late_ms, 0.9) - median(late_ms)
    assert min(first_ms) <= median(later_ms) + jitter, (sorted(first_ms), median(later_ms), jitter)
    for lag in (first_ms, later_ms):
        assert median(lag) <= at(late_ms, 0.9), (median(lag), at(late_ms, 0.9))
    assert at(lag_ms, 0.9) <= at(late_ms, 0.99), (at(lag_ms, 0.9), at(late_ms, 0.99))


@pytest.mark.slow
def test_open_loop_schedule_is_honoured(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "5", "--itl-ms", "5")
    trace = make_trace(tmp_path / "t.parquet", 60, rate=20.0, output_tokens=4)
    result = replay(
        SessionOptions(trace_path=trace, run_dir=tmp_path / "run", base_url=server.base_url)
    )
    table = rows(result.run_dir)
    assert len(table) == 60
    info = read_run_info(result.run_dir)
    assert info is not None
    assert info.result is not None
    assert info.health is not None
    dues = sorted(int(r["due_ns"]) for r in table)  # type: ignore[call-overload]
    # Due times are absolute, counted from the run's start: they never drift.
    assert dues[0] == info.result.start_ns
    assert all(abs(b - a - 50_000_000) <= 1 for a, b in itertools.pairwise(dues)), dues
    lateness = [
        (int(r["sent_ns"]) - int(r["due_ns"])) / 1e6  # type: ignore[call-overload]
        for r in table
    ]
    loop = info.health.loop_lag_ms
    print(
        f"\nsend lateness ms: min {min(lateness):.3f}, p25 {at(lateness, 0.25):.3f}, median "
        f"{median(lateness):.3f}, max {max(lateness):.3f}; loop lag ms: median "
        f"{loop.p50_ms:.3f}, p99 {loop.p99_ms:.3f}"
    )
    assert min(lateness) >= 0.0, min(lateness)  # never sent before its time
    # How late a request leaves is how late the replay's event loop runs it, which the run
    # samples itself (run.json's loop lag: a 10 ms sleep's overshoot, timer grain included).
    # A sender that spins through its last stretch pays no timer grain but, on a busy
    # machine, loses its core more often than a sleeper does; a sender late by design
    # (a fixed delay, a chained relative sleep) is late every time. So: a quarter of the
    # requests leave within the loop's median lag, half within its p99. The due-time
    # timer (a timerfd read, then the send) costs a hand-off a plain sleep does not: its
    # floor was 0.13 ms against a loop median of 0.14 ms, and on a busy host the whole
    # distribution sat 0.1 ms higher against the same median (a fresh clone failed by
    # 17 us with 0.1 ms allowed), so 0.15 ms is allowed on top of the median; a sender late
    # by design is late by far more (one on a 1 ms timer grain: a p25 near 0.35 ms).
    # (The p99 <= 2 ms target is measured in bench/replay_schedule.py, on thousands.)
    assert at(lateness, 0.25) <= loop.p50_ms + 0.15, (sorted(lateness), loop)
    assert median(lateness) <= loop.p99_ms, (sorted(lateness), loop)
    # The generator's own work at 20 requests/s is far from a core, so a client-bound flag
    # can only come from the lateness measured above.
    assert info.health.cpu_utilisation < CLIENT_BOUND_CPU, info.health
    assert result.client_bound == (info.health.schedule_lag_ms.p99_ms > CLIENT_BOUND_LAG_MS)


@pytest.mark.slow
def test_time_scale_compresses_the_schedule(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "1", "--itl-ms", "1")
    trace = make_trace(tmp_path / "t.parquet", 5, rate=2.0, output_tokens=2)
    result = replay(
        SessionOptions(
            trace_path=trace, run_dir=tmp_path / "run", base_url=server.base_url, time_scale=0.25
        )
    )
    dues = sorted(r["due_ns"] for r in rows(result.run_dir))  # type: ignore[type-var]
    assert (dues[-1] - dues[0]) / 1e6 == pytest.approx(500.0, abs=0.01)  # type: ignore[operator]


@pytest.mark.slow
def test_closed_loop_keeps_exactly_n_in_flight(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "10", "--itl-ms", "3")
    trace = make_trace(tmp_path / "t.parquet", 40, rate=1.0, output_tokens=6)
    n = 4
    result = replay(
        SessionOptions(
            trace_path=trace, run_dir=tmp_path / "run", base_url=server.base_url, concurrency=n
        )
    )
    table = sorted(rows(result.run_dir), key=lambda r: r["sent_ns"])  # type: ignore[arg-type,return-value]
    assert len(table) == 40
    spans = [(int(r["sent_ns"]), int(r["end_ns"])) for r in table]  # type: ignore[call-overload]
    # Sweep the send/end events: in flight never exceeds n, and between the n-th send and
    # the last refill it stays at n except for each worker's turnaround between its
    # response's end and its next send (microseconds to a millisecond of client work).
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    level, peak, area, window = 0, 0, 0, 0
    lo, hi = spans[n - 1][0], spans[len(spans) - n][0]
    for (t, step), (t_next, _) in itertools.pairwise(events):
        level += step
        peak = max(peak, level)
        a, b = max(t, lo), min(t_next, hi)
        if b > a:
            window += b - a
            area += (b - a) * level
    assert peak == n
    assert area / window / n > 0.95, area / window


@pytest.mark.slow
def test_faults_become_rows_with_outcomes(tmp_path: Path, sim: SimFactory) -> None:
    server = sim(
        "--ttft-ms",
        "2",
        "--itl-ms",
        "2",
        "--error-rate",
        "0.2",
        "--rate-429",
        "0.1",
        "--drop-rate",
        "0.2",
        "--seed",
        "7",
    )
    trace = make_trace(tmp_path / "t.parquet", 60, rate=100.0, output_tokens=10)
    result = replay(
        # Half the requests fail on purpose here: a preflight probe could meet only faults.
        SessionOptions(
            trace_path=trace,
            run_dir=tmp_path / "run",
            base_url=server.base_url,
            model="sim-model",
            preflight=False,
        )
    )
    table = rows(result.run_dir)
    assert len(table) == 60  # a failed request is a row, never lost
    by = {o: [r for r in table if r["outcome"] == o] for o in s.OUTCOMES}
    assert by[s.OUTCOME_HTTP_ERROR]
    assert by[s.OUTCOME_DISCONNECT]
    assert by[s.OUTCOME_OK]
    assert {r["http_status"] for r in by[s.OUTCOME_HTTP_ERROR]} <= {500, 429}
    for r in by[s.OUTCOME_HTTP_ERROR]:
        assert str(r["error"]).startswith(f"HTTP {r['http_status']}")
    for r in by[s.OUTCOME_DISCONNECT]:
        chunks = r["chunk_offsets_us"]
        assert isinstance(chunks, list)
        assert 0 < len(chunks) < 10
    assert (
        len(by[s.OUTCOME_OK]) + len(by[s.OUTCOME_HTTP_ERROR]) + len(by[s.OUTCOME_DISCONNECT]) == 60
    )


@pytest.mark.slow
def test_sigint_leaves_a_readable_run(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "50", "--itl-ms", "100")
    trace = make_trace(tmp_path / "t.parquet", 200, rate=20.0, output_tokens=50)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadgen.cli.root",
            "replay",
            str(trace),
            "--base-url",
            server.base_url,
            "-o",
            str(run_dir),
            "--no-progress",
            "--grace",
            "0.5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (run_dir / s.PARTS_DIR).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    # README: an interrupted run exits 130, says so in one line, and keeps its rows.
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("interrupted: ")], err
    assert (run_dir / "results.json").exists()
    info = read_run_info(run_dir)
    assert info is not None
    assert info.result is not None
    assert info.status == "interrupted"
    table = pq.read_table(run_dir / s.REQUESTS_FILE)
    dispatched = info.result.dispatched
    assert 10 < dispatched < 200
    assert table.num_rows == dispatched  # every dispatched request has its row
    outcomes = set(table.column(s.OUTCOME).to_pylist())
    assert s.OUTCOME_CANCELLED in outcomes
    assert outcomes <= {s.OUTCOME_OK, s.OUTCOME_CANCELLED}


@pytest.mark.slow
def test_api_key_never_reaches_any_file(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "1", "--itl-ms", "1")
    trace = make_trace(tmp_path / "t.parquet", 3, rate=50.0, output_tokens=2)
    secret = "sk-test-5ecret-value-123"
    run_dir = tmp_path / "run"
    res = CliRunner().invoke(
        cli,
        [
            "replay",
            str(trace),
            "--base-url",
            server.base_url,
            "-o",
            str(run_dir),
            "--no-progress",
            "--header",
            "X-Api-Key: " + secret,
            "--api-key-env",
            "LOADGEN_TEST_KEY",
        ],
        env={"LOADGEN_TEST_KEY": secret},
    )
    assert res.exit_code == 0, res.output
    assert secret not in res.output
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert secret.encode() not in path.read_bytes(), path
    cfg = json.loads((run_dir / s.RUN_JSON).read_text())["config"]
    assert cfg["api_key_set"] is True
    assert cfg["headers"] == {"X-Api-Key": "<redacted>"}


def test_malformed_trace_exits_2_naming_row_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    pq.write_table(
        pa.table(
            {
                "request_id": ["a", "b"],
                "arrival_s": [1.0, 0.5],
                "input_tokens": [1, 1],
                "output_tokens": [1, 1],
            }
        ),
        path,
    )
    res = CliRunner().invoke(cli, ["replay", str(path), "--no-progress"])
    assert res.exit_code == 2
    assert "row 1" in res.output
    assert "arrival_s" in res.output
    assert "Traceback" not in res.output
    missing = CliRunner().invoke(cli, ["replay", str(tmp_path / "nope.parquet")])
    assert missing.exit_code == 2
    assert "no such trace file" in missing.output


def test_unreachable_endpoint_exits_4(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t.parquet", 2, rate=1.0)
    res = CliRunner().invoke(
        cli,
        [
            "replay",
            str(trace),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--no-progress",
            "-o",
            str(tmp_path / "run"),
        ],
    )
    assert res.exit_code == 4
    assert "unreachable" in res.output


def test_clock_is_monotonic_epoch_ns() -> None:
    clock = Clock()
    a = clock.now_ns()
    b = clock.now_ns()
    assert b >= a
    assert abs(a - time.time_ns()) < 50_000_000
    assert clock.from_mono_ns(clock.to_mono_ns(a)) == a


@pytest.mark.slow
def test_two_workers_replay_exactly_the_same_request_set(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "2", "--itl-ms", "1")
    trace = make_trace(tmp_path / "t.parquet", 41, rate=40.0, output_tokens=3)
    one = replay(
        SessionOptions(trace_path=trace, run_dir=tmp_path / "one", base_url=server.base_url)
    )
    two = replay(
        SessionOptions(
            trace_path=trace, run_dir=tmp_path / "two", base_url=server.base_url, workers=2
        )
    )
    from traces.io import read_run_table

    t1, t2 = read_run_table(one.run_dir), read_run_table(two.run_dir)
    assert sorted(t1.column(s.REQUEST_ID).to_pylist()) == sorted(
        t2.column(s.REQUEST_ID).to_pylist()
    )
    assert set(t2.column(s.WORKER).to_pylist()) == {0, 1}
    assert set(t2.column(s.OUTCOME).to_pylist()) == {s.OUTCOME_OK}
    # Both shards share one time axis: due times are the trace's own offsets from one start.
    dues = sorted(t2.column(s.DUE_NS).to_pylist())
    gaps = {round((b - a) / 1e6, 3) for a, b in itertools.pairwise(dues)}
    assert gaps == {25.0}
    info = read_run_info(two.run_dir)
    assert info is not None
    assert info.health is not None
    assert info.result is not None
    assert len(info.health.workers) == 2
    assert info.result.rows == 41
