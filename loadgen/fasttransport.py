"""The fast streaming transport: HTTP/1.1 over ``asyncio.Protocol`` with httptools' parser.

An ``httpx.AsyncBaseTransport``, so httpx stays the client API. Every ``data_received``
call is stamped with the run's clock before a single byte is parsed; httptools (llhttp, in
C) then decodes the chunked body, and each body piece is handed on with the stamp of the
read that carried it. The response exposes the stamped pieces as
``response.extensions[STAMPED]``, the same seam the stamping wrapper of httpx's own
transport offers (see ``loadgen.transport``).

Scope: HTTP/1.1, keep-alive, a per-origin pool sized to the run, TLS through ``ssl``,
connect and read timeouts. No HTTP/2, proxies, redirects or compression (the client asks
for ``identity``): use ``--transport httpx`` for those.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, cast

import httptools
import httpx

from loadgen.read_deadline import ReadDeadline
from loadgen.transport import STAMPED

_HIGH_WATER = 4 * 1024 * 1024
"""Buffered body bytes above which the socket stops being read (back-pressure)."""

Trace = Callable[[str, Mapping[str, Any]], Any]


class _Exchange:
    """The state of one response on a connection, shared by the protocol and its stream."""

    __slots__ = (
        "buffered",
        "chunks",
        "complete",
        "deadline",
        "error",
        "headers",
        "headers_done",
        "keep_alive",
        "sink",
        "status",
        "waiter",
    )

    def __init__(self, headers_done: asyncio.Future[None]) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = headers_done
        self.chunks: deque[tuple[int, bytes]] = deque()
        self.buffered = 0
        self.complete = False
        self.keep_alive = False
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.sink: Callable[[int, bytes], None] | None = None
        """While set (``drain``), each read goes straight to it instead of ``chunks``."""
        self.deadline: ReadDeadline | None = None

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; parses responses with httptools as bytes arrive."""

    def __init__(self, now_ns: Callable[[], int]) -> None:
        self._now_ns = now_ns
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self._exchange: _Exchange | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._pieces: list[bytes] = []
        # httptools' ``on_body`` callback, once per HTTP chunk: the list's own append, so no
        # Python frame per chunk (the parser looks the callback up when it is created).
        self.on_body: Callable[[bytes], None] = self._pieces.append
        self._paused = False

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport but offer its methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        stamp = self._now_ns()  # before any parsing: the arrival time of these bytes
        parser = self._parser
        if parser is None:
            self._fail(httpx.RemoteProtocolError("unexpected bytes with no request in flight"))
            return
        pieces = self._pieces
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed HTTP response: {exc}"))
            return
        ex = self._exchange
        if not pieces or ex is None:
            return
        # One stamped piece per socket read, however many HTTP chunks it carried.
        body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        sink = ex.sink
        if sink is not None:
            try:
                sink(stamp, body)
            except Exception as exc:  # the consumer failed: so does the exchange
                ex.error = exc  # even when this read completed the message
                ex.wake()
                self.abort()
                return
            if ex.deadline is not None:
                ex.deadline.restart()
            return
        ex.chunks.append((stamp, body))
        ex.buffered += len(body)
        if ex.buffered > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        ex.wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        ex = self._exchange
        if ex is not None and not ex.complete:
            if ex.status == 0 and not ex.headers_done.done():
                error: Exception = httpx.RemoteProtocolError(
                    "server disconnected without sending a response"
                )
            else:
                error = httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body"
                )
            self._fail(error)

    def pause_writing(self) -> None:  # request bodies are small; nothing to pause
        return

    def resume_writing(self) -> None:
        return

    # -- httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if self._exchange is not None:
            self._exchange.headers.append((name, value))

    def on_headers_complete(self) -> None:
        ex = self._exchange
        if ex is None or self._parser is None:
            return
        ex.status = self._parser.get_status_code()
        if not ex.headers_done.done():
            ex.headers_done.set_result(None)

    def on_message_complete(self) -> None:
        # Runs inside feed_data: data_received hands this read's body on right after.
        ex = self._exchange
        if ex is None or self._parser is None:
            return
        ex.keep_alive = self._parser.should_keep_alive()
        ex.complete = True
        self._parser = None
        ex.wake()

    # -- used by the transport and the stream
    def start(self, exchange: _Exchange) -> None:
        self._exchange = exchange
        self._parser = httptools.HttpResponseParser(self)

    def consumed(self, nbytes: int) -> None:
        ex = self._exchange
        if ex is None:
            return
        ex.buffered -= nbytes
        if self._paused and ex.buffered < _HIGH_WATER // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def finish(self) -> None:
        self._exchange = None

    def _fail(self, error: Exception) -> None:
        ex = self._exchange
        if ex is not None and ex.error is None and not ex.complete:
            ex.error = error
            if not ex.headers_done.done():
                ex.headers_done.set_exception(error)
                ex.headers_done.exception()  # retrieved: nobody else may be waiting
            ex.wake()
        self.abort()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class _StampedBody(httpx.AsyncByteStream):
    """The body of one response: ``stamped()`` yields ``(arrival_ns, bytes)`` pieces."""

    def __init__(
        self,
        conn: _Connection,
        exchange: _Exchange,
        release: Callable[[_Connection, bool], None],
        read_timeout_s: float | None,
    ) -> None:
        self._conn = conn
        self._ex = exchange
        self._release = release
        self._read_timeout_s = read_timeout_s
        self._closed = False

    def _deadline(self, loop: asyncio.AbstractEventLoop) -> ReadDeadline | None:
        timeout_s = self._read_timeout_s
        return ReadDeadline(loop, timeout_s) if timeout_s is not None else None

    async def _wait(self, loop: asyncio.AbstractEventLoop, deadline: ReadDeadline | None) -> None:
        """Until the protocol wakes this body (bytes, the end, an error) or the read times out."""
        ex = self._ex
        waiter = loop.create_future()
        ex.waiter = waiter
        if deadline is not None:
            deadline.waiting(waiter)
        try:
            await waiter
        finally:
            ex.waiter = None

    async def stamped(self) -> AsyncIterator[tuple[int, bytes]]:
        ex = self._ex
        conn = self._conn
        chunks = ex.chunks
        loop = asyncio.get_running_loop()
        deadline = self._deadline(loop)
        try:
            while True:
                while chunks:
                    item = chunks.popleft()
                    conn.consumed(len(item[1]))
                    yield item
                if ex.complete:
                    return
                if ex.error is not None:
                    raise ex.error
                await self._wait(loop, deadline)
        finally:
            if deadline is not None:
                deadline.cancel()
            await self.aclose()

    async def drain(self, sink: Callable[[int, bytes], None]) -> None:
        """Give ``sink`` each read's ``(arrival_ns, bytes)``, as ``stamped()`` yields them,
        until the body ends; raises what ``stamped()`` raises.

        ``sink`` runs inside the protocol's ``data_received``: no task switch and no future
        per read, only one wait for the whole body (the read timeout restarts with every
        read). It must be quick and must not raise (that fails the exchange).
        """
        ex = self._ex
        conn = self._conn
        loop = asyncio.get_running_loop()
        deadline = self._deadline(loop)
        try:
            chunks = ex.chunks
            while chunks:
                stamp, data = chunks.popleft()
                conn.consumed(len(data))
                sink(stamp, data)
            ex.sink = sink
            ex.deadline = deadline
            while not ex.complete:
                if ex.error is not None:
                    raise ex.error
                await self._wait(loop, deadline)
            if ex.error is not None:  # the sink failed on the last read
                raise ex.error
        finally:
            ex.sink = None
            ex.deadline = None
            if deadline is not None:
                deadline.cancel()
            await self.aclose()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for _, data in self.stamped():
            yield data

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        ex = self._ex
        reusable = ex.complete and ex.keep_alive and ex.error is None and not self._conn.closed
        self._conn.finish()
        self._release(self._conn, reusable)


class FastTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 transport stamping every socket read; a keep-alive pool per origin."""

    def __init__(
        self,
        now_ns: Callable[[], int],
        *,
        max_connections: int | None = None,
        verify: bool | ssl.SSLContext = True,
    ) -> None:
        self._now_ns = now_ns
        self._idle: dict[tuple[str, str, int], deque[_Connection]] = {}
        self._limit = asyncio.Semaphore(max_connections) if max_connections else None
        self._verify = verify
        # Built on the first https connection: loading the CA store costs ~30 ms, which a
        # plain-http run would otherwise pay before its first request.
        self._ssl: ssl.SSLContext | None = verify if isinstance(verify, ssl.SSLContext) else None
        self._open: set[_Connection] = set()

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
            if not self._verify:
                self._ssl.check_hostname = False
                self._ssl.verify_mode = ssl.CERT_NONE
        return self._ssl

    async def _connect(
        self, origin: tuple[str, str, int], timeout_s: float | None, trace: Trace | None
    ) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        if trace is not None:
            await trace("connection.connect_tcp.started", {"host": host, "port": port})
        try:
            async with asyncio.timeout(timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self._now_ns),
                    host,
                    port,
                    ssl=self._ssl_context() if scheme == "https" else None,
                    server_hostname=host if scheme == "https" else None,
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connect to {host}:{port} timed out") from exc
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(f"connect to {host}:{port} failed: {exc}") from exc
        if trace is not None:
            await trace("connection.connect_tcp.complete", {"host": host, "port": port})
        self._open.add(conn)
        return conn

    def _release(self, origin: tuple[str, str, int]) -> Callable[[_Connection, bool], None]:
        def release(conn: _Connection, reusable: bool) -> None:
            if reusable:
                conn.reused = True
                self._idle.setdefault(origin, deque()).append(conn)
            else:
                conn.abort()
                self._open.discard(conn)
            if self._limit is not None:
                self._limit.release()

        return release

    def _idle_connection(self, origin: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
            self._open.discard(conn)
        return None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported scheme {scheme!r}")
        port = url.port or (443 if scheme == "https" else 80)
        origin = (scheme, url.host, port)
        timeouts = request.extensions.get("timeout", {})
        trace: Trace | None = request.extensions.get("trace")
        body = await request.aread()
        head = _request_head(request, body)
        if self._limit is not None:
            await self._limit.acquire()
        try:
            for attempt in (0, 1):
                conn = self._idle_connection(origin)
                if conn is None:
                    conn = await self._connect(origin, timeouts.get("connect"), trace)
                try:
                    return await self._exchange(conn, origin, head, body, timeouts, trace)
                except httpx.RemoteProtocolError:
                    # A kept-alive connection the server closed while idle fails before
                    # any response byte: retry once on a fresh connection.
                    if attempt == 0 and conn.reused:
                        continue
                    raise
            raise AssertionError("unreachable")
        except BaseException:
            if self._limit is not None:
                self._limit.release()
            raise

    async def _exchange(
        self,
        conn: _Connection,
        origin: tuple[str, str, int],
        head: bytes,
        body: bytes,
        timeouts: Mapping[str, float | None],
        trace: Trace | None,
    ) -> httpx.Response:
        loop = asyncio.get_running_loop()
        exchange = _Exchange(loop.create_future())
        conn.start(exchange)
        transport = conn.transport
        if transport is None or conn.closed:
            raise httpx.RemoteProtocolError("connection closed before the request was sent")
        transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            transport.write(body)
        if trace is not None:
            await trace("http11.send_request_body.complete", {})
        try:
            async with asyncio.timeout(timeouts.get("read")):
                await exchange.headers_done
        except TimeoutError as exc:
            conn.abort()
            self._open.discard(conn)
            raise httpx.ReadTimeout("no response headers within the read timeout") from exc
        except BaseException:
            conn.abort()
            self._open.discard(conn)
            raise
        if trace is not None:
            await trace("http11.receive_response_headers.complete", {})
        stream = _StampedBody(conn, exchange, self._release(origin), timeouts.get("read"))
        return httpx.Response(
            status_code=exchange.status,
            headers=exchange.headers,
            stream=stream,
            extensions={"http_version": b"HTTP/1.1", STAMPED: stream},
        )

    async def aclose(self) -> None:
        for conn in list(self._open):
            conn.abort()
        self._open.clear()
        self._idle.clear()


def _request_head(request: httpx.Request, body: bytes) -> bytes:
    """The request line and headers, with Host and Content-Length."""
    target = request.url.raw_path
    lines = [request.method.encode() + b" " + target + b" HTTP/1.1"]
    have_length = False
    for name, value in request.headers.raw:
        lower = name.lower()
        if lower == b"transfer-encoding":
            continue
        if lower == b"content-length":
            have_length = True
        lines.append(name + b": " + value)
    if not have_length and (body or request.method in ("POST", "PUT", "PATCH")):
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"
