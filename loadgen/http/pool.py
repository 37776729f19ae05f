"""The fast streaming transport: HTTP/1.1 over ``asyncio.Protocol`` with httptools' parser.

An ``httpx.AsyncBaseTransport``, so httpx stays the client API: ``handle_async_request``
sends an ``httpx.Request`` and answers an ``httpx.Response`` whose
``extensions[STAMPED]`` gives the body as reads stamped on arrival (see
``loadgen.http.connection``), the same seam the stamping wrapper of httpx's own transport offers
(``loadgen.http.stamping``).

The replay's client goes one level lower, to spend no time per request on what it does not
use: it encodes each request before it is due (``encode``, or a ``RequestTemplate`` that
only adds the request id and the body to a head httpx built once) and sends it with
``open``, which answers the ``loadgen.http.exchange.Exchange`` itself and keeps the
request's whole timeout on the exchange's one timer instead of an ``asyncio.timeout``.

Scope: HTTP/1.1, keep-alive, a per-origin pool sized to the run, TLS through ``ssl``,
connect, read and overall timeouts. No HTTP/2, proxies, redirects or compression (the
client asks for ``identity``): use ``--transport httpx`` for those.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from loadgen.http.connection import Connection, Origin
from loadgen.http.deadline import ReadDeadline
from loadgen.http.exchange import Exchange
from loadgen.http.headers import check_header, request_head
from loadgen.http.stamping import STAMPED, Progress

Trace = Callable[[str, Mapping[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A request encoded for the wire, ready to write on a connection to ``origin``; or,
    with ``refused``, one that must not be sent."""

    origin: Origin
    data: bytes
    """Request line, headers and body (or only the first two, with ``body``)."""
    refused: str | None = None
    """Why the request cannot be sent (a header that ``check_header`` refuses): ``open``
    raises it as ``httpx.LocalProtocolError`` before anything is written, so that the
    request fails where every request's failure is recorded, as a row."""
    body: memoryview | None = None
    """The body, written after ``data``: a view of a body built in another process
    (``loadgen.prepare.ahead``), never copied into one buffer with the head."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeouts:
    """The limits of an exchange (the same for every request of a run)."""

    connect_s: float | None = None
    read_s: float | None = None
    """A wait for bytes (the response head, or between reads) that lasts this long fails."""
    total_s: float | None = None
    """The whole request, from the wait for a free connection to the body's end: ``open``
    takes it as an absolute deadline; this is for the message."""

    def expired(self) -> TimeoutError:
        total = f"{self.total_s:g} s" if self.total_s is not None else "its deadline"
        return TimeoutError(f"no complete response within {total}")


def origin_of(url: httpx.URL) -> Origin:
    scheme = url.scheme
    if scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol(f"unsupported scheme {scheme!r}")
    return scheme, url.host, url.port or (443 if scheme == "https" else 80)


def encode(request: httpx.Request, body: bytes) -> Outgoing:
    """``request`` (whose body is ``body``) as the fast transport writes it."""
    return Outgoing(origin_of(request.url), request_head(request, body) + body)


_ID_HEADER = b"x-request-id"
_LENGTH_HEADER = b"content-length"


@dataclass(frozen=True, slots=True)
class RequestTemplate:
    """The wire form of requests that differ only in their ``X-Request-Id`` and body.

    Built once from a request httpx made (so its headers are exactly those httpx would
    send: the client's defaults, auth and extra headers), then each request costs one
    concatenation instead of building an ``httpx.Request`` (about 100 µs) and encoding it.
    """

    origin: Origin
    head: bytes
    """Request line and headers but the id and the length, each line ending in CRLF."""
    refused: str | None = None
    """Why no request of this template may be sent (one of its headers is refused)."""

    @classmethod
    def of(cls, request: httpx.Request) -> RequestTemplate:
        lines = [request.method.encode() + b" " + request.url.raw_path + b" HTTP/1.1\r\n"]
        for name, value in request.headers.raw:
            if name.lower() in (_ID_HEADER, _LENGTH_HEADER, b"transfer-encoding"):
                continue  # replaced by each request's own (``encode``)
            try:
                check_header(name, value)
            except httpx.LocalProtocolError as exc:
                return cls(origin_of(request.url), b"", refused=str(exc))
            lines.append(name + b": " + value + b"\r\n")
        return cls(origin_of(request.url), b"".join(lines))

    def encode(self, request_id: str, body: bytes | memoryview) -> Outgoing:
        """The request with this id and body; a refused ``Outgoing`` (``open`` raises before
        writing) when the id cannot be a header value: a control byte but tab (CR, LF or
        NUL would end the header and inject what follows), or a character beyond ASCII
        (which httpx, too, refuses to encode)."""
        if self.refused is not None:
            return Outgoing(self.origin, b"", refused=self.refused)
        if not (request_id.isascii() and request_id.isprintable()):
            refused = _id_refusal(request_id)
            if refused is not None:
                return Outgoing(self.origin, b"", refused=refused)
        if isinstance(body, memoryview):
            head = b"%sx-request-id: %s\r\ncontent-length: %d\r\n\r\n" % (
                self.head,
                request_id.encode(),
                len(body),
            )
            return Outgoing(self.origin, head, body=body)
        return Outgoing(
            self.origin,
            b"%sx-request-id: %s\r\ncontent-length: %d\r\n\r\n%s"
            % (self.head, request_id.encode(), len(body), body),
        )


def _id_refusal(request_id: str) -> str | None:
    """Why ``request_id`` cannot be sent as the ``x-request-id`` value, or None."""
    if not request_id.isascii():
        pos, char = next((i, c) for i, c in enumerate(request_id) if not c.isascii())
        return (
            f"header 'x-request-id': {char!r} at position {pos} of its value is not ASCII: "
            "nothing was sent"
        )
    try:
        check_header(_ID_HEADER, request_id.encode("ascii"))
    except httpx.LocalProtocolError as exc:
        return str(exc)
    return None


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
        self._idle: dict[Origin, deque[Connection]] = {}
        self._max = max_connections or None
        self._busy = 0
        """Connections in use (or handed to a waiter), at most ``_max``."""
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._verify = verify
        # Built on the first https connection: loading the CA store costs ~30 ms, which a
        # plain-http run would otherwise pay before its first request.
        self._ssl: ssl.SSLContext | None = verify if isinstance(verify, ssl.SSLContext) else None
        self._open: set[Connection] = set()

    @property
    def connections_in_use(self) -> int:
        """Connection slots taken (by exchanges not yet closed, or handed to a waiter)."""
        return self._busy

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
            if not self._verify:
                self._ssl.check_hostname = False
                self._ssl.verify_mode = ssl.CERT_NONE
        return self._ssl

    def _remaining_s(self, timeout_s: float | None, deadline_ns: int | None) -> float | None:
        """``timeout_s``, or less where the deadline comes first."""
        if deadline_ns is None:
            return timeout_s
        left = max(0.0, (deadline_ns - self._now_ns()) / 1e9)
        return left if timeout_s is None else min(timeout_s, left)

    async def _connect(
        self,
        origin: Origin,
        timeouts: Timeouts,
        deadline_ns: int | None,
        progress: Progress,
        trace: Trace | None,
    ) -> Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        progress.connect_start_ns = self._now_ns()
        if progress.sent_ns is None:
            progress.sent_ns = progress.connect_start_ns
        if trace is not None:
            await trace("connection.connect_tcp.started", {"host": host, "port": port})
        try:
            async with asyncio.timeout(self._remaining_s(timeouts.connect_s, deadline_ns)):
                _, conn = await loop.create_connection(
                    lambda: Connection(self._now_ns, origin),
                    host,
                    port,
                    ssl=self._ssl_context() if scheme == "https" else None,
                    server_hostname=host if scheme == "https" else None,
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connect to {host}:{port} timed out") from exc
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(f"connect to {host}:{port} failed: {exc}") from exc
        progress.connected_ns = self._now_ns()
        if trace is not None:
            await trace("connection.connect_tcp.complete", {"host": host, "port": port})
        self._open.add(conn)
        return conn

    async def warm(self, url: httpx.URL, count: int, timeouts: Timeouts) -> list[int]:
        """Open connections to ``url``'s origin until ``count`` are idle there (never
        beyond ``max_connections``), all at once, before a run's start: its first requests
        then write at once instead of connecting (a connect started by a whole wave at once
        completes only after the wave is dispatched). Returns each new connection's connect
        time (ns). A connect that fails is let go: the request that needs it connects
        itself and records what happens."""
        origin = origin_of(url)
        idle = self._idle.setdefault(origin, deque())
        wanted = count - sum(1 for conn in idle if not conn.closed)
        if self._max is not None:
            wanted = min(wanted, self._max - self._busy - len(idle))
        if wanted <= 0:
            return []
        progresses = [Progress(self._now_ns) for _ in range(wanted)]
        opened = await asyncio.gather(
            *(self._connect(origin, timeouts, None, p, None) for p in progresses),
            return_exceptions=True,
        )
        times: list[int] = []
        for conn, progress in zip(opened, progresses, strict=True):
            if isinstance(conn, Connection):
                conn.reused = True  # idle like a kept-alive one: retried once if closed
                idle.append(conn)
                if progress.connected_ns is not None and progress.connect_start_ns is not None:
                    times.append(progress.connected_ns - progress.connect_start_ns)
            elif not isinstance(conn, httpx.HTTPError):
                raise conn
        return times

    # -- connection slots: at most ``max_connections`` in use, handed on first come first
    # served. (asyncio.Semaphore does the same at three times the cost per request.)
    async def _acquire(self, timeouts: Timeouts, deadline_ns: int | None) -> None:
        if self._max is None:
            return
        if self._busy < self._max and not self._waiters:
            self._busy += 1
            return
        slot = asyncio.get_running_loop().create_future()
        self._waiters.append(slot)
        try:
            async with asyncio.timeout(self._remaining_s(None, deadline_ns)):
                await slot  # resolved by _give_back: the slot is ours, already counted
        except BaseException as exc:
            if slot.done() and not slot.cancelled():
                self._give_back()  # handed over just as we left: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(slot)
            if isinstance(exc, TimeoutError):
                raise timeouts.expired() from exc
            raise

    def _give_back(self) -> None:
        if self._max is None:
            return
        waiters = self._waiters
        while waiters:
            slot = waiters.popleft()
            if not slot.done():
                slot.set_result(None)
                return
        self._busy -= 1

    def _release(self, conn: Connection, reusable: bool) -> None:
        if reusable:
            conn.reused = True
            self._idle.setdefault(conn.origin, deque()).append(conn)
        else:
            conn.abort()
            self._open.discard(conn)
        self._give_back()

    def _idle_connection(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
            self._open.discard(conn)
        return None

    async def open(
        self,
        out: Outgoing,
        progress: Progress,
        timeouts: Timeouts,
        deadline_ns: int | None = None,
        trace: Trace | None = None,
    ) -> Exchange:
        """Send ``out`` and wait for the response head; ``progress`` is filled on the way.

        ``deadline_ns`` (on the transport's clock) ends the whole request: waiting for a
        connection slot, connecting, the head and the body. Raises httpx's exceptions
        (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``, ``RemoteProtocolError``), or
        ``TimeoutError`` once the deadline has passed, here or while the body is read;
        ``LocalProtocolError`` for a refused ``out``, before anything is written."""
        if out.refused is not None:
            raise httpx.LocalProtocolError(out.refused)
        await self._acquire(timeouts, deadline_ns)
        try:
            for attempt in (0, 1):
                # The retry connects afresh: another idle connection may be as stale (a
                # server that closes idle connections closes them all).
                conn = None if attempt else self._idle_connection(out.origin)
                if conn is None:
                    conn = await self._connect(out.origin, timeouts, deadline_ns, progress, trace)
                try:
                    return await self._exchange(conn, out, progress, timeouts, deadline_ns, trace)
                except httpx.RemoteProtocolError:
                    # A kept-alive connection the server closed while idle fails before
                    # any response byte: retry once on a fresh connection.
                    if attempt == 0 and conn.reused:
                        continue
                    raise
            raise AssertionError("unreachable")
        except BaseException:
            self._give_back()
            raise

    async def _exchange(
        self,
        conn: Connection,
        out: Outgoing,
        progress: Progress,
        timeouts: Timeouts,
        deadline_ns: int | None,
        trace: Trace | None,
    ) -> Exchange:
        loop = asyncio.get_running_loop()
        deadline = None
        if timeouts.read_s is not None or deadline_ns is not None:
            deadline = ReadDeadline(
                loop,
                self._now_ns,
                timeouts.read_s,
                deadline_ns=deadline_ns,
                expired=timeouts.expired,
            )
        exchange = Exchange(conn, loop.create_future(), progress, self._release, deadline)
        conn.start(exchange)
        transport = conn.transport
        if transport is None or conn.closed:
            raise httpx.RemoteProtocolError("connection closed before the request was sent")
        if progress.on_send is not None:
            progress.on_send()  # the dispatch record: nothing may await between it and the write
        if progress.sent_ns is None:
            progress.sent_ns = self._now_ns()
        transport.write(out.data)
        if out.body is not None:
            transport.write(out.body)
        progress.written_ns = self._now_ns()
        if trace is not None:
            await trace("http11.send_request_body.complete", {})
        if deadline is not None:
            deadline.waiting(exchange.headers_done)
        try:
            await exchange.headers_done
        except BaseException:
            if deadline is not None:
                deadline.cancel()
            conn.abort()
            self._open.discard(conn)
            raise
        if trace is not None:
            await trace("http11.receive_response_headers.complete", {})
        progress.status = exchange.status
        return exchange

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        body = await request.aread()
        exchange = await self.open(
            encode(request, body),
            Progress(self._now_ns),
            Timeouts(connect_s=timeouts.get("connect"), read_s=timeouts.get("read")),
            trace=request.extensions.get("trace"),
        )
        return httpx.Response(
            status_code=exchange.status,
            headers=exchange.raw_headers,
            stream=exchange,
            extensions={"http_version": b"HTTP/1.1", STAMPED: exchange},
        )

    async def aclose(self) -> None:
        for conn in list(self._open):
            conn.abort()
        self._open.clear()
        self._idle.clear()
