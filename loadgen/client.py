"""One streaming request over an injected ``httpx.AsyncClient``, recorded as one run row.

The hot path: encode the request before it is due (``ready``); send it and note each step
of the exchange (``loadgen.http.stamping.Progress``: the fast transport directly, httpx's
through its ``trace`` extension); stamp every body read on arrival (the transport does it,
and hands each read straight to a callback: the body's ``loadgen.stream.feed.EventFeed``,
which frames the read and adds the events it completed, with its arrival time, to the
stream's ``StreamState``, in one C call where the extension is built). Nothing of a read
is kept once it is counted. With the fast transport no ``httpx.Request``, ``httpx.Response`` or
``asyncio.timeout`` is made per request: they cost more than the rest of a short
exchange. Every outcome, including cancellation, becomes
exactly one row (``RunRow``) given to the sink; exceptions never escape except
cancellation, which is re-raised after recording. The replay defers building the record of
a finished stream to the loop's spare time (``defer_records``; a cancelled request is
still recorded at once).

The record is built, and every value it takes from the server checked, by
``loadgen.rows`` (the stream's summary checks JSON types, ``loadgen.fit`` column ranges).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import httpx
import orjson

from loadgen.deferred import DeferredCalls
from loadgen.dispatched import DispatchLog
from loadgen.http.pool import FastTransport, Outgoing, RequestTemplate, Timeouts
from loadgen.http.stamping import (
    STAMPED,
    MalformedResponse,
    Progress,
    StampedStream,
    error_note,
    read_head,
    stamped_body,
)
from loadgen.openai.chunks import reply_text
from loadgen.openai.refusals import is_admission_rejected, is_context_exceeded
from loadgen.openai.timings import ServerTimings, timings_from_headers
from loadgen.redact import Scrubber
from loadgen.rows import RowBuilder
from loadgen.stream.body import BodyFeed
from loadgen.stream.feed import NATIVE, EventFeed
from loadgen.stream.responses import ResponsesFeed, ResponsesState
from loadgen.stream.sse import DEFAULT_MAX_EVENT_BYTES
from loadgen.stream.state import StreamState
from loadgen.stream.whole import WholeBody
from traces import schema as s
from traces.errors import shown
from traces.records import RunRow, TraceRequest

_ERROR_BODY_LIMIT = 2048

Body = bytes | memoryview
"""A request body: bytes, or a view of a body built ahead in another process
(``loadgen.prepare.ahead``: a mapped file, sent without a copy into one buffer)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedRequest:
    """A request ready to send: body already built, identifiers fixed."""

    trace: TraceRequest
    x_request_id: str
    path: str
    body: Body
    warmup: bool = False
    context_tokens: int | None = None
    """Tokens of the prompt carried over from the trace's ``parent`` turn (the run table's
    ``context_tokens``); None without a parent."""
    keep_reply: bool = False
    """Keep the response body and return its content text from ``execute`` (a live
    session history); nothing is kept otherwise."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadyRequest:
    """A prepared request encoded ahead of its due time: the fast transport's ``Outgoing``,
    or an ``httpx.Request`` for any other transport."""

    job: PreparedRequest
    send: Outgoing | httpx.Request
    progress: Progress


class StreamingClient:
    """Sends prepared requests and records each one. One instance per process."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str,
        now_ns: Callable[[], int],
        run_id: str,
        worker: int = 0,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 600.0,
        transport: httpx.AsyncBaseTransport | None = None,
        defer_records: bool = False,
        native_feed: bool = NATIVE,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        dispatched: DispatchLog | None = None,
        stream: bool = True,
    ) -> None:
        """``transport``, when given, must be the one ``http`` was built with: requests are
        then built by ``http`` (headers, timeouts) but sent by the transport directly (the
        fast transport's own ``open``, past httpx's request and response objects).

        With ``defer_records``, a finished stream's record waits for the
        event loop's spare time (``loadgen.deferred``) instead of delaying the reads of other
        streams; ``flush()`` then gives the sink whatever is still pending.

        ``native_feed`` picks the implementation of ``loadgen.stream.feed.EventFeed`` that
        classifies the response bodies: the C walk (the default where it is built) or the
        reference, which installs without a compiler use (the tests run both).

        ``dispatched``: where each request's trace index is recorded as it goes to the
        wire (``loadgen.dispatched``; the replay's crash record).

        ``stream=False`` (``--no-stream``): the bodies were built with ``"stream": false``
        and each response is one JSON object (``loadgen.stream.whole``), read whole."""
        self._stream = stream
        self._dispatched = dispatched
        self._native_feed = native_feed
        self._max_event_bytes = max_event_bytes  # beyond it, a stream is a protocol_error
        self._deferred = DeferredCalls() if defer_records else None
        self._http = http
        self._transport = transport
        self._fast = transport if isinstance(transport, FastTransport) else None
        self._templates: dict[str, RequestTemplate] = {}
        self._base_url = base_url.rstrip("/")
        self._now_ns = now_ns
        self._headers = dict(headers or {})
        self._headers.setdefault("content-type", "application/json")
        self._headers.setdefault("accept", "text/event-stream" if stream else "application/json")
        self._headers.setdefault("accept-encoding", "identity")
        # The server's strings are stored (error bodies, in-stream errors): never with the
        # credentials sent to it, whatever it echoes.
        self._rows = RowBuilder(
            run_id=run_id,
            worker=worker,
            scrubber=Scrubber.of(headers={**http.headers, **self._headers}, urls=[base_url]),
            stream=stream,
        )
        self._timeout_s = timeout_s
        self._timeout_ns = int(timeout_s * 1e9)
        limits = http.timeout
        self._fast_timeouts = Timeouts(
            connect_s=limits.connect if limits.connect is not None else timeout_s,
            read_s=limits.read if limits.read is not None else timeout_s,
            total_s=timeout_s,
        )

    def flush(self) -> None:
        """Give their sinks the records still deferred (``defer_records``): call it when
        the requests are done and before the sinks are closed. Re-raises a sink's error."""
        if self._deferred is not None:
            self._deferred.flush()

    def hold_records(self, held: bool) -> None:
        """While ``held`` (the schedule is behind), deferred records wait until it is not
        (``DeferredCalls.hold``); nothing without ``defer_records``."""
        if self._deferred is not None:
            self._deferred.hold(held)

    @property
    def deferred(self) -> int:
        """Records waiting to be built (always 0 without ``defer_records``)."""
        return len(self._deferred) if self._deferred is not None else 0

    def _build(
        self, job: PreparedRequest, progress: Progress, request_id: str | None = None
    ) -> httpx.Request:
        headers = dict(self._headers)
        headers["x-request-id"] = job.x_request_id if request_id is None else request_id
        return self._http.build_request(
            "POST",
            self._base_url + job.path,
            content=job.body if isinstance(job.body, bytes) else bytes(job.body),
            headers=headers,
            extensions={"trace": progress.trace},
        )

    def ready(self, job: PreparedRequest) -> ReadyRequest:
        """Encode the request now, before it is due. For the fast transport: from a
        template of the path's head that httpx built once (a few µs); else an
        ``httpx.Request`` (about 100 µs)."""
        progress = Progress(self._now_ns)
        if self._dispatched is not None:
            progress.on_send = self._dispatched.marker(job.trace.index)
        if self._fast is not None:
            template = self._templates.get(job.path)
            if template is None:
                # Built with a placeholder id: the template is the path's, not this
                # request's, and ``encode`` checks each request's own id.
                template = RequestTemplate.of(self._build(job, progress, request_id="template"))
                self._templates[job.path] = template
            out = template.encode(job.x_request_id, job.body)
            return ReadyRequest(job=job, send=out, progress=progress)
        return ReadyRequest(job=job, send=self._build(job, progress), progress=progress)

    async def warm(self, count: int) -> list[int]:
        """Open ``count`` connections to the server before the run starts (the fast
        transport's warm pool; nothing with another transport). Returns each connect's
        time (ns)."""
        if self._fast is None or count <= 0:
            return []
        return await self._fast.warm(httpx.URL(self._base_url), count, self._fast_timeouts)

    async def execute(
        self,
        job: PreparedRequest | ReadyRequest,
        due_ns: int,
        sink: Callable[[RunRow], None],
    ) -> str | None:
        """Send ``job`` now, stream the response, and give its record to ``sink``. Returns
        the reply's content text when the job asks to keep it (``keep_reply``), else None.

        The record's ``sent_ns`` (the TTFT origin, and what the chunk offsets count from)
        is the request's first action on the wire: its first byte written, or the start of
        the connect it had to make first. A wait for a connection slot, or for the loop,
        before it is the client's delay (``sent - due``), not the server's time."""
        ready = job if isinstance(job, ReadyRequest) else self.ready(job)
        job, progress = ready.job, ready.progress
        now_ns = self._now_ns
        header_timings: ServerTimings | None = None
        outcome = s.OUTCOME_OK
        error: str | None = None
        sent = now_ns()
        api = job.trace.api
        state = ResponsesState(sent) if api == s.API_RESPONSES else StreamState(sent)
        body: list[bytes] | None = [] if job.keep_reply else None
        try:
            header_timings, error = await self._exchange(ready.send, progress, state, body, api)
            if error is not None:
                if is_context_exceeded(progress.status, error):
                    outcome = s.OUTCOME_CONTEXT_EXCEEDED
                elif is_admission_rejected(progress.status, error):
                    outcome = s.OUTCOME_REJECTED
                else:
                    outcome = s.OUTCOME_HTTP_ERROR
        except TimeoutError:
            outcome, error = s.OUTCOME_TIMEOUT, f"no complete response within {self._timeout_s:g} s"
        except httpx.TimeoutException as exc:
            outcome = (
                s.OUTCOME_CONNECT_ERROR
                if isinstance(exc, httpx.ConnectTimeout)
                else s.OUTCOME_TIMEOUT
            )
            error = f"{type(exc).__name__}: {exc}"
        except httpx.ConnectError as exc:
            outcome, error = s.OUTCOME_CONNECT_ERROR, f"{type(exc).__name__}: {exc}"
        except MalformedResponse as exc:  # the server broke HTTP: it did not go away
            outcome, error = s.OUTCOME_PROTOCOL_ERROR, f"{type(exc).__name__}: {exc}"
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            outcome, error = s.OUTCOME_DISCONNECT, f"{type(exc).__name__}: {exc}"
        except httpx.HTTPError as exc:
            outcome, error = s.OUTCOME_PROTOCOL_ERROR, f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            # Whatever a response makes the reading raise, it is this request's row, not
            # the end of the run (every such case found is fixed where it arose; the
            # fuzz test checks that none is left).
            outcome = s.OUTCOME_PROTOCOL_ERROR
            error = f"unreadable response: {type(exc).__name__}: {shown(str(exc), 200)}"
        except asyncio.CancelledError:
            sink(
                self._rows.build(
                    job,
                    due_ns,
                    sent,
                    now_ns(),
                    progress,
                    state,
                    s.OUTCOME_CANCELLED,
                    "cancelled before the response ended",
                )
            )
            raise
        make = partial(
            self._rows.build,
            job,
            due_ns,
            sent,
            now_ns(),
            progress,
            state,
            outcome,
            error,
            header_timings,
        )
        if self._deferred is not None:
            self._deferred.submit(lambda: sink(make()))
        else:
            sink(make())
        return reply_text(b"".join(body)) if body is not None else None

    def _feed(
        self, state: StreamState, api: str
    ) -> EventFeed | ResponsesFeed | BodyFeed | WholeBody:
        """The sink of a response body's reads: the whole body for embeddings, the typed
        events of the Responses API (always streamed), one JSON object for a chat or
        completions request under ``--no-stream``, else chat's and completions' chunks."""
        if api == s.API_EMBEDDINGS:
            return BodyFeed(state, max_bytes=self._max_event_bytes)
        if isinstance(state, ResponsesState):
            return ResponsesFeed(state, max_event_bytes=self._max_event_bytes)
        if not self._stream:
            return WholeBody(state, max_bytes=self._max_event_bytes)
        return EventFeed(state, native=self._native_feed, max_event_bytes=self._max_event_bytes)

    async def _exchange(
        self,
        send: Outgoing | httpx.Request,
        progress: Progress,
        state: StreamState,
        body: list[bytes] | None = None,
        api: str = s.API_CHAT,
    ) -> tuple[ServerTimings | None, str | None]:
        """Send the request and read its response into ``state`` (and its body's reads into
        ``body``, when given). Returns the timings the headers carried and, for an HTTP
        error status, the error text."""
        if isinstance(send, Outgoing):
            fast = self._fast
            assert fast is not None  # ready() encodes an Outgoing only for it
            exchange = await fast.open(
                send, progress, self._fast_timeouts, state.sent_ns + self._timeout_ns
            )
            if progress.sent_ns is not None:
                state.sent_ns = progress.sent_ns  # before any read is counted from it
            try:
                header_timings = timings_from_headers(exchange.headers)
                if exchange.status >= 300:  # redirects too: not followed
                    head = await read_head(exchange)
                    note = error_note(exchange.status, exchange.headers, head)
                    return header_timings, _error_text(exchange.status, head.data).rstrip() + note
                feed = self._feed(state, api)
                # the transport notes the first byte
                await exchange.drain(_keeping(body, feed.take) if body is not None else feed.take)
                feed.finish(self._now_ns())
            finally:
                exchange.close()
            return header_timings, None
        async with asyncio.timeout(self._timeout_s):
            if self._transport is not None:
                # Straight to the transport: the client's per-request machinery (auth,
                # cookies, redirects, hooks) is unused here and costs ~100 µs a request.
                response = await self._transport.handle_async_request(send)
                response.request = send
            else:
                response = await self._http.send(send, stream=True)
            if progress.sent_ns is not None:
                state.sent_ns = progress.sent_ns  # before any read is counted from it
            try:
                progress.status = status = response.status_code
                if progress.headers_ns is None:
                    progress.headers_ns = self._now_ns()
                header_timings = timings_from_headers(response.headers)
                if status >= 300:
                    head = await read_head(stamped_body(response, self._now_ns))
                    note = error_note(status, response.headers, head)
                    return header_timings, _error_text(status, head.data).rstrip() + note
                await self._read_events(response, state, progress, body, api)
            finally:
                await response.aclose()
            return header_timings, None

    async def _read_events(
        self,
        response: httpx.Response,
        state: StreamState,
        progress: Progress,
        body: list[bytes] | None,
        api: str,
    ) -> None:
        """Read the body of an httpx response into ``state``, stamping each read (when the
        transport offers no stamped stream) and noting the first byte."""
        feed = self._feed(state, api)
        stamped: StampedStream | None = response.extensions.get(STAMPED)
        if stamped is not None:
            feed_take = feed.take if body is None else _keeping(body, feed.take)

            def take(ts: int, data: bytes) -> bool:
                if progress.first_byte_ns is None:
                    progress.first_byte_ns = ts
                return feed_take(ts, data)

            await stamped.drain(take)
        else:
            now_ns = self._now_ns
            async for data in response.aiter_raw():
                ts = now_ns()
                if progress.first_byte_ns is None:
                    progress.first_byte_ns = ts
                if body is not None:
                    body.append(data)
                feed.take(ts, data)
        feed.finish(self._now_ns())


def _keeping(body: list[bytes], take: Callable[[int, bytes], bool]) -> Callable[[int, bytes], bool]:
    """``take`` that also keeps each read in ``body`` (a live session's reply)."""

    def keep(ts: int, data: bytes) -> bool:
        body.append(data)
        return take(ts, data)

    return keep


def _error_text(status: int, body: bytes) -> str:
    """One line from an error response: the OpenAI ``error.message`` when present."""
    text = body[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")
    try:
        obj = orjson.loads(body)
        if isinstance(obj, dict):
            err = obj.get("error", obj.get("detail", obj.get("message")))
            if isinstance(err, dict):
                err = err.get("message", err)
            if err is not None:
                text = str(err)
    except ValueError:
        pass
    return f"HTTP {status}: " + " ".join(text.split())[:500]
