"""Client ingest benchmark: how fast, and how accurately, a client takes in SSE token streams.

One command, baseline measured in the same run:

    .venv/bin/python bench/client_ingest.py [--quick] [--tiny] [--json out.json] [--profile]

A stub OpenAI-style server (raw asyncio HTTP/1.1, its own process, pinned to CPU 1) streams
vLLM-shaped chat chunks, one HTTP chunk per SSE event, and logs when it wrote every token
(``time.perf_counter_ns``, CLOCK_MONOTONIC, shared by all processes of the machine). Each
client runs in a fresh process pinned to CPU 0, interleaved with the others:

* ``raw-asyncio``: an ``asyncio.Protocol`` that stamps in ``data_received`` and counts events
  by splitting on ``b"\\n\\n"`` (no dechunking, no JSON): the practical limit.
* ``httpx-raw``: a plain ``httpx.AsyncClient`` ``aiter_raw`` loop, same counting.
* ``loadgen``: ``StreamingClient`` over the fast transport (``loadgen.http.pool``:
  asyncio.Protocol + httptools, the replay's default), producing real run rows (``RunRow``).
* ``loadgen-httpx``: the same client over httpx's own transport (``--transport httpx``).

Two measurements: throughput (many concurrent streams, zero inter-token delay: tokens per
client CPU second) and timestamp accuracy (paced streams: client arrival stamp minus the
server's write time per token, and the client's TTFT minus the server's).

Internal modes (spawned by the driver): ``--serve`` and ``--client KIND``.

Note on scale: httpcore's connection pool (httpcore 1.0.x) rescans every pooled connection,
and for every idle one rescans them all again, each time a request starts or a response is
closed (``AsyncConnectionPool._assign_requests_to_connections``): O(idle x pool) per request.
With a pool of 200-256 warm connections that is tens of milliseconds of blocking CPU per
request, which dominates both the 256-stream throughput and the accuracy figures of the
httpx-based clients. The low-concurrency table isolates the per-token cost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

REPO_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
CLIENT_CPU = 0
SERVER_CPU = 1
KINDS: tuple[str, ...] = ("raw-asyncio", "loadgen", "loadgen-httpx", "httpx-raw")
BASELINE = "raw-asyncio"
EVENTS_PER_WRITE = 16
"""Zero-delay mode: SSE events (each its own HTTP chunk) handed to the socket per write."""
SERVER_MAX_LIFETIME_S = 900.0
CLIENT_DEADLINE_S = 120.0
WARMUP_TOKENS = 4
EXTRA_EVENTS = 4
"""Events besides content tokens in every stream: role, finish, usage, ``[DONE]``."""
TERMINATOR = b"\r\n0\r\n\r\n"
"""The end of a chunked body as it appears after the last data chunk."""


# --------------------------------------------------------------------------------------------
# Shared helpers


def _pin(cpu: int | None) -> bool:
    """Pin this process to ``cpu`` when the platform and the affinity mask allow it."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return False
    try:
        allowed = os.sched_getaffinity(0)
        if cpu not in allowed or len(allowed) < 2:
            return False
        os.sched_setaffinity(0, {cpu})
    except OSError:
        return False
    return True


def _run_loop(main: Coroutine[Any, Any, Any]) -> tuple[Any, str]:
    """Run ``main`` on uvloop when it is installed, else on the default asyncio loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main), "asyncio"
    return uvloop.run(main), "uvloop"


def _loop_name() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def _pct(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of already-sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


# --------------------------------------------------------------------------------------------
# Stub server (--serve)


@dataclass(slots=True)
class _ServerLog:
    """What the server logged for one request: receive time and per-token write times."""

    recv_ns: int
    writes: list[int] = field(default_factory=list)


class _ServerState:
    __slots__ = ("created", "log")

    def __init__(self) -> None:
        self.log: dict[str, _ServerLog] = {}
        self.created = str(int(time.time())).encode()


def _frame(payload: bytes) -> bytes:
    """One chunked-encoding chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


_RESPONSE_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\n"
    b"connection: keep-alive\r\n"
    b"transfer-encoding: chunked\r\n"
    b"x-request-id: %s\r\n\r\n"
)
_SAFE_ID = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


