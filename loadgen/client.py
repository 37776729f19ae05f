"""One streaming request over an injected ``httpx.AsyncClient``, recorded as one run row.

The hot path: stamp connection events through httpx's ``trace`` extension, stamp every body
read on arrival (the transport does it, and hands each read straight to a callback), feed
the bytes to the SSE decoder and add the events each read completed, with its arrival
time, to the stream's ``StreamState`` (``loadgen.sse_bulk.add_read``: runs of plain content
chunks by a C scan, without decoding JSON; only the few other chunks are decoded). Nothing
of a read is kept once it is counted. Every outcome, including cancellation, becomes
exactly one ``RequestRecord`` given to the sink; exceptions never escape except
cancellation, which is re-raised after recording. The replay defers building the record of
a finished stream to the loop's spare time (``defer_records``; a cancelled request is
still recorded at once).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx
import orjson

from loadgen.deferred import DeferredCalls
from loadgen.protocol import ServerTimings, StreamState, Usage, timings_from_headers
from loadgen.sse import SSEDecoder
from loadgen.sse_bulk import add_read
from loadgen.transport import STAMPED, StampedStream
from traces import schema as s
from traces.records import RequestRecord, TraceRequest

_ERROR_BODY_LIMIT = 2048


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedRequest:
    """A request ready to send: body already built, identifiers fixed."""

    trace: TraceRequest
    x_request_id: str
    path: str
    body: bytes
    warmup: bool = False


class _Stamps:
    """Mutable per-request timestamps, filled by the trace callback and the reader."""

    __slots__ = ("connect_start", "connected", "first_byte", "headers", "now_ns", "written")

    def __init__(self, now_ns: Callable[[], int]) -> None:
        self.now_ns = now_ns
        self.connect_start: int | None = None
        self.connected: int | None = None
        self.written: int | None = None
        self.headers: int | None = None
        self.first_byte: int | None = None

    async def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpx's ``trace`` extension; only these events matter for the TTFT chain."""
        if event == "connection.connect_tcp.started":
            self.connect_start = self.now_ns()
        elif event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            self.connected = self.now_ns()
        elif event == "http11.send_request_body.complete":
            self.written = self.now_ns()
        elif event == "http11.receive_response_headers.complete":
            self.headers = self.now_ns()


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadyRequest:
    """A prepared request turned into an ``httpx.Request`` ahead of its due time."""

    job: PreparedRequest
    request: httpx.Request
    stamps: _Stamps


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
    ) -> None:
        """``transport``, when given, must be the one ``http`` was built with: requests are
        then built by ``http`` (headers, timeouts) but sent by the transport directly.

        With ``defer_records``, a finished stream's record waits for the
        event loop's spare time (``loadgen.deferred``) instead of delaying the reads of other
        streams; ``flush()`` then gives the sink whatever is still pending."""
        self._deferred = DeferredCalls() if defer_records else None
        self._http = http
        self._transport = transport
        self._base_url = base_url.rstrip("/")
        self._now_ns = now_ns
        self._run_id = run_id
        self._worker = worker
        self._headers = dict(headers or {})
        self._headers.setdefault("content-type", "application/json")
        self._headers.setdefault("accept", "text/event-stream")
        self._headers.setdefault("accept-encoding", "identity")
        self._timeout_s = timeout_s

    def flush(self) -> None:
        """Give their sinks the records still deferred (``defer_records``): call it when
        the requests are done and before the sinks are closed. Re-raises a sink's error."""
        if self._deferred is not None:
            self._deferred.flush()

    @property
    def deferred(self) -> int:
        """Records waiting to be built (always 0 without ``defer_records``)."""
        return len(self._deferred) if self._deferred is not None else 0

    def ready(self, job: PreparedRequest) -> ReadyRequest:
        """Build the ``httpx.Request`` now (before the request is due: it costs tens of µs)."""
        stamps = _Stamps(self._now_ns)
        headers = dict(self._headers)
        headers["x-request-id"] = job.x_request_id
        request = self._http.build_request(
            "POST",
            self._base_url + job.path,
            content=job.body,
            headers=headers,
            extensions={"trace": stamps.trace},
        )
        return ReadyRequest(job=job, request=request, stamps=stamps)

    async def execute(
        self,
        job: PreparedRequest | ReadyRequest,
        due_ns: int,
        sink: Callable[[RequestRecord], None],
    ) -> None:
        """Send ``job`` now, stream the response, and give its record to ``sink``."""
        ready = job if isinstance(job, ReadyRequest) else self.ready(job)
        job = ready.job
        request, stamps = ready.request, ready.stamps
        now_ns = self._now_ns
        status: int | None = None
        header_timings: ServerTimings | None = None
        outcome = s.OUTCOME_OK
        error: str | None = None
        sent = now_ns()
        state = StreamState(sent)
        end: int | None = None
        try:
            async with asyncio.timeout(self._timeout_s):
                if self._transport is not None:
                    # Straight to the transport: the client's per-request machinery (auth,
                    # cookies, redirects, hooks) is unused here and costs ~100 µs a request.
                    response = await self._transport.handle_async_request(request)
                    response.request = request
                else:
                    response = await self._http.send(request, stream=True)
                try:
                    status = response.status_code
                    if stamps.headers is None:
                        stamps.headers = now_ns()
                    header_timings = timings_from_headers(response.headers)
                    if status >= 400:
                        body = await response.aread()
                        end = now_ns()
                        outcome = s.OUTCOME_HTTP_ERROR
                        error = _error_text(status, body)
                    else:
                        await self._read_events(response, state, stamps)
                        end = now_ns()
                finally:
                    await response.aclose()
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
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            outcome, error = s.OUTCOME_DISCONNECT, f"{type(exc).__name__}: {exc}"
        except httpx.HTTPError as exc:
            outcome, error = s.OUTCOME_PROTOCOL_ERROR, f"{type(exc).__name__}: {exc}"
        except asyncio.CancelledError:
            sink(
                self._record(
                    job,
                    due_ns,
                    sent,
                    now_ns(),
                    stamps,
                    state,
                    status,
                    s.OUTCOME_CANCELLED,
                    "cancelled before the response ended",
                )
            )
            raise
        if end is None:
            end = now_ns()
        make = partial(
            self._record,
            job,
            due_ns,
            sent,
            end,
            stamps,
            state,
            status,
            outcome,
            error,
            header_timings,
        )
        if self._deferred is not None:
            self._deferred.submit(lambda: sink(make()))
        else:
            sink(make())

    async def _read_events(
        self, response: httpx.Response, state: StreamState, stamps: _Stamps
    ) -> None:
        """Read the body, adding the SSE events each read completed to ``state`` with the
        read's arrival time (``add_read``: runs of plain content chunks by a C scan, while
        the bytes are still in cache; the rare other chunks one by one)."""
        decoder = SSEDecoder()
        feed = decoder.feed_raw
        stamped: StampedStream | None = response.extensions.get(STAMPED)
        if stamped is not None:

            def take(ts: int, data: bytes) -> None:
                if stamps.first_byte is None:
                    stamps.first_byte = ts
                got = feed(data)
                if got:
                    add_read(state, ts, got)

            await stamped.drain(take)
        else:
            now_ns = self._now_ns
            async for data in response.aiter_raw():
                ts = now_ns()
                if stamps.first_byte is None:
                    stamps.first_byte = ts
                got = feed(data)
                if got:
                    add_read(state, ts, got)
        tail = decoder.flush()
        if tail:
            add_read(state, self._now_ns(), tail)

    def _record(
        self,
        job: PreparedRequest,
        due_ns: int,
        sent_ns: int,
        end_ns: int,
        stamps: _Stamps,
        state: StreamState,
        status: int | None,
        outcome: str,
        error: str | None,
        header_timings: ServerTimings | None = None,
    ) -> RequestRecord:
        parsed = state.summary()
        if outcome == s.OUTCOME_OK:
            if parsed.error is not None:
                outcome, error = s.OUTCOME_PROTOCOL_ERROR, parsed.error
            elif not parsed.done and parsed.finish_reason is None:
                outcome, error = (
                    s.OUTCOME_PROTOCOL_ERROR,
                    "stream ended without [DONE] or a finish_reason",
                )
        req = job.trace
        usage = parsed.usage or Usage()
        timings = parsed.timings or header_timings or ServerTimings()
        return RequestRecord(
            run_id=self._run_id,
            trace_index=req.index,
            request_id=req.request_id,
            x_request_id=job.x_request_id,
            worker=self._worker,
            workload=req.workload,
            api=req.api,
            input_tokens=req.input_tokens,
            output_tokens=req.output_tokens,
            n_images=len(req.images or ()),
            image_tokens=req.image_tokens,
            session_id=req.session_id,
            slo_ttft_ms=req.slo_ttft_ms,
            slo_tpot_ms=req.slo_tpot_ms,
            warmup=job.warmup,
            due_ns=due_ns,
            sent_ns=sent_ns,
            connect_start_ns=stamps.connect_start,
            connected_ns=stamps.connected,
            request_written_ns=stamps.written,
            headers_ns=stamps.headers,
            first_byte_ns=stamps.first_byte,
            first_token_ns=parsed.first_token_ns,
            first_reasoning_ns=parsed.first_reasoning_ns,
            end_ns=end_ns,
            chunk_offsets_us=parsed.content_offsets_us,
            chunk_tokens=parsed.chunk_tokens,
            reasoning_offsets_us=parsed.reasoning_offsets_us,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=usage.cached_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            outcome=outcome,
            http_status=status,
            error=error,
            finish_reason=parsed.finish_reason,
            server_queue_ms=timings.queue_ms,
            server_prefill_ms=timings.prefill_ms,
            server_transfer_ms=timings.transfer_ms,
            server_first_token_ms=timings.first_token_ms,
            server_ttft_ms=timings.ttft_ms,
            server_decode_ms=timings.decode_ms,
            server_instance=timings.instance,
        )


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
