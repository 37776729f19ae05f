"""Write one generation response, streaming (SSE) or whole, and keep its server record.

Each content chunk is stamped immediately before its ``send`` (``chunk_write_ns``: the
write cannot have happened earlier, so a client never sees a token before it) and again
when the ``send`` returned (``chunk_sent_ns``: the bytes were with the transport, so the
write cannot have happened later). The ground truth of the final chunk combines the
engine's phases with the first, in model time (wall durations divided by the engine's
time scale), and reports the simulator's own slip on its own: how much later than planned
its chunks went out by the second (wall ms, ``slip_ms``; the last chunk's own send is
counted up to its stamp when the truth rides on it, in full when a usage chunk follows).
Faults that act inside a stream (drop, malformed chunk) are applied here; a drop is
reported as the outcome ``dropped`` for the app to raise.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable, MutableMapping
from contextlib import aclosing
from typing import Any

from loadgen.sim.chunks import MALFORMED, ResponseFormatter
from loadgen.sim.engine import Emission, Engine, GroundTruth, Phases
from loadgen.sim.metrics import SimMetrics
from loadgen.sim.records import RequestRecord
from loadgen.sim.request import SimRequest
from loadgen.sim.responses import MALFORMED_BODY, embeddings_body
from loadgen.sim.tokens import token_text

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]

JSON_TYPE = b"application/json"
SSE_TYPE = b"text/event-stream; charset=utf-8"


class ResponseWriter:
    """Writes one generation response, streaming or whole, and keeps its record."""

    def __init__(
        self,
        *,
        engine: Engine,
        metrics: SimMetrics,
        send: Send,
        request: SimRequest,
        record: RequestRecord,
        formatter: ResponseFormatter,
        headers: list[tuple[bytes, bytes]],
        drop_after: int | None,
        malformed_at: int | None = None,
        tgi_headers: bool = False,
    ) -> None:
        """``tgi_headers``: a whole response carries TGI's timing headers
        (``tgi_timing_headers``) in place of the body's ``metrics``."""
        self._tgi_headers = tgi_headers
        self._engine = engine
        self._metrics = metrics
        self._scale = engine.time_scale
        self._malformed_at = malformed_at
        self._send = send
        self._request = request
        self._record = record
        self._fmt = formatter
        self._headers = headers
        self._drop_after = drop_after

    def _truth(
        self, phases: Phases, first_ns: int, last_ns: int, tokens: int, due_ns: int | None = None
    ) -> GroundTruth:
        """``due_ns``: the plan of the chunk the truth rides on (its lateness so far counts)."""
        truth = self._measure(phases, first_ns, last_ns, tokens, due_ns)
        self._metrics.request_phases(truth)
        return truth

    def _measure(
        self, phases: Phases, first_ns: int, last_ns: int, tokens: int, due_ns: int | None
    ) -> GroundTruth:
        slip = self._record.slip_ns
        if due_ns is not None:
            slip = max(slip, last_ns - due_ns)
        self._metrics.slip(slip / 1e9)
        return GroundTruth.measure(
            phases,
            received_ns=self._record.received_ns,
            first_ns=first_ns,
            last_ns=last_ns,
            completion_tokens=tokens,
            instance=self._engine.instance,
            time_scale=self._scale,
            slip_ns=slip,
        )

    def _served_by(self, phases: Phases | None) -> str:
        """The instance a request's metrics are labelled with (vLLM's ``engine``)."""
        if phases is not None and phases.instance is not None:
            return phases.instance
        return self._engine.instance

    def _prefilled(self, phases: Phases) -> None:
        """Count the prompt's tokens once its prefill is done (at the first token), on the
        instance that prefilled it."""
        instance = phases.prefill_instance or self._served_by(phases)
        self._metrics.prompt_tokens(self._request.prompt_tokens, engine=instance)

    def _drops_at(self, emitted: int, emission: Emission) -> bool:
        return self._drop_after is not None and emitted + emission.tokens > self._drop_after

    async def stream(self, emissions: AsyncGenerator[Emission, None]) -> str:
        """Write the SSE response; returns the outcome: ``ok`` or ``dropped``."""
        send, record, fmt, metrics = self._send, self._record, self._fmt, self._metrics
        headers = [(b"content-type", SSE_TYPE), (b"cache-control", b"no-cache"), *self._headers]
        record.headers_ns = time.perf_counter_ns()
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        role = fmt.role_chunk()
        if role is not None:
            await send({"type": "http.response.body", "body": role, "more_body": True})
        emitted = 0
        phases: Phases | None = None
        try:
            async with aclosing(emissions) as events:
                async for emission in events:
                    if self._drops_at(emitted, emission):
                        return "dropped"
                    if emission.index == self._malformed_at:
                        await send(
                            {"type": "http.response.body", "body": MALFORMED, "more_body": True}
                        )
                    emitted += emission.tokens
                    phases = emission.phases
                    truth = None
                    if emission.last and not self._request.include_usage:
                        now = time.perf_counter_ns()
                        first = record.chunk_write_ns[0] if record.chunk_write_ns else now
                        truth = self._truth(phases, first, now, emitted, emission.due_ns)
                    body = fmt.content_chunk(
                        token_text(emission.first_token, emission.tokens),
                        completion_tokens=emitted,
                        last=emission.last,
                        truth=truth,
                    )
                    write_ns = time.perf_counter_ns()
                    record.chunk(write_ns, emission.tokens, emission.due_ns)
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                    record.sent(time.perf_counter_ns())
                    if emission.index == 0:
                        ttft_s = (write_ns - record.received_ns) / 1e9 / self._scale
                        metrics.first_token(ttft_s, engine=self._served_by(phases))
                        self._prefilled(emission.phases)
        finally:
            metrics.generated(emitted, engine=self._served_by(phases))
        if self._request.include_usage and phases is not None:
            writes = record.chunk_write_ns
            truth = self._truth(phases, writes[0], writes[-1], emitted)
            body = fmt.usage_chunk(completion_tokens=emitted, truth=truth)
            await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": fmt.done(), "more_body": False})
        e2e_s = (time.perf_counter_ns() - record.received_ns) / 1e9 / self._scale
        metrics.finished(e2e_s, engine=self._served_by(phases))
        return "ok"

    async def whole(self, emissions: AsyncGenerator[Emission, None]) -> str:
        """Write the non-streaming response once the last token is due; ``ok`` or ``dropped``."""
        record, metrics = self._record, self._metrics
        emitted = 0
        first_ns = 0
        phases: Phases | None = None
        try:
            async with aclosing(emissions) as events:
                async for emission in events:
                    if self._drops_at(emitted, emission):
                        await self._partial_body()
                        return "dropped"
                    if emission.index == 0:
                        first_ns = time.perf_counter_ns()
                        ttft_s = (first_ns - record.received_ns) / 1e9 / self._scale
                        metrics.first_token(ttft_s, engine=self._served_by(emission.phases))
                        self._prefilled(emission.phases)
                    emitted += emission.tokens
                    phases = emission.phases
        finally:
            metrics.generated(emitted, engine=self._served_by(phases))
        if phases is None:
            raise RuntimeError("the engine emitted no tokens")
        now = time.perf_counter_ns()
        truth = self._truth(phases, first_ns, now, emitted)
        body = self._fmt.full_response(
            token_text(0, emitted),
            completion_tokens=emitted,
            truth=truth,
            metrics=not self._tgi_headers,
        )
        headers = [
            (b"content-type", JSON_TYPE),
            (b"content-length", str(len(body)).encode()),
            *self._headers,
        ]
        if self._tgi_headers:
            headers.extend(tgi_timing_headers(truth, prompt_tokens=self._request.prompt_tokens))
        record.headers_ns = time.perf_counter_ns()
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        write_ns = time.perf_counter_ns()
        record.chunk(write_ns, emitted)
        await self._send({"type": "http.response.body", "body": body, "more_body": False})
        record.sent(time.perf_counter_ns())
        e2e_s = (time.perf_counter_ns() - record.received_ns) / 1e9 / self._scale
        metrics.finished(e2e_s, engine=self._served_by(phases))
        return "ok"

    async def embeddings(self, emissions: AsyncGenerator[Emission, None], model: str) -> str:
        """Write an embeddings reply once its one step (the prefill of every input) is
        done; ``ok`` or ``dropped``. No token is generated or counted as one."""
        record, metrics = self._record, self._metrics
        phases: Phases | None = None
        async with aclosing(emissions) as events:
            async for emission in events:
                if self._drops_at(0, emission):
                    await self._partial_body()
                    return "dropped"
                phases = emission.phases
                self._prefilled(phases)
        if phases is None:
            raise RuntimeError("the engine emitted no step")
        now = time.perf_counter_ns()
        if self._malformed_at is not None:
            body = MALFORMED_BODY
        else:
            truth = self._truth(phases, now, now, 0)
            body = embeddings_body(self._request, model=model, truth=truth)
        headers = [
            (b"content-type", JSON_TYPE),
            (b"content-length", str(len(body)).encode()),
            *self._headers,
        ]
        record.headers_ns = time.perf_counter_ns()
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        record.chunk(time.perf_counter_ns(), 0)
        await self._send({"type": "http.response.body", "body": body, "more_body": False})
        record.sent(time.perf_counter_ns())
        e2e_s = (time.perf_counter_ns() - record.received_ns) / 1e9 / self._scale
        metrics.finished(e2e_s, engine=self._served_by(phases))
        return "ok"

    async def _partial_body(self) -> None:
        # No content-length: the body is chunked, so closing now leaves it visibly incomplete.
        headers = [(b"content-type", JSON_TYPE), *self._headers]
        self._record.headers_ns = time.perf_counter_ns()
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        await self._send({"type": "http.response.body", "body": b'{"id": "', "more_body": True})