class _ServerConn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection of the stub server (no pipelining needed)."""

    def __init__(self, state: _ServerState) -> None:
        self._state = state
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None
        self._paused: asyncio.Future[None] | None = None
        self._closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport; they implement it.
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._wake()
        if self._task is not None:
            self._task.cancel()

    def pause_writing(self) -> None:
        if self._paused is None:
            self._paused = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._wake()

    def _wake(self) -> None:
        paused, self._paused = self._paused, None
        if paused is not None and not paused.done():
            paused.set_result(None)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        self._process()

    def _process(self) -> None:
        if self._task is not None or self._transport is None or self._closed:
            return
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > 65536:
                self._fail(b"431 Request Header Fields Too Large")
            return
        lines = bytes(buf[:end]).split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3:
            self._fail(b"400 Bad Request")
            return
        method, target = parts[0], parts[1]
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if b"transfer-encoding" in headers:
            self._fail(b"501 Not Implemented")
            return
        try:
            length = int(headers.get(b"content-length", b"0"))
        except ValueError:
            self._fail(b"400 Bad Request")
            return
        if len(buf) < end + 4 + length:
            return
        recv_ns = time.perf_counter_ns()
        body = bytes(buf[end + 4 : end + 4 + length])
        del buf[: end + 4 + length]
        if method == b"POST" and target == b"/v1/chat/completions":
            self._task = asyncio.get_running_loop().create_task(
                self._stream(headers, body, recv_ns)
            )
            self._task.add_done_callback(self._done)
        elif method == b"GET" and target.startswith(b"/log"):
            self._send_log(target)
            self._process()
        else:
            self._fail(b"404 Not Found")

    def _done(self, task: asyncio.Task[None]) -> None:
        self._task = None
        if not task.cancelled() and task.exception() is not None:
            print(f"stub server: stream failed: {task.exception()!r}", file=sys.stderr)
            self._fail(b"500 Internal Server Error")
            return
        self._process()

    def _fail(self, status: bytes) -> None:
        if self._transport is not None and not self._closed:
            self._transport.write(
                b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
            self._transport.close()
        self._closed = True

    def _send_log(self, target: bytes) -> None:
        """``GET /log?prefix=P``: the logs of requests whose id starts with P, removed."""
        _, _, query = target.partition(b"?")
        prefix = ""
        for item in query.split(b"&"):
            key, _, value = item.partition(b"=")
            if key == b"prefix":
                prefix = value.decode()
        log = self._state.log
        picked = [xid for xid in log if xid.startswith(prefix)]
        out = {xid: {"recv": log[xid].recv_ns, "writes": log[xid].writes} for xid in picked}
        for xid in picked:
            del log[xid]
        payload = json.dumps(out).encode()
        assert self._transport is not None
        self._transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(payload), payload)
        )

    async def _drain(self) -> None:
        paused = self._paused
        if paused is not None:
            await paused
        if self._closed:
            raise ConnectionResetError("client went away")

    async def _stream(self, headers: dict[bytes, bytes], body: bytes, recv_ns: int) -> None:
        transport = self._transport
        assert transport is not None
        write = transport.write
        perf = time.perf_counter_ns
        req = json.loads(body)
        n_tokens = max(0, min(int(req.get("max_tokens", 16)), 1_000_000))
        options = req.get("stream_options") or {}
        include_usage = bool(options.get("include_usage"))
        continuous = include_usage and bool(options.get("continuous_usage_stats"))
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in req.get("messages", ()))
        itl_ms = float(headers.get(b"x-bench-itl-ms", b"0"))
        xid = headers.get(b"x-request-id", b"anon")
        if not set(xid) <= _SAFE_ID or len(xid) > 128:
            xid = b"anon"
        entry: _ServerLog | None = None
        if headers.get(b"x-bench-log") == b"1":
            entry = _ServerLog(recv_ns=recv_ns)
            self._state.log[xid.decode()] = entry

        prefix = (
            b'data: {"id":"chatcmpl-%s","object":"chat.completion.chunk","created":%s,'
            b'"model":"bench","choices":[' % (xid, self._state.created)
        )
        usage_fmt = b'"usage":{"prompt_tokens":%d,"total_tokens":%%d,"completion_tokens":%%d}' % (
            prompt_tokens
        )
        role = prefix + (
            b'{"index":0,"delta":{"role":"assistant","content":""},'
            b'"logprobs":null,"finish_reason":null}]'
        )
        token = (
            prefix + b'{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]'
        )
        finish = prefix + (
            b'{"index":0,"delta":{},"logprobs":null,"finish_reason":"length","stop_reason":null}]'
        )
        if continuous:
            role += b"," + usage_fmt % (prompt_tokens, 0) + b"}\n\n"
            token_fmt = token + b"," + usage_fmt.replace(b"%%", b"%") + b"}\n\n"
            finish += b"," + usage_fmt % (prompt_tokens + n_tokens, n_tokens) + b"}\n\n"
        else:
            role += b"}\n\n"
            token_fmt = b""
            finish += b"}\n\n"
        token_event = _frame(token + b"}\n\n")
        tail = _frame(finish)
        if include_usage:
            tail += _frame(
                prefix + b"]," + usage_fmt % (prompt_tokens + n_tokens, n_tokens) + b"}\n\n"
            )
        tail += _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"

        def event(k: int) -> bytes:
            """Content token ``k`` (1-based), one HTTP chunk."""
            if continuous:
                return _frame(token_fmt % (prompt_tokens + k, k))
            return token_event

        write(_RESPONSE_HEAD % xid + _frame(role))
        if itl_ms > 0:
            step = int(itl_ms * 1e6)
            for k in range(1, n_tokens + 1):
                delay = (recv_ns + k * step - perf()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)
                await self._drain()
                write(event(k))
                if entry is not None:
                    entry.writes.append(perf())
        else:
            k = 0
            while k < n_tokens:
                m = min(EVENTS_PER_WRITE, n_tokens - k)
                if continuous:
                    data = b"".join([event(k + i) for i in range(1, m + 1)])
                else:
                    data = token_event * m
                k += m
                write(data)
                if entry is not None:
                    entry.writes.extend([perf()] * m)
                if self._paused is not None:
                    await self._drain()
                else:
                    await asyncio.sleep(0)
        await self._drain()
        write(tail)


async def _serve(ready: Callable[[int], None]) -> None:
    state = _ServerState()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _ServerConn(state), HOST, 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    ready(port)
    parent = os.getppid()
    async with server:
        # Bounded: exits when the parent goes away or after SERVER_MAX_LIFETIME_S.
        for _ in range(int(SERVER_MAX_LIFETIME_S / 0.5)):
            if os.getppid() != parent:
                break
            await asyncio.sleep(0.5)


def serve_main(cpu: int | None) -> int:
    _pin(cpu)

    def ready(port: int) -> None:
        sys.stdout.write(f"PORT {port}\n")
        sys.stdout.flush()

    _run_loop(_serve(ready))
    return 0


# --------------------------------------------------------------------------------------------
# Clients (--client KIND)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSpec:
    kind: str
    port: int
    streams: int
    tokens: int
    itl_ms: float
    prefix: str
    log: bool
    stagger: bool


@dataclass(slots=True, kw_only=True)
class StreamResult:
    """One stream as a client saw it, in raw ``perf_counter_ns`` readings."""

    xid: str
    ok: bool
    tokens: int
    sent: int
    first: int | None
    stamps: list[int] | None


def _request_body(tokens: int) -> bytes:
    from loadgen.openai.bodies import build_body
    from traces.prompts.maker import Prompt
    from traces.runinfo import Capabilities
    from traces.schema import API_CHAT

    prompt = Prompt(text=" ".join(["hello"] * 32))
    return build_body(
        api=API_CHAT, model="bench", prompt=prompt, max_tokens=tokens, caps=Capabilities()
    )


def _bench_headers(itl_ms: float, log: bool) -> dict[str, str]:
    return {"x-bench-itl-ms": f"{itl_ms:g}", "x-bench-log": "1" if log else "0"}


def _start_offsets_s(spec: ClientSpec) -> list[float]:
    """When each stream starts: together, or spread evenly over one inter-token interval."""
    if not spec.stagger or spec.itl_ms <= 0:
        return [0.0] * spec.streams
    return [i * spec.itl_ms / 1000.0 / spec.streams for i in range(spec.streams)]


async def _gather_staggered(
    make: Callable[[int], Awaitable[StreamResult]], offsets: list[float]
) -> list[StreamResult]:
    t0 = time.perf_counter()

    async def one(i: int) -> StreamResult:
        delay = t0 + offsets[i] - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        return await make(i)

    return list(await asyncio.gather(*(one(i) for i in range(len(offsets)))))


def _events_to_tokens(
    xid: str, sent: int, reads: list[tuple[int, int]], tokens: int, keep: bool
) -> StreamResult:
    """Map per-read event counts to content-token stamps (event 0 is the role chunk)."""
    total = reads[-1][1] if reads else 0
    ok = total == tokens + EXTRA_EVENTS
    stamps: list[int] = []
    first: int | None = None
    if reads:
        idx = 0
        for ts, cum in reads:
            while idx < cum:
                if 1 <= idx <= tokens:
                    stamps.append(ts)
                idx += 1
        first = stamps[0] if stamps else None
    return StreamResult(
        xid=xid, ok=ok, tokens=len(stamps), sent=sent, first=first, stamps=stamps if keep else None
    )


class _Timer:
    """The measured window: client CPU and wall time (and the profiler) around the streams."""

    def __init__(self, profile: Path | None) -> None:
        self._profile = profile
        self._profiler: Any = None
        self._cpu0 = 0.0
        self._wall0 = 0.0
        self.cpu_s = 0.0
        self.wall_s = 0.0

    def start(self) -> None:
        if self._profile is not None:
            import cProfile

            self._profiler = cProfile.Profile()
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()
        if self._profiler is not None:
            self._profiler.enable()

    def stop(self) -> None:
        if self._profiler is not None:
            self._profiler.disable()
        self.wall_s = time.perf_counter() - self._wall0
        self.cpu_s = time.process_time() - self._cpu0
        if self._profiler is not None:
            self._profiler.dump_stats(str(self._profile))


def raw_head_prefix(port: int, length: int, extra_headers: str) -> bytes:
    """The raw clients' request head for a chat body of ``length`` bytes, up to the value of
    its last header, ``x-request-id`` (the request's id, then a blank line, complete it)."""
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {HOST}:{port}\r\n"
        "content-type: application/json\r\naccept: text/event-stream\r\n"
        f"{extra_headers}content-length: {length}\r\nx-request-id: "
    ).encode()


