"""Server bytes to run rows as a replay makes them: a scripted loopback server
(``scripted``), the streaming client on a chosen transport and feed, and the run recorder
writing ``requests.parquet`` (on the test path via pytest's ``pythonpath``; not a test
module).

``rows_for`` does it once, in its own event loop; ``RowsHarness`` does it for many
examples in one loop that outlives them, with one HTTP client per transport (building
httpx's costs more than a whole example).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from scripted import Paced, scripted_server

from loadgen.client import PreparedRequest, StreamingClient
from loadgen.clock import Clock
from loadgen.run.recorder import RunRecorder
from loadgen.run.session import make_transport
from traces.records import RunRow, TraceRequest

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def job(i: int) -> PreparedRequest:
    trace = TraceRequest(
        index=i, request_id=f"q{i}", arrival_s=0.0, input_tokens=5, output_tokens=3
    )
    return PreparedRequest(
        trace=trace, x_request_id=f"t-q{i}", path="/chat/completions", body=b'{"a":1}'
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Rows:
    """What one batch of requests left: the records the client made, in order, and the
    table the recorder wrote (None if ``close`` raised: ``failure`` says why)."""

    records: list[RunRow]
    table: pa.Table | None
    failure: str | None


@dataclass(frozen=True, slots=True)
class _Http:
    clock: Clock
    transport: httpx.AsyncBaseTransport
    client: httpx.AsyncClient


def _http(kind: str, timeout_s: float) -> _Http:
    clock = Clock()
    transport = make_transport(kind, clock.now_ns, max_connections=2)
    limits = httpx.Timeout(connect=timeout_s, read=timeout_s, write=timeout_s, pool=None)
    return _Http(clock, transport, httpx.AsyncClient(transport=transport, timeout=limits))


async def _rows(
    http: _Http,
    replies: Sequence[bytes | Paced],
    run_dir: Path,
    *,
    native: bool,
    timeout_s: float,
) -> Rows:
    records: list[RunRow] = []
    recorder = RunRecorder(run_dir, flush_interval_s=60)

    def sink(record: RunRow) -> None:
        records.append(record)
        recorder.add(record)

    failure: str | None = None
    try:
        async with scripted_server(list(replies)) as (url, log):
            client = StreamingClient(
                http.client,
                base_url=url + "/v1",
                now_ns=http.clock.now_ns,
                run_id="t",
                timeout_s=timeout_s,
                transport=http.transport,
                native_feed=native,
            )
            for i in range(len(replies)):
                await client.execute(client.ready(job(i)), http.clock.now_ns(), sink)
            # The server's handlers end with their replies; let them, before it closes.
            await asyncio.wait_for(log.idle.wait(), timeout_s)
    finally:
        try:
            path = await asyncio.to_thread(recorder.close)
        except Exception as exc:
            failure = f"{type(exc).__name__}: {exc}"
    table = pq.read_table(path) if failure is None else None
    return Rows(records=records, table=table, failure=failure)


async def rows_for(
    replies: Sequence[bytes | Paced],
    run_dir: Path,
    *,
    kind: str = "fast",
    native: bool = True,
    timeout_s: float = 5.0,
) -> Rows:
    """One request per reply, sent one after the other (as a closed loop of one), each
    record given to a ``RunRecorder`` in ``run_dir``, which is closed at the end."""
    http = _http(kind, timeout_s)
    async with http.client:
        return await _rows(http, replies, run_dir, native=native, timeout_s=timeout_s)


class RowsHarness:
    """``rows_for`` for many examples: one event loop in a thread and one HTTP client per
    transport, kept until ``close``."""

    def __init__(self, *, timeout_s: float = 5.0) -> None:
        self._timeout_s = timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._http: dict[str, _Http] = {}

    def rows_for(
        self, replies: Sequence[bytes | Paced], run_dir: Path, *, kind: str, native: bool
    ) -> Rows:
        got: Rows = self._call(self._rows_for(replies, run_dir, kind, native))
        return got

    async def _rows_for(
        self, replies: Sequence[bytes | Paced], run_dir: Path, kind: str, native: bool
    ) -> Rows:
        http = self._http.get(kind)
        if http is None:
            http = self._http[kind] = _http(kind, self._timeout_s)
        return await _rows(http, replies, run_dir, native=native, timeout_s=self._timeout_s)

    def _call(self, coro: Any) -> Any:
        # Generous: a slow machine may take seconds for a reply that times out.
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10 * self._timeout_s)

    def close(self) -> None:
        async def close_all() -> None:
            for http in self._http.values():
                await http.client.aclose()

        self._call(close_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