def tgi_timing_headers(truth: GroundTruth, *, prompt_tokens: int) -> list[tuple[bytes, bytes]]:
    """The timing headers TGI sets on a non-streamed reply (``router/src/server.rs``,
    ``generate_internal``), from the ground truth: whole milliseconds (TGI truncates with
    ``as_millis``), ``x-compute-time`` in seconds. Validation takes no time here; the
    inference time is everything after the queue (prefill, transfer, first token, decode)."""
    inference = truth.ttft_ms - truth.queue_ms + truth.decode_ms
    total = truth.ttft_ms + truth.decode_ms
    per_token = inference / truth.completion_tokens if truth.completion_tokens else 0.0
    values = (
        (b"x-compute-type", b"gpu+simulated"),
        (b"x-compute-time", repr(total / 1e3).encode()),
        (b"x-total-time", b"%d" % int(total)),
        (b"x-validation-time", b"0"),
        (b"x-queue-time", b"%d" % int(truth.queue_ms)),
        (b"x-inference-time", b"%d" % int(inference)),
        (b"x-time-per-token", b"%d" % int(per_token)),
        (b"x-prompt-tokens", b"%d" % prompt_tokens),
        (b"x-generated-tokens", b"%d" % truth.completion_tokens),
    )
    return list(values)