class _RawConn(asyncio.Protocol):
    """Minimal keep-alive SSE reader: stamps in ``data_received``, counts ``\\n\\n``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.reads: list[tuple[int, int]] = []
        self._count = 0
        self._in_body = False
        self._head = b""
        self._last_nl = False
        self._tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionResetError("server closed the connection"))

    def data_received(self, data: bytes) -> None:
        ts = time.perf_counter_ns()
        if not self._in_body:
            head = self._head + data
            end = head.find(b"\r\n\r\n")
            if end < 0:
                self._head = head
                return
            if not head.startswith(b"HTTP/1.1 200"):
                self._finish(RuntimeError(head[: head.find(b"\r\n")].decode()))
                return
            self._head = b""
            self._in_body = True
            data = head[end + 4 :]
        n = data.count(b"\n\n")
        if self._last_nl and data[:1] == b"\n":
            n += 1
        if n:
            self._count += n
            self.reads.append((ts, self._count))
        self._last_nl = data[-1:] == b"\n"
        tail = data[-7:] if len(data) >= 7 else (self._tail + data)[-7:]
        self._tail = tail
        if tail == TERMINATOR:
            self._finish(None)

    def _finish(self, exc: Exception | None) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    async def request(self, head: bytes, body: bytes) -> tuple[int, list[tuple[int, int]]]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.reads = []
        self._count = 0
        self._in_body = False
        self._head = b""
        self._last_nl = False
        self._tail = b""
        sent = time.perf_counter_ns()
        self.transport.write(head + body)
        await self.waiter
        return sent, self.reads


async def _client_raw(spec: ClientSpec, timer: _Timer) -> list[StreamResult]:
    loop = asyncio.get_running_loop()
    body = _request_body(spec.tokens)
    warm_body = _request_body(WARMUP_TOKENS)
    extra = "".join(f"{k}: {v}\r\n" for k, v in _bench_headers(spec.itl_ms, spec.log).items())
    conns: list[_RawConn] = []
    for _ in range(spec.streams):
        _, proto = await loop.create_connection(_RawConn, HOST, spec.port)
        conns.append(proto)

    def head(xid: str, payload: bytes, extra_headers: str) -> bytes:
        return raw_head_prefix(spec.port, len(payload), extra_headers) + xid.encode() + b"\r\n\r\n"

    await asyncio.gather(
        *(c.request(head(f"warm-{i}", warm_body, ""), warm_body) for i, c in enumerate(conns))
    )

    async def one(i: int) -> StreamResult:
        xid = f"{spec.prefix}-{i}"
        sent, reads = await conns[i].request(head(xid, body, extra), body)
        return _events_to_tokens(xid, sent, reads, spec.tokens, spec.log)

    try:
        timer.start()
        results = await _gather_staggered(one, _start_offsets_s(spec))
        timer.stop()
        return results
    finally:
        for c in conns:
            if c.transport is not None:
                c.transport.close()


async def _client_httpx_raw(spec: ClientSpec, timer: _Timer) -> list[StreamResult]:
    import httpx

    body = _request_body(spec.tokens)
    url = f"http://{HOST}:{spec.port}/v1/chat/completions"
    base_headers = {"content-type": "application/json", "accept": "text/event-stream"}
    headers = base_headers | _bench_headers(spec.itl_ms, spec.log)
    limits = httpx.Limits(max_connections=spec.streams, max_keepalive_connections=spec.streams)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(60.0)) as http:

        async def stream(xid: str, payload: bytes, hdrs: dict[str, str]) -> StreamResult:
            reads: list[tuple[int, int]] = []
            count = 0
            last_nl = False
            perf = time.perf_counter_ns
            sent = perf()
            async with http.stream(
                "POST", url, content=payload, headers=hdrs | {"x-request-id": xid}
            ) as r:
                r.raise_for_status()
                async for data in r.aiter_raw():
                    ts = perf()
                    n = data.count(b"\n\n")
                    if last_nl and data[:1] == b"\n":
                        n += 1
                    if n:
                        count += n
                        reads.append((ts, count))
                    last_nl = data[-1:] == b"\n"
            return _events_to_tokens(xid, sent, reads, spec.tokens, spec.log)

        warm = _request_body(WARMUP_TOKENS)
        await asyncio.gather(
            *(stream(f"warm-{i}", warm, base_headers) for i in range(spec.streams))
        )

        async def one(i: int) -> StreamResult:
            return await stream(f"{spec.prefix}-{i}", body, headers)

        timer.start()
        results = await _gather_staggered(one, _start_offsets_s(spec))
        timer.stop()
        return results


async def _client_loadgen(
    spec: ClientSpec, timer: _Timer, transport_kind: str = "fast"
) -> list[StreamResult]:
    import httpx

    from loadgen.client import PreparedRequest, StreamingClient
    from loadgen.clock import Clock
    from loadgen.collector import steady_collector
    from loadgen.run.session import make_transport
    from traces.records import RunRow, TraceRequest
    from traces.schema import OUTCOME_OK

    clock = Clock()
    body = _request_body(spec.tokens)
    base_url = f"http://{HOST}:{spec.port}/v1"
    transport = make_transport(transport_kind, clock.now_ns, max_connections=spec.streams)
    records: list[RunRow] = []

    def job(i: int, xid: str, payload: bytes, tokens: int) -> PreparedRequest:
        trace = TraceRequest(
            index=i, request_id=f"r{i}", arrival_s=0.0, input_tokens=32, output_tokens=tokens
        )
        return PreparedRequest(
            trace=trace, x_request_id=xid, path="/chat/completions", body=payload
        )

    async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(60.0)) as http:
        warm_client = StreamingClient(
            http, base_url=base_url, now_ns=clock.now_ns, run_id="warm", headers={}
        )
        warm_body = _request_body(WARMUP_TOKENS)
        sink: list[RunRow] = []
        await asyncio.gather(
            *(
                warm_client.execute(
                    job(i, f"warm-{i}", warm_body, WARMUP_TOKENS), clock.now_ns(), sink.append
                )
                for i in range(spec.streams)
            )
        )
        client = StreamingClient(
            http,
            base_url=base_url,
            now_ns=clock.now_ns,
            run_id="bench",
            headers=_bench_headers(spec.itl_ms, spec.log),
            transport=transport,
            defer_records=True,  # as the replay does
        )

        # As the replay does: requests are built before they are due, then only sent.
        ready = [
            client.ready(job(i, f"{spec.prefix}-{i}", body, spec.tokens))
            for i in range(spec.streams)
        ]

        async def one(i: int) -> StreamResult:
            await client.execute(ready[i], clock.now_ns(), records.append)
            xid = f"{spec.prefix}-{i}"
            return StreamResult(xid=xid, ok=False, tokens=0, sent=0, first=None, stamps=None)

        # As the replay does after its set-up (loadgen.run.shard): set-up frozen, and no
        # collector passes over the requests in flight (loadgen.collector).
        with steady_collector():
            timer.start()
            await _gather_staggered(one, _start_offsets_s(spec))
            client.flush()  # the records still deferred: their CPU counts too
            timer.stop()

    out: list[StreamResult] = []
    for rec in records:
        sent = clock.to_mono_ns(rec.sent_ns) if rec.sent_ns is not None else 0
        offsets = rec.chunk_offsets_us
        ok = rec.outcome == OUTCOME_OK and len(offsets) == spec.tokens
        if not ok:
            print(f"loadgen: {rec.x_request_id}: {rec.outcome} {rec.error}", file=sys.stderr)
        out.append(
            StreamResult(
                xid=rec.x_request_id,
                ok=ok,
                tokens=len(offsets),
                sent=sent,
                first=clock.to_mono_ns(rec.first_token_ns) if rec.first_token_ns else None,
                # Offsets are whole microseconds after sent_ns.
                stamps=[sent + off * 1000 for off in offsets] if spec.log else None,
            )
        )
    return out


_CLIENTS: dict[str, Callable[[ClientSpec, _Timer], Coroutine[Any, Any, list[StreamResult]]]] = {
    "raw-asyncio": _client_raw,
    "httpx-raw": _client_httpx_raw,
    "loadgen": _client_loadgen,
    "loadgen-httpx": lambda spec, timer: _client_loadgen(spec, timer, "httpx"),
}


def client_main(spec: ClientSpec, cpu: int | None, out: Path, profile: Path | None) -> int:
    pinned = _pin(cpu)
    run = _CLIENTS[spec.kind]

    async def main() -> dict[str, Any]:
        timer = _Timer(profile)
        async with asyncio.timeout(CLIENT_DEADLINE_S):
            results = await run(spec, timer)
        return {
            "kind": spec.kind,
            "pinned": pinned,
            "cpu_s": timer.cpu_s,
            "wall_s": timer.wall_s,
            "streams": [asdict(r) for r in results],
        }

    result, loop_name = _run_loop(main())
    result["loop"] = loop_name
    out.write_text(json.dumps(result))
    return 0


# --------------------------------------------------------------------------------------------
# Driver


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    name: str
    reps: int
    tput_streams: int
    tput_tokens: int
    acc_streams: int
    acc_tokens: int
    acc_itl_ms: float
    low_streams: int
    low_tokens: int


CONFIGS: dict[str, Config] = {
    # One rep by default: at 256 connections httpx's pool bookkeeping makes each httpx-based
    # run take 10-30 s of CPU (see the module notes); use --reps N for more.
    "default": Config(
        name="default",
        reps=1,
        tput_streams=256,
        tput_tokens=512,
        acc_streams=200,
        acc_tokens=50,
        acc_itl_ms=20.0,
        low_streams=16,
        low_tokens=2048,
    ),
    # Fewer streams, not just fewer tokens: httpx's pool costs grow with the square of its
    # connection count per request (see the module notes), which would not fit in 30 s.
    "quick": Config(
        name="quick",
        reps=1,
        tput_streams=64,
        tput_tokens=256,
        acc_streams=100,
        acc_tokens=25,
        acc_itl_ms=10.0,
        low_streams=16,
        low_tokens=512,
    ),
    "tiny": Config(
        name="tiny",
        reps=1,
        tput_streams=8,
        tput_tokens=20,
        acc_streams=8,
        acc_tokens=10,
        acc_itl_ms=20.0,
        low_streams=4,
        low_tokens=20,
    ),
}


class _Server:
    """The stub server process; always terminated by ``close``."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve", "--cpu", str(SERVER_CPU)],
            stdout=subprocess.PIPE,
            cwd=REPO_ROOT,
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 20.0)
        line = self.proc.stdout.readline().decode() if ready else ""
        if not line.startswith("PORT "):
            self.close()
            raise RuntimeError(f"stub server did not start (got {line!r})")
        self.port = int(line.split()[1])

    def fetch_log(self, prefix: str) -> dict[str, dict[str, Any]]:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=30)
        try:
            conn.request("GET", f"/log?prefix={prefix}")
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"log fetch failed: HTTP {resp.status}")
            result: dict[str, dict[str, Any]] = json.loads(data)
            return result
        finally:
            conn.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _run_client(
    spec: ClientSpec, workdir: Path, profile: Path | None = None, timeout_s: float = 150.0
) -> dict[str, Any]:
    out = workdir / f"{spec.prefix}.json"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--client",
        spec.kind,
        "--port",
        str(spec.port),
        "--streams",
        str(spec.streams),
        "--tokens",
        str(spec.tokens),
        "--itl-ms",
        str(spec.itl_ms),
        "--prefix",
        spec.prefix,
        "--cpu",
        str(CLIENT_CPU),
        "--out",
        str(out),
    ]
    if spec.log:
        cmd.append("--log")
    if spec.stagger:
        cmd.append("--stagger")
    if profile is not None:
        cmd += ["--profile-out", str(profile)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"client {spec.kind} failed (rc {proc.returncode}):\n"
            + proc.stderr.decode(errors="replace")[-3000:]
        )
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _throughput_row(result: dict[str, Any], tokens_expected: int) -> dict[str, Any]:
    streams = result["streams"]
    tokens = sum(s["tokens"] for s in streams)
    failed = sum(1 for s in streams if not s["ok"])
    cpu_s = max(result["cpu_s"], 1e-9)
    wall_s = max(result["wall_s"], 1e-9)
    return {
        "tokens": tokens,
        "expected_tokens": tokens_expected,
        "failed_streams": failed,
        "cpu_s": result["cpu_s"],
        "wall_s": result["wall_s"],
        "tok_per_cpu_s": tokens / cpu_s,
        "tok_per_wall_s": tokens / wall_s,
        "cpu_s_per_mtok": cpu_s / max(tokens, 1) * 1e6,
    }


