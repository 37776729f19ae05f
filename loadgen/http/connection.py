"""One HTTP/1.1 connection of the fast transport, and the streamed response on it.

``Connection`` is an ``asyncio.Protocol``. Every ``data_received`` is stamped with the
run's clock before a byte is parsed; httptools (llhttp, in C) then parses the response
head, and the body of a chunked response goes to ``loadgen.http._chunked`` (httptools would
hand each chunk to Python as its own object, at one chunk per SSE event more than the
event's classification costs), other bodies to httptools too. The body bytes of one read
go on as one stamped piece: straight to the consumer's
callback while it drains the body (``Exchange.drain``, inside ``data_received``: no
future or task switch per read), else into a buffer that ``stamped()`` yields from. The
``Exchange`` also carries the status, the raw headers and how far it got
(``loadgen.http.stamping.Progress``). Request heads and header checks are
``loadgen.http.headers``'.

What a server may do, and what the exchange makes of it:

* interim responses (``100 Continue``, ``103 Early Hints``: 1xx but 101) are skipped; the
  status is the final response's;
* a body without Content-Length or chunking ends when the server closes the connection
  (HTTP/1.0, or HTTP/1.1 close-delimited): a clean close ends it normally;
* bytes that are not an HTTP/1.1 response (a malformed head or chunk, a ``101`` nobody
  asked for) fail with ``MalformedResponse``, a protocol error rather than a disconnect;
  the body bytes that came before the fault, in the same read too, are delivered first;
* a head is read up to ``MAX_HEAD_BYTES``; beyond, ``MalformedResponse``;
* a consumer that has seen enough (a sink that answers True) ends the body there: the
  connection is closed, nothing more is read.

Raises httpx's exception types, as an httpx transport does; must not import the client or
the pool (``loadgen.http.pool``), which build on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import httptools
import httpx

from loadgen.http.exchange import Exchange
from loadgen.http.stamping import MalformedResponse

if TYPE_CHECKING:
    from loadgen.http._chunked import Dechunker

_Dechunker: type[Dechunker] | None
try:
    from loadgen.http._chunked import Dechunker as _Dechunker
except ImportError:  # built without a C compiler: httptools decodes the bodies too
    _Dechunker = None

_HIGH_WATER = 4 * 1024 * 1024
"""Buffered body bytes above which the socket stops being read (back-pressure)."""

MAX_HEAD_BYTES = 64 * 1024
"""The longest response head read (status line and headers, interim responses' too):
servers send a few hundred bytes (nginx refuses requests whose header lines pass 8 KiB),
and httptools keeps every header and rebuilds a header value read in pieces, so a head
that never ends would cost memory, and time, without bound. Checked once per read: a head
may end up to one read beyond it."""


Origin = tuple[str, str, int]
"""Scheme, host and port: what one keep-alive pool serves."""


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection to ``origin``; parses responses with httptools as bytes
    arrive."""

    def __init__(self, now_ns: Callable[[], int], origin: Origin) -> None:
        self._now_ns = now_ns
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self._exchange: Exchange | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._pieces: list[bytes] = []
        self._read_ns = 0
        """The arrival stamp of the read being parsed."""
        self._dechunker: Dechunker | None = None
        """The C decoder of the current chunked body, once httptools has read its head."""
        self._head_tail = b""
        """The last bytes of a head not yet complete (its end may straddle two reads)."""
        self._chunked_head = False
        self._until_close = False
        """The body is delimited by the connection's close (no length, no chunking)."""
        self._interim = False
        """The head being parsed is an interim response's (1xx)."""
        self._head_bytes = 0
        """Bytes read while no final head had ended."""
        self._aborted = False
        """This side closed the connection (a clean close then ends nothing)."""
        self._keep_alive = False
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
        self._read_ns = stamp
        dechunker = self._dechunker
        if dechunker is not None:  # the body of a chunked response, after its head
            self._dechunk(stamp, dechunker, data)
            return
        parser = self._parser
        if parser is None:
            self._fail(MalformedResponse("unexpected bytes with no request in flight"))
            return
        ex = self._exchange
        try:
            if ex is not None and ex.status == 0 and _Dechunker is not None:
                rest = self._feed_head(parser, ex, data)
                if rest is not None:
                    dechunker = self._dechunker
                    assert dechunker is not None
                    self._dechunk(stamp, dechunker, rest)
                    return
            else:
                parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._flush_pieces(ex, stamp)  # the body before the fault still counts
            if isinstance(exc, httptools.HttpParserUpgrade):
                error = "the server switched protocols (101), which was not asked for"
            else:
                error = f"malformed HTTP response: {exc}"
            self._fail(MalformedResponse(error))
            return
        if ex is not None and ex.status == 0:  # still no (final) head: how long is it?
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._fail(
                    MalformedResponse(
                        f"response head longer than {MAX_HEAD_BYTES // 1024} KiB: not read further"
                    )
                )
                return
        self._flush_pieces(ex, stamp)

    def _flush_pieces(self, ex: Exchange | None, stamp: int) -> None:
        """The body bytes httptools gave during one read, as one stamped piece however
        many HTTP chunks carried them."""
        pieces = self._pieces
        if pieces and ex is not None:
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            self._deliver(ex, stamp, body)

    def _feed_head(
        self, parser: httptools.HttpResponseParser, ex: Exchange, data: bytes
    ) -> bytes | None:
        """Feed httptools the head, exactly up to its end: the body bytes after it when the
        C decoder takes the body on (a chunked response whose head ended there), else None
        (httptools was fed the whole read). Interim responses' heads (1xx) before it are
        fed one by one, the same way."""
        view = memoryview(data)
        start = 0  # where the head being looked for starts in ``data``
        while True:
            tail = self._head_tail
            rest = data[start:] if start else data
            buf = tail + rest if tail else rest
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self._head_tail = buf[-3:]
                parser.feed_data(view[start:])
                return None
            self._head_tail = b""
            split = start + end + 4 - len(tail)
            parser.feed_data(view[start:split])
            if ex.status == 0 and not ex.complete and ex.error is None and split < len(data):
                start = split  # an interim response: the final head is still to come
                continue
            break
        if self._chunked_head and ex.status >= 200 and not ex.complete and not self._pieces:
            assert _Dechunker is not None
            self._dechunker = _Dechunker()
            return data[split:]
        parser.feed_data(view[split:])  # anything else: httptools reads the body as well
        return None

    def _dechunk(self, stamp: int, dechunker: Dechunker, data: bytes) -> None:
        ex = self._exchange
        body = dechunker.feed(data)
        if ex is not None:
            if dechunker.done:
                # Bytes after the body (none are expected: no pipelining) close the
                # connection.
                self._complete(ex, self._keep_alive and not dechunker.leftover)
            if body:
                self._deliver(ex, stamp, body)  # the chunks before a fault count too
        if dechunker.error is not None:
            self._fail(MalformedResponse(f"malformed HTTP response: {dechunker.error}"))

    def _deliver(self, ex: Exchange, stamp: int, body: bytes) -> None:
        """One read's body bytes: to the consumer's sink while it drains, else buffered."""
        progress = ex.progress
        if progress.first_byte_ns is None:
            progress.first_byte_ns = stamp
        sink = ex.sink
        if sink is not None:
            try:
                enough = sink(stamp, body)
            except Exception as exc:  # the consumer failed: so does the exchange
                ex.error = exc  # even when this read completed the message
                ex.wake()
                self.abort()
                return
            if enough:
                self.stop_reading(ex)
                return
            draining = ex.draining
            if draining is not None:
                draining.since_ns = stamp  # the wait for bytes starts again
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
            if exc is None and self._until_close and not self._aborted and ex.status >= 200:
                self._complete(ex, False)  # the server's clean close ends the body
                return
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
    def on_message_begin(self) -> None:
        ex = self._exchange
        if ex is not None and ex.complete:  # bytes after the response: not ours, no reuse
            ex.keep_alive = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._exchange is not None:
            self._exchange.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        ex = self._exchange
        if ex is None or self._parser is None:
            return
        status = self._parser.get_status_code()
        if status < 200:  # 1xx: an interim response (or a switch, which fails the parse)
            self._interim = True
            ex.raw_headers.clear()
            return
        ex.status = status
        # Inside the data_received of the read that completed the head: its arrival.
        ex.progress.headers_ns = self._read_ns
        self._keep_alive = self._parser.should_keep_alive()
        self._chunked_head = _Dechunker is not None and _only_chunked(ex.raw_headers)
        self._until_close = _close_delimited(ex.raw_headers)
        if not ex.headers_done.done():
            ex.headers_done.set_result(None)

    def on_message_complete(self) -> None:
        # Runs inside feed_data: data_received hands this read's body on right after.
        ex = self._exchange
        if ex is None or self._parser is None:
            return
        if self._interim:  # the parser goes on to the final response
            self._interim = False
            return
        self._complete(ex, self._parser.should_keep_alive())

    def _complete(self, ex: Exchange, keep_alive: bool) -> None:
        ex.keep_alive = keep_alive
        ex.complete = True
        self._parser = None
        self._dechunker = None
        ex.wake()

    # -- used by the transport and the response
    def start(self, exchange: Exchange) -> None:
        self._exchange = exchange
        self._parser = httptools.HttpResponseParser(self)
        self._dechunker = None
        self._head_tail = b""
        self._chunked_head = False
        self._until_close = False
        self._interim = False
        self._head_bytes = 0

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

    def stop_reading(self, ex: Exchange) -> None:
        """The consumer has seen enough of ``ex``'s body: it ends here, unread bytes and
        all, and the connection is closed (it cannot be reused mid-body)."""
        if not ex.complete and ex.error is None:
            self._complete(ex, False)
        self.abort()

    def abort(self) -> None:
        self.closed = True
        self._aborted = True
        if self.transport is not None:
            self.transport.abort()


def _close_delimited(raw_headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the body ends where the connection does: neither a Content-Length nor a
    Transfer-Encoding (RFC 9112 6.3, the last rule). (A status without a body, 204 or
    304, has ended with its head before the close could matter.)"""
    for name, _ in raw_headers:
        lower = name.lower()
        if lower in (b"content-length", b"transfer-encoding"):
            return False
    return True


def _only_chunked(raw_headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the body is framed by the chunked coding and nothing else: one
    Transfer-Encoding, ``chunked``, and no Content-Length (else httptools decodes it)."""
    codings = 0
    for name, value in raw_headers:
        lower = name.lower()
        if lower == b"content-length":
            return False
        if lower == b"transfer-encoding":
            codings += 1
            if codings > 1 or value.strip().lower() != b"chunked":
                return False
    return codings == 1
