"""The replay's client against each scenario of the hostile server (``hostile.py``):
the row it records, the memory it took, and, for the long events, how its time grows.

Through the real client (``StreamingClient``) and the fast transport, on both
implementations of the feed where the body is SSE. Memory is the peak of Python's
allocations during the request (``tracemalloc``: the bytes the client held, bodies and
buffers included, not the test process's RSS); time is the client thread's CPU time with
the server on a thread of its own, compared between two sizes of the same scenario (a
ratio, not a number of seconds). Issue 19 measured, before: a 500 with an endless body
held every byte (1,635 MB in 25 s), a 16 MB line and a CR-only stream took time quadratic
in their size, and close-delimited bodies, garbage, redirects, ``100 Continue`` and a bad
chunk after good ones were recorded with the wrong outcome or status.
"""

from __future__ import annotations

import asyncio
import threading
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from feeds import IMPLS
from hostile import SCENARIOS, hostile_server, hostile_server_thread
from scripted import scripted_server

from loadgen.cli.replay import replay
from loadgen.client import PreparedRequest, StreamingClient
from loadgen.clock import Clock
from loadgen.run.shard import make_transport
from loadgen.stream.sse import DEFAULT_MAX_EVENT_BYTES
from traces import schema as s
from traces.io import read_run_info, write_trace
from traces.records import RunRow, TraceRequest

pytestmark = pytest.mark.serial

MIB = 1024 * 1024
KINDS = ["fast", "httpx"]
"""The replay's transports (``--transport``): the same row for the same server bytes."""


@dataclass(frozen=True, slots=True)
class Measured:
    record: RunRow
    peak_bytes: int
    """Peak of Python's allocations during the request (tracemalloc)."""
    cpu_s: float
    """CPU time of the thread that ran the client."""


async def one_request(
    url: str,
    *,
    kind: str = "fast",
    native: bool = True,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    timeout_s: float = 10.0,
) -> Measured:
    clock = Clock()
    transport = make_transport(kind, clock.now_ns, max_connections=2)
    records: list[RunRow] = []
    async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(timeout_s)) as http:
        client = StreamingClient(
            http,
            base_url=url + "/v1",
            now_ns=clock.now_ns,
            run_id="t",
            timeout_s=timeout_s,
            transport=transport,
            native_feed=native,
            max_event_bytes=max_event_bytes,
        )
        trace = TraceRequest(
            index=0, request_id="h", arrival_s=0.0, input_tokens=1, output_tokens=1
        )
        job = client.ready(
            PreparedRequest(trace=trace, x_request_id="t-h", path="/chat/completions", body=b"{}")
        )
        with measuring() as got:
            await client.execute(job, clock.now_ns(), records.append)
    (record,) = records
    return Measured(record, got.peak, got.cpu)


@dataclass(slots=True)
class _Usage:
    peak: int = 0
    cpu: float = 0.0


@contextmanager
def measuring() -> Iterator[_Usage]:
    usage = _Usage()
    tracemalloc.start()
    tracemalloc.reset_peak()
    start = time.thread_time()
    try:
        yield usage
    finally:
        usage.cpu = time.thread_time() - start
        usage.peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