def _accuracy_row(result: dict[str, Any], server_log: dict[str, dict[str, Any]]) -> dict[str, Any]:
    lags_ms: list[float] = []
    ttft_err_ms: list[float] = []
    failed = 0
    missing = 0
    for s in result["streams"]:
        log = server_log.get(s["xid"])
        if not s["ok"] or log is None or s["stamps"] is None:
            failed += 1
            continue
        writes: list[int] = log["writes"]
        stamps: list[int] = s["stamps"]
        if len(writes) != len(stamps):
            missing += 1
            continue
        lags_ms.extend((c - w) / 1e6 for c, w in zip(stamps, writes, strict=True))
        if s["first"] is not None and writes:
            client_ttft = s["first"] - s["sent"]
            server_ttft = writes[0] - log["recv"]
            ttft_err_ms.append((client_ttft - server_ttft) / 1e6)
    return {
        "lags_ms": lags_ms,
        "ttft_err_ms": ttft_err_ms,
        "failed_streams": failed,
        "mismatched_streams": missing,
        "cpu_s": result["cpu_s"],
        "wall_s": result["wall_s"],
    }


def _summarise_throughput(
    row: dict[str, float], runs: list[dict[str, Any]], base_runs: list[dict[str, Any]], tag: str
) -> None:
    if not runs:
        return
    row[f"{tag}tok_per_cpu_s"] = statistics.median(r["tok_per_cpu_s"] for r in runs)
    row[f"{tag}tok_per_wall_s"] = statistics.median(r["tok_per_wall_s"] for r in runs)
    row[f"{tag}cpu_s_per_mtok"] = statistics.median(r["cpu_s_per_mtok"] for r in runs)
    row[f"{tag}failed_streams"] = float(sum(r["failed_streams"] for r in runs))
    if base_runs:
        # Paired: each rep's ratio against the baseline run right next to it.
        ratios = [
            r["tok_per_cpu_s"] / b["tok_per_cpu_s"] for r, b in zip(runs, base_runs, strict=False)
        ]
        row[f"{tag}ratio_to_raw"] = statistics.median(ratios)


