"""The seam where response bytes are stamped on arrival.

``StampingTransport`` wraps any ``httpx.AsyncBaseTransport`` (by default httpx's own) and
stamps every read of the response body with the run's clock *before* anything parses it.
The stamped stream is exposed to the client through ``response.extensions[STAMPED]``; a
faster transport can provide the same extension natively. The client never stamps bytes
itself unless a transport offers no stamped stream (then it stamps as it iterates).
Both transports raise ``MalformedResponse`` for bytes that are not HTTP and a plain
``RemoteProtocolError`` for a server that went away (``classified``), so the client
records the same outcome for the same bytes on either. ``Progress`` is when one exchange
passed each step: the fast transport fills it as it goes,
httpx's transport through its ``trace`` extension (``Progress.trace``). ``read_head`` reads
a body (an error response's) up to a cap, whatever its length.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

STAMPED = "loadgen.stamped"
"""Response extension key holding a ``StampedStream``."""


class MalformedResponse(httpx.RemoteProtocolError):
    """The server's bytes are not an HTTP/1.1 response (a malformed head or chunk, a head
    beyond the transport's limit, an unasked-for protocol switch): the server broke the
    protocol, which is not the same as going away (a plain ``RemoteProtocolError``).
    Raised by the fast transport, and by ``StampingTransport`` for httpx's own."""


_WENT_AWAY = ("Server disconnected", "peer closed connection")
"""How httpx's transport (httpcore, h11) begins a ``RemoteProtocolError`` for a server
that closed the connection before the response ended; any other is a parse error."""
_H11_BUFFER = "Receive buffer too long"


def classified(exc: httpx.RemoteProtocolError) -> httpx.RemoteProtocolError:
    """``exc`` from httpx's transport as the fast transport would raise it: a server that
    went away stays a ``RemoteProtocolError`` (a ``disconnect``), bytes that are not HTTP
    (h11's parse errors: a bad status line, header or chunk size, a head beyond httpcore's
    100 KiB) become ``MalformedResponse`` (a ``protocol_error``)."""
    text = str(exc)
    if isinstance(exc, MalformedResponse) or text.startswith(_WENT_AWAY):
        return exc
    if text == _H11_BUFFER:
        text = (
            "response head or chunk line longer than 100 KiB "
            "(httpcore's limit; h11: Receive buffer too long)"
        )
    return MalformedResponse(f"malformed HTTP response: {text}")


class Progress:
    """How far one request's exchange got, and when: epoch ns on the run's clock (None:
    the step did not happen, e.g. no new connection). Mutable, one per request, filled as
    the exchange goes (a per-request record of events, not a value)."""

    __slots__ = (
        "connect_start_ns",
        "connected_ns",
        "first_byte_ns",
        "headers_ns",
        "now_ns",
        "on_send",
        "sent_ns",
        "status",
        "written_ns",
    )

    def __init__(self, now_ns: Callable[[], int]) -> None:
        self.now_ns = now_ns
        self.sent_ns: int | None = None
        """The request's first action on the wire: its first byte written, or the start of
        the connect it had to make first (its TTFT origin; ``loadgen.client``)."""
        self.connect_start_ns: int | None = None
        self.connected_ns: int | None = None
        self.written_ns: int | None = None
        """The request was handed to the socket."""
        self.headers_ns: int | None = None
        """The response head was parsed."""
        self.first_byte_ns: int | None = None
        """The first body bytes were read."""
        self.status: int | None = None
        self.on_send: Callable[[], object] | None = None
        """Called as the request goes to the wire (the replay's dispatch record,
        ``loadgen.dispatched``): just before the request's bytes are written, by the fast
        transport itself and here for httpx's (httpcore's ``send_request_headers.started``:
        from there to its socket write nothing yields to the event loop)."""

    async def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpx's ``trace`` extension; only these events matter for the TTFT chain."""
        if event == "connection.connect_tcp.started":
            self.connect_start_ns = self.now_ns()
            if self.sent_ns is None:
                self.sent_ns = self.connect_start_ns
        elif event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            self.connected_ns = self.now_ns()
        elif event in _SEND_HEADERS_STARTED:
            if self.sent_ns is None:
                self.sent_ns = self.now_ns()
            if self.on_send is not None:
                self.on_send()
        elif event in _SEND_BODY_COMPLETE:
            self.written_ns = self.now_ns()
        elif event in _HEADERS_COMPLETE:
            self.headers_ns = self.now_ns()


# httpcore names its trace events after the connection's protocol: ``http11.*``, ``http2.*``.
_SEND_HEADERS_STARTED = (
    "http11.send_request_headers.started",
    "http2.send_request_headers.started",
)
_SEND_BODY_COMPLETE = ("http11.send_request_body.complete", "http2.send_request_body.complete")
_HEADERS_COMPLETE = (
    "http11.receive_response_headers.complete",
    "http2.receive_response_headers.complete",
)