def against(
    name: str,
    size: int | None = None,
    *,
    kind: str = "fast",
    native: bool = True,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> Measured:
    """One request to ``name``'s server, in this thread's event loop."""

    async def main() -> Measured:
        async with hostile_server(SCENARIOS[name], size) as (url, _):
            return await one_request(url, kind=kind, native=native, max_event_bytes=max_event_bytes)

    return asyncio.run(main())


def against_thread(name: str, size: int, *, native: bool) -> Measured:
    """One request to ``name``'s server running on a thread of its own (its work is not
    the client thread's CPU time)."""
    with hostile_server_thread(SCENARIOS[name], size) as (url, _):
        assert threading.current_thread() is threading.main_thread()
        return asyncio.run(one_request(url, native=native))


# ---------------------------------------------------------------- item 4: bounded memory
@pytest.mark.parametrize("kind", ["fast", "httpx"])
@pytest.mark.parametrize("name", ["endless_error", "huge_error"])
def test_an_error_body_is_read_up_to_a_cap(name: str, kind: str) -> None:
    """The head is kept, the rest counted up to 1 MiB, then the connection is closed:
    32 MiB from the server cost the client well under 4 MiB."""
    got = against(name, 32 * MIB, kind=kind)
    rec = got.record
    assert (rec.outcome, rec.http_status) == (s.OUTCOME_HTTP_ERROR, 500)
    assert rec.error is not None
    assert rec.error.startswith("HTTP 500: xxxx")
    assert rec.error.endswith("read: connection closed]")
    assert got.peak_bytes < 4 * MIB, got.peak_bytes


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("kind", ["fast", "httpx"])
@pytest.mark.parametrize("name", ["long_line", "cr_only"])
def test_an_event_beyond_the_limit_ends_the_stream(name: str, kind: str, native: bool) -> None:
    """A 16 MiB event against a 1 MiB limit: a protocol error that says so, about the
    limit's worth of memory, and the rest of the body unread."""
    got = against(name, 16 * MIB, kind=kind, native=native, max_event_bytes=MIB)
    rec = got.record
    assert (rec.outcome, rec.http_status) == (s.OUTCOME_PROTOCOL_ERROR, 200)
    assert rec.error is not None
    assert rec.error.startswith("an SSE event longer than 1 MiB (the limit: loadgen replay")
    assert list(rec.chunk_offsets_us) == []
    assert got.peak_bytes < 6 * MIB, got.peak_bytes


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("name", ["long_line", "cr_only"])
def test_an_event_within_the_limit_is_read_whole(name: str, native: bool, kind: str) -> None:
    """Under the default limit a long event is a stream like any other. While it is
    decoded it is held a few times over (the pending bytes, the whole event, its lines
    and their data joined): the bound is 6 times its size (docs/performance.md)."""
    got = against(name, 4 * MIB, native=native, kind=kind)
    rec = got.record
    assert (rec.outcome, rec.http_status, rec.error) == (s.OUTCOME_OK, 200, None)
    assert len(rec.chunk_offsets_us) == 1  # the long event's content
    assert got.peak_bytes < 6 * 4 * MIB, got.peak_bytes


# ---------------------------------------------------------------- item 4: linear time
@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("name", ["long_line", "cr_only"])
def test_the_time_for_a_long_event_grows_linearly(name: str, native: bool) -> None:
    """8 times the bytes, about 8 times the client's CPU time (64 when reads rescanned
    what came before); the best of 3 runs at each size. The bound sits halfway between
    the two on a log scale (8 ** 1.5, about 22.6), 2.8x from each: with 4 times the bytes
    and a bound of 8 (2x from linear), a few milliseconds of noise failed a linear run
    (3.7 ms against 30 ms, both measured on a quiet machine; 7.2 against 22.3 ms alone)."""

    def cpu(size: int) -> float:
        runs = [against_thread(name, size, native=native) for _ in range(3)]
        assert all(r.record.outcome == s.OUTCOME_OK for r in runs)
        return min(r.cpu_s for r in runs)

    ratio = 8
    small, large = cpu(MIB), cpu(ratio * MIB)
    assert large / max(small, 1e-3) < ratio**1.5, (small, large)


# ---------------------------------------------------------------- item 5: outcomes
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("name", ["close_delimited", "http10"])
def test_a_complete_close_delimited_body_is_ok(name: str, native: bool, kind: str) -> None:
    rec = against(name, native=native, kind=kind).record
    assert (rec.outcome, rec.http_status, rec.error) == (s.OUTCOME_OK, 200, None)
    assert len(rec.chunk_offsets_us) == 3


@pytest.mark.parametrize("kind", KINDS)
def test_garbage_is_a_protocol_error(kind: str) -> None:
    rec = against("garbage", kind=kind).record
    assert (rec.outcome, rec.http_status) == (s.OUTCOME_PROTOCOL_ERROR, None)
    assert rec.error is not None
    assert rec.error.startswith("MalformedResponse: malformed HTTP response")


@pytest.mark.parametrize("kind", ["fast", "httpx"])
def test_a_redirect_is_an_http_error_and_not_followed(kind: str) -> None:
    rec = against("redirect", kind=kind).record
    assert (rec.outcome, rec.http_status) == (s.OUTCOME_HTTP_ERROR, 302)
    assert rec.error == "HTTP 302: [redirect to http://127.0.0.1:9/v1/elsewhere: not followed]"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("native", IMPLS)
def test_100_continue_is_skipped(native: bool, kind: str) -> None:
    rec = against("continue", native=native, kind=kind).record
    assert (rec.outcome, rec.http_status, rec.error) == (s.OUTCOME_OK, 200, None)
    assert len(rec.chunk_offsets_us) == 3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("native", IMPLS)
def test_good_chunks_before_a_bad_one_are_kept(native: bool, kind: str) -> None:
    rec = against("bad_chunk", native=native, kind=kind).record
    assert (rec.outcome, rec.http_status) == (s.OUTCOME_PROTOCOL_ERROR, 200)
    assert rec.error is not None
    assert rec.error.startswith("MalformedResponse: malformed HTTP response")
    # The parsers name it their way: httptools' "chunk size", h11's "chunk header".
    assert ("chunk size" if kind == "fast" else "illegal chunk header") in rec.error
    assert len(rec.chunk_offsets_us) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_a_head_that_never_ends_is_a_protocol_error(kind: str) -> None:
    got = against("endless_head", 32 * MIB, kind=kind)
    assert got.record.outcome == s.OUTCOME_PROTOCOL_ERROR
    assert got.record.error is not None
    assert got.record.error.startswith("MalformedResponse: ")
    limit = "64 KiB" if kind == "fast" else "100 KiB"  # ours, httpcore's
    assert f"longer than {limit}" in got.record.error
    assert got.peak_bytes < 4 * MIB, got.peak_bytes


def test_every_scenario_is_tested_here() -> None:
    names = {
        "endless_error",
        "huge_error",
        "long_line",
        "cr_only",
        "close_delimited",
        "http10",
        "garbage",
        "redirect",
        "continue",
        "bad_chunk",
        "endless_head",
    }
    assert set(SCENARIOS) == names


# ---------------------------------------------------------------- the option, end to end
def test_max_event_mib_reaches_the_client_and_run_json(tmp_path: Path) -> None:
    """``loadgen replay --max-event-mib 1`` against a 4 MiB line: the row is a
    protocol_error naming the limit, and run.json records the limit in bytes."""
    trace = tmp_path / "t.parquet"
    table = {"request_id": ["q0"], "arrival_s": [0.0], "input_tokens": [4], "output_tokens": [2]}
    write_trace(pa.table(table), trace)
    run_dir = tmp_path / "run"
    with hostile_server_thread(SCENARIOS["long_line"], 4 * MIB) as (url, _):
        args = [str(trace), "--base-url", url + "/v1", "-o", str(run_dir), "--model", "m"]
        args += ["--no-preflight", "--no-scrape-metrics", "--no-progress", "--max-event-mib", "1"]
        result = CliRunner().invoke(replay, args)
    assert result.exit_code == 0, result.output
    rows = pq.read_table(run_dir / s.REQUESTS_FILE).to_pylist()
    assert [r["outcome"] for r in rows] == [s.OUTCOME_PROTOCOL_ERROR]
    assert rows[0]["error"].startswith("an SSE event longer than 1 MiB")
    info = read_run_info(run_dir)
    assert info is not None
    assert info.config.max_event_bytes == MIB


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_a_server_that_goes_away_mid_body_is_a_disconnect(kind: str, framing: str) -> None:
    """The other side of ``MalformedResponse``: a body cut short by the server's close is
    ``disconnect`` on both transports (h11 raises the same exception type for both)."""
    event = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
    if framing == "length":
        head = b"content-length: %d\r\n" % (len(event) * 4)
        body = event
    else:
        head = b"transfer-encoding: chunked\r\n"
        body = b"%x\r\n%s\r\n" % (len(event), event)
    reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n" + head + b"\r\n" + body

    async def main() -> Measured:
        async with scripted_server([reply], close_after=True) as (url, _):
            return await one_request(url, kind=kind)

    rec = asyncio.run(main()).record
    assert (rec.outcome, rec.http_status) == (s.OUTCOME_DISCONNECT, 200), rec.error
    assert len(rec.chunk_offsets_us) == 1