def _summarise(
    tput: dict[str, list[dict[str, Any]]],
    low: dict[str, list[dict[str, Any]]],
    acc: dict[str, list[dict[str, Any]]],
) -> dict[str, dict[str, float]]:
    summary: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        row: dict[str, float] = {}
        _summarise_throughput(row, tput.get(kind, []), tput.get(BASELINE, []), "")
        _summarise_throughput(row, low.get(kind, []), low.get(BASELINE, []), "low_")
        a_runs = acc.get(kind, [])
        lags = sorted(x for r in a_runs for x in r["lags_ms"])
        errs = [x for r in a_runs for x in r["ttft_err_ms"]]
        row["lag_tokens"] = float(len(lags))
        row["lag_mean_ms"] = statistics.fmean(lags) if lags else float("nan")
        row["lag_p50_ms"] = _pct(lags, 0.50)
        row["lag_p99_ms"] = _pct(lags, 0.99)
        row["lag_max_ms"] = lags[-1] if lags else float("nan")
        row["ttft_err_mean_ms"] = statistics.fmean(errs) if errs else float("nan")
        row["acc_failed_streams"] = float(
            sum(r["failed_streams"] + r["mismatched_streams"] for r in a_runs)
        )
        summary[kind] = row
    return summary


TABLE_HEAD = (
    f"{'client':<12} {'tok/s/core':>11} {'ratio':>7} {'CPU-s/Mtok':>11} {'tok/s wall':>11} "
    f"{'lag p50 ms':>10} {'lag p99 ms':>10} {'lag max ms':>10} {'TTFT err ms':>11}"
)
LOW_HEAD = f"{'client':<12} {'tok/s/core':>11} {'ratio':>7} {'CPU-s/Mtok':>11} {'tok/s wall':>11}"
NAN = float("nan")