class StampedStream(Protocol):
    """A response body as ``(arrival_ns, bytes)`` pairs, one per read from the socket."""

    def stamped(self) -> AsyncIterator[tuple[int, bytes]]: ...

    async def drain(self, sink: Callable[[int, bytes], bool | None]) -> None:
        """Call ``sink`` with every pair ``stamped()`` yields, until the body ends or
        ``sink`` answers True (it has seen enough: the rest is not read, and closing the
        response closes its connection)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BodyHead:
    """The start of a body read up to a cap (``read_head``): an error response's, whose
    length is the server's to choose."""

    data: bytes
    """The first bytes, at most the ``keep`` asked for."""
    received: int
    """Bytes read in all (those beyond ``data`` were counted and let go)."""
    cut: bool
    """The reading stopped at the cap: the rest of the body was not read (its connection
    is closed with the response)."""

    def note(self) -> str:
        """A few words on how much was read, for the error text: empty for a whole body
        that ``data`` holds."""
        if self.cut:
            return f" [body cut after {_mib(self.received)} read: connection closed]"
        if self.received > len(self.data):
            return f" [body of {_mib(self.received)}, first {_mib(len(self.data))} kept]"
        return ""


ERROR_HEAD_BYTES = 64 * 1024
"""What is kept of an error body: room for any JSON error object a server sends (the
message recorded is cut to 500 characters anyway)."""
ERROR_BODY_CAP = 1024 * 1024
"""How much of an error body is read before the connection is closed instead: a long
error page is read to its end (the connection is kept), an endless one is not."""


async def read_head(
    body: StampedStream, *, keep: int = ERROR_HEAD_BYTES, cap: int = ERROR_BODY_CAP
) -> BodyHead:
    """Read ``body`` until it ends or ``cap`` bytes were read, keeping the first ``keep``
    of them: memory is ``keep`` plus one read, whatever the server sends."""
    head = bytearray()
    received = 0

    def sink(_ts: int, data: bytes) -> bool:
        nonlocal received
        received += len(data)
        if len(head) < keep:
            head.extend(data[: keep - len(head)])
        return received >= cap

    await body.drain(sink)
    return BodyHead(data=bytes(head), received=received, cut=received >= cap)


def error_note(status: int, headers: Mapping[str, str], head: BodyHead) -> str:
    """What an error's text adds to the server's message: where a redirect points (it is
    not followed: a load test measures the endpoint it was given), and how much of the
    body was read."""
    note = head.note()
    if 300 <= status < 400:
        location = headers.get("location")
        target = f" to {location[:200]}" if location else ""
        note = f" [redirect{target}: not followed]" + note
    return note


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1024 * 1024):.1f} MiB" if nbytes >= 1024 * 1024 else f"{nbytes} bytes"


def stamped_body(response: httpx.Response, now_ns: Callable[[], int]) -> StampedStream:
    """The stamped body of ``response``: its transport's (``STAMPED``), or its stream
    stamped as it is read."""
    stamped: StampedStream | None = response.extensions.get(STAMPED)
    if stamped is not None:
        return stamped
    stream = response.stream
    assert isinstance(stream, httpx.AsyncByteStream)
    return _StampingStream(stream, now_ns)


class _StampingStream(httpx.AsyncByteStream):
    """Wraps a transport's body stream; iterating ``stamped()`` yields arrival-stamped reads."""

    __slots__ = ("_inner", "_now_ns")

    def __init__(self, inner: httpx.AsyncByteStream, now_ns: Callable[[], int]) -> None:
        self._inner = inner
        self._now_ns = now_ns

    async def stamped(self) -> AsyncIterator[tuple[int, bytes]]:
        now_ns = self._now_ns
        try:
            async for data in self._inner:
                yield now_ns(), data
        except httpx.RemoteProtocolError as exc:
            raise classified(exc) from exc

    async def drain(self, sink: Callable[[int, bytes], bool | None]) -> None:
        now_ns = self._now_ns
        try:
            async for data in self._inner:
                if sink(now_ns(), data):
                    break  # the response's close then drops the connection mid-body
        except httpx.RemoteProtocolError as exc:
            raise classified(exc) from exc

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for data in self._inner:
                yield data
        except httpx.RemoteProtocolError as exc:
            raise classified(exc) from exc

    async def aclose(self) -> None:
        await self._inner.aclose()


class StampingTransport(httpx.AsyncBaseTransport):
    """An httpx transport that stamps each body read of the inner transport on arrival."""

    def __init__(self, inner: httpx.AsyncBaseTransport, now_ns: Callable[[], int]) -> None:
        self._inner = inner
        self._now_ns = now_ns

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except httpx.RemoteProtocolError as exc:
            raise classified(exc) from exc
        stream = response.stream
        if not isinstance(stream, httpx.AsyncByteStream):
            return response
        wrapped = _StampingStream(stream, self._now_ns)
        extensions = dict(response.extensions)
        extensions[STAMPED] = wrapped
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=wrapped,
            extensions=extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def default_transport(
    now_ns: Callable[[], int],
    *,
    max_connections: int,
    keepalive_expiry_s: float = 30.0,
    http2: str | None = None,
) -> StampingTransport:
    """httpx's own transport with a pool sized to the run, stamped on arrival: HTTP/1.1, or
    with ``http2`` HTTP/2 (the ``h2`` package): ``"prior-knowledge"`` speaks it from the
    first byte (h2c, for ``http://`` URLs, where nothing negotiates it), ``"alpn"``
    offers it in the TLS handshake and falls back to HTTP/1.1 when the server declines."""
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=keepalive_expiry_s,
    )
    inner = httpx.AsyncHTTPTransport(
        limits=limits,
        retries=0,
        http1=http2 != "prior-knowledge",
        http2=http2 is not None,
    )
    return StampingTransport(inner, now_ns)