def _print_table(cfg: Config, summary: dict[str, dict[str, float]], meta: dict[str, Any]) -> None:
    print(
        f"client ingest benchmark [{cfg.name}]: {meta['loop']}, client CPU {CLIENT_CPU} / "
        f"server CPU {SERVER_CPU} (pinned: {meta['pinned']}), {cfg.reps} rep(s) interleaved"
    )
    print(
        f"  throughput: {cfg.tput_streams} streams x {cfg.tput_tokens} tokens, zero delay, "
        f"{EVENTS_PER_WRITE} events/write; accuracy: {cfg.acc_streams} streams x "
        f"{cfg.acc_tokens} tokens every {cfg.acc_itl_ms:g} ms "
        f"({cfg.acc_streams * 1000 / cfg.acc_itl_ms:,.0f} tok/s)"
    )
    print(TABLE_HEAD)
    for kind in KINDS:
        r = summary[kind]
        print(
            f"{kind:<12} {_tput_cells(r, '')} "
            f"{r['lag_p50_ms']:>10.3f} {r['lag_p99_ms']:>10.3f} {r['lag_max_ms']:>10.3f} "
            f"{r['ttft_err_mean_ms']:>11.3f}"
        )
    print(
        f"per-token cost at low concurrency: {cfg.low_streams} streams x {cfg.low_tokens} tokens, "
        "zero delay (pool bookkeeping amortised away)"
    )
    print(LOW_HEAD)
    for kind in KINDS:
        print(f"{kind:<12} {_tput_cells(summary[kind], 'low_')}")
    failures = {
        k: (
            int(v.get("failed_streams", 0) + v.get("low_failed_streams", 0)),
            int(v["acc_failed_streams"]),
        )
        for k, v in summary.items()
    }
    if any(a or b for a, b in failures.values()):
        print(f"  FAILED streams (throughput, accuracy): {failures}")
    print(
        "  tok/s/core = tokens / client process CPU s; ratio = paired median vs raw-asyncio;\n"
        "  lag = client stamp - server write time per token; "
        "TTFT err = mean(client TTFT - server TTFT)"
    )


def _tput_cells(r: dict[str, float], tag: str) -> str:
    return (
        f"{r.get(tag + 'tok_per_cpu_s', NAN):>11,.0f} {r.get(tag + 'ratio_to_raw', NAN):>7.4f} "
        f"{r.get(tag + 'cpu_s_per_mtok', NAN):>11.2f} {r.get(tag + 'tok_per_wall_s', NAN):>11,.0f}"
    )


def _print_profile(path: Path, limit: int = 25) -> None:
    import io
    import pstats

    buf = io.StringIO()
    stats = pstats.Stats(str(path), stream=buf)
    stats.sort_stats("tottime").print_stats(limit)
    print(buf.getvalue())


def driver_main(args: argparse.Namespace) -> int:
    cfg = CONFIGS["tiny" if args.tiny else "quick" if args.quick else "default"]
    if args.reps is not None:
        cfg = Config(**{**asdict(cfg), "reps": max(1, args.reps)})
    started = time.perf_counter()
    tput: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    low: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    acc: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    meta: dict[str, Any] = {"loop": _loop_name(), "pinned": False}
    failed = False
    server = _Server()
    try:
        with tempfile.TemporaryDirectory(prefix="client-ingest-") as tmp:
            workdir = Path(tmp)
            for rep in range(cfg.reps):
                # A, B, C then C, B, A: alternating order cancels slow drift.
                order = KINDS if rep % 2 == 0 else tuple(reversed(KINDS))
                for phase, streams, tokens, rows in (
                    ("t", cfg.tput_streams, cfg.tput_tokens, tput),
                    ("l", cfg.low_streams, cfg.low_tokens, low),
                ):
                    for kind in order:
                        spec = ClientSpec(
                            kind=kind,
                            port=server.port,
                            streams=streams,
                            tokens=tokens,
                            itl_ms=0.0,
                            prefix=f"{phase}{rep}-{kind}",
                            log=False,
                            stagger=False,
                        )
                        result = _run_client(spec, workdir)
                        meta["pinned"] = result["pinned"]
                        meta["loop"] = result["loop"]
                        row = _throughput_row(result, streams * tokens)
                        failed |= row["failed_streams"] > 0
                        rows[kind].append(row)
                for kind in order:
                    spec = ClientSpec(
                        kind=kind,
                        port=server.port,
                        streams=cfg.acc_streams,
                        tokens=cfg.acc_tokens,
                        itl_ms=cfg.acc_itl_ms,
                        prefix=f"a{rep}-{kind}",
                        log=True,
                        stagger=True,
                    )
                    result = _run_client(spec, workdir)
                    row = _accuracy_row(result, server.fetch_log(spec.prefix + "-"))
                    failed |= row["failed_streams"] + row["mismatched_streams"] > 0
                    acc[kind].append(row)
            if args.profile:
                spec = ClientSpec(
                    kind="loadgen",
                    port=server.port,
                    streams=cfg.tput_streams,
                    tokens=cfg.tput_tokens,
                    itl_ms=0.0,
                    prefix="profile",
                    log=False,
                    stagger=False,
                )
                prof = workdir / "loadgen.prof"
                _run_client(spec, workdir, profile=prof)
                print(f"cProfile of the loadgen client ({spec.streams} x {spec.tokens} tokens):")
                _print_profile(prof)
    finally:
        server.close()
    summary = _summarise(tput, low, acc)
    _print_table(cfg, summary, meta)
    elapsed = time.perf_counter() - started
    print(f"  total {elapsed:.1f} s")
    if args.json is not None:
        doc = {
            "config": asdict(cfg),
            "meta": meta | {"events_per_write": EVENTS_PER_WRITE, "elapsed_s": elapsed},
            "summary": summary,
            "throughput_runs": tput,
            "low_concurrency_runs": low,
            "accuracy_runs": {
                k: [{key: v for key, v in r.items() if key not in ("lags_ms",)} for r in runs]
                for k, runs in acc.items()
            },
        }
        Path(args.json).write_text(json.dumps(doc, indent=2, allow_nan=True) + "\n")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="fewer tokens and reps (< 30 s)")
    p.add_argument("--tiny", action="store_true", help="a few streams only (smoke test)")
    p.add_argument("--reps", type=int, default=None, help="override the number of reps")
    p.add_argument("--json", type=Path, default=None, help="also save the results here")
    p.add_argument("--profile", action="store_true", help="cProfile one loadgen client run")
    hidden = argparse.SUPPRESS
    p.add_argument("--serve", action="store_true", help=hidden)
    p.add_argument("--client", choices=KINDS, default=None, help=hidden)
    p.add_argument("--cpu", type=int, default=None, help=hidden)
    p.add_argument("--port", type=int, default=0, help=hidden)
    p.add_argument("--streams", type=int, default=1, help=hidden)
    p.add_argument("--tokens", type=int, default=1, help=hidden)
    p.add_argument("--itl-ms", type=float, default=0.0, help=hidden)
    p.add_argument("--prefix", default="x", help=hidden)
    p.add_argument("--log", action="store_true", help=hidden)
    p.add_argument("--stagger", action="store_true", help=hidden)
    p.add_argument("--out", type=Path, default=None, help=hidden)
    p.add_argument("--profile-out", type=Path, default=None, help=hidden)
    args = p.parse_args(argv)
    if args.serve:
        return serve_main(args.cpu)
    if args.client is not None:
        if args.out is None:
            p.error("--client needs --out")
        if str(REPO_ROOT) not in sys.path:
            sys.path.insert(0, str(REPO_ROOT))
        spec = ClientSpec(
            kind=args.client,
            port=args.port,
            streams=args.streams,
            tokens=args.tokens,
            itl_ms=args.itl_ms,
            prefix=args.prefix,
            log=args.log,
            stagger=args.stagger,
        )
        return client_main(spec, args.cpu, args.out, args.profile_out)
    return driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
