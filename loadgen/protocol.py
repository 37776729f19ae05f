"""OpenAI-compatible request bodies and response-chunk classification (sans-IO).

Builds ``/v1/chat/completions`` and ``/v1/completions`` bodies, and turns the data payload
of one SSE event into a ``Chunk``: content, reasoning, role-only, usage-only, done or error.
Chunks are not tokens: only content chunks count toward TTFT and ITL. Server-reported
timings (the simulator's ``metrics``, vLLM's per-request ``metrics``, llama.cpp's
``timings``) are read from any chunk, TGI's ``x-*-time`` headers by ``timings_from_headers``.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from traces.prompts import Prompt
from traces.schema import API_CHAT


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """Optional request fields the endpoint accepts (found by the preflight probe)."""

    include_usage: bool = True
    continuous_usage: bool = True
    ignore_eos: bool = True
    min_tokens: bool = True

    def without_extras(self) -> Capabilities:
        """The same with the non-standard vLLM-style extras removed."""
        return Capabilities(
            include_usage=self.include_usage,
            continuous_usage=False,
            ignore_eos=False,
            min_tokens=False,
        )


def endpoint_path(api: str) -> str:
    """The path, relative to the base URL, for an ``api`` value of the trace."""
    return "/chat/completions" if api == API_CHAT else "/completions"


def build_body(
    *,
    api: str,
    model: str,
    prompt: Prompt,
    max_tokens: int,
    caps: Capabilities,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """The JSON body of one streaming request, ready to send."""
    body: dict[str, Any] = {"model": model, "stream": True, "max_tokens": max_tokens}
    if api == API_CHAT:
        if prompt.messages_json is not None:
            body["messages"] = orjson.loads(prompt.messages_json)
        elif prompt.images:
            parts: list[dict[str, Any]] = [{"type": "text", "text": prompt.text or ""}]
            parts.extend({"type": "image_url", "image_url": {"url": url}} for url in prompt.images)
            body["messages"] = [{"role": "user", "content": parts}]
        else:
            body["messages"] = [{"role": "user", "content": prompt.text or ""}]
    else:
        body["prompt"] = prompt.text if prompt.text is not None else ""
    if caps.include_usage:
        options: dict[str, bool] = {"include_usage": True}
        if caps.continuous_usage:
            options["continuous_usage_stats"] = True
        body["stream_options"] = options
    if caps.ignore_eos:
        body["ignore_eos"] = True
    if caps.min_tokens:
        body["min_tokens"] = max_tokens
    if extra:
        body.update(extra)
    return orjson.dumps(body)


class Kind(enum.Enum):
    """What one SSE event is."""

    CONTENT = "content"
    REASONING = "reasoning"
    ROLE = "role"
    USAGE = "usage"
    OTHER = "other"
    DONE = "done"
    ERROR = "error"


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Token usage as the server reports it."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerTimings:
    """Per-request timings a server reports about itself, in milliseconds."""

    queue_ms: float | None = None
    prefill_ms: float | None = None
    transfer_ms: float | None = None
    first_token_ms: float | None = None
    ttft_ms: float | None = None
    decode_ms: float | None = None
    instance: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk:
    """One classified SSE event."""

    kind: Kind
    usage: Usage | None = None
    finish_reason: str | None = None
    timings: ServerTimings | None = None
    error: str | None = None


_DONE = Chunk(kind=Kind.DONE)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def parse_usage(raw: Any) -> Usage | None:
    """Read an OpenAI ``usage`` object (with ``prompt_tokens_details.cached_tokens``)."""
    if not isinstance(raw, dict):
        return None
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    out_details = raw.get("completion_tokens_details")
    reasoning = out_details.get("reasoning_tokens") if isinstance(out_details, dict) else None
    return Usage(
        prompt_tokens=_int(raw.get("prompt_tokens")),
        completion_tokens=_int(raw.get("completion_tokens")),
        cached_tokens=_int(cached),
        reasoning_tokens=_int(reasoning),
    )


_VLLM_METRICS_KEYS = ("queue_time_ms", "time_to_first_token_ms", "generation_time_ms")


def _sim_timings(metrics: dict[str, Any]) -> ServerTimings:
    """The simulator's ground truth (``loadgen.sim``): every term of the split, in ms."""
    instance = metrics.get("instance")
    return ServerTimings(
        queue_ms=_float(metrics.get("queue_ms")),
        prefill_ms=_float(metrics.get("prefill_ms")),
        transfer_ms=_float(metrics.get("transfer_ms")),
        first_token_ms=_float(metrics.get("first_token_ms")),
        ttft_ms=_float(metrics.get("ttft_ms")),
        decode_ms=_float(metrics.get("decode_ms")),
        instance=str(instance) if instance is not None else None,
    )


def _vllm_timings(metrics: dict[str, Any]) -> ServerTimings | None:
    """vLLM's per-request ``metrics`` (``--enable-per-request-metrics``, vLLM PR #46768),
    on the final usage chunk of a stream. vLLM computes, from engine-core timestamps:
    ``queue_time_ms`` = scheduled - queued, ``time_to_first_token_ms`` = first token -
    scheduled (so it excludes the queue: the prefill forward passes, which also sample the
    first token), ``generation_time_ms`` = last token - first token. Hence prefill is
    ``time_to_first_token_ms``, the first token costs no separate step, and the server-side
    TTFT is queue + prefill. Fields vLLM could not compute are absent (or null)."""
    queue = _float(metrics.get("queue_time_ms"))
    prefill = _float(metrics.get("time_to_first_token_ms"))
    decode = _float(metrics.get("generation_time_ms"))
    if queue is None and prefill is None and decode is None:
        return None
    return ServerTimings(
        queue_ms=queue,
        prefill_ms=prefill,
        first_token_ms=0.0 if prefill is not None else None,
        ttft_ms=queue + prefill if queue is not None and prefill is not None else None,
        decode_ms=decode,
    )


def _llamacpp_timings(timings: dict[str, Any]) -> ServerTimings:
    """llama.cpp's ``timings`` (llama-server, on the last chunk and non-stream bodies):
    ``prompt_ms`` is the processing of the ``prompt_n`` uncached prompt tokens (``cache_n``
    were reused), measured from the start of prompt processing to the sampling of the
    first token, so it includes the first token and excludes the wait for a free slot;
    ``predicted_ms`` runs from the first to the last generated token. llama.cpp reports no
    queue time: the decomposition infers it as the remainder."""
    prefill = _float(timings.get("prompt_ms"))
    return ServerTimings(
        prefill_ms=prefill,
        first_token_ms=0.0 if prefill is not None else None,
        decode_ms=_float(timings.get("predicted_ms")),
    )


def parse_timings(obj: dict[str, Any]) -> ServerTimings | None:
    """Server timings carried in a decoded chunk or body, whichever server sent them: the
    simulator's ``metrics`` (has ``prefill_ms``), vLLM's per-request ``metrics`` or
    llama.cpp's ``timings``. None when the chunk carries none; unknown or malformed
    fields are ignored, never an error."""
    metrics = obj.get("metrics")
    if isinstance(metrics, dict):
        if "prefill_ms" in metrics:
            return _sim_timings(metrics)
        if any(key in metrics for key in _VLLM_METRICS_KEYS):
            return _vllm_timings(metrics)
    timings = obj.get("timings")
    if isinstance(timings, dict) and "prompt_ms" in timings:
        return _llamacpp_timings(timings)
    return None


def _header_ms(headers: Mapping[str, str], name: str) -> float | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def timings_from_headers(headers: Mapping[str, str]) -> ServerTimings | None:
    """Server timings from response headers: Hugging Face TGI's ``x-queue-time`` (ms from
    validation to the start of the batch), ``x-inference-time`` (ms in the batch: prefill
    and decode together) and ``x-time-per-token`` (inference time / generated tokens).
    Only the queue maps onto one term; TGI sets these headers on non-streaming responses
    only (a stream's headers leave before the work is done), so for streams this is None.
    ``headers`` must look names up case-insensitively (``httpx.Headers``) or be lower-case.
    """
    queue = _header_ms(headers, "x-queue-time")
    if queue is None:
        return None
    return ServerTimings(queue_ms=queue)


def _decode(payload: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"malformed chunk: {payload[:80]!r}") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"chunk is not a JSON object: {payload[:80]!r}")
    return obj


def _kind(obj: dict[str, Any]) -> tuple[Kind, str | None]:
    """The kind of a decoded chunk and its ``finish_reason`` (no allocation on the common path)."""
    if obj.get("error") is not None:
        return Kind.ERROR, None
    choices = obj.get("choices")
    if not choices or not isinstance(choices, list):
        return (Kind.USAGE if isinstance(obj.get("usage"), dict) else Kind.OTHER), None
    choice = choices[0]
    if not isinstance(choice, dict):
        return Kind.OTHER, None
    finish = choice.get("finish_reason")
    delta = choice.get("delta")
    if isinstance(delta, dict):
        if delta.get("content") or delta.get("tool_calls"):
            return Kind.CONTENT, finish
        if delta.get("reasoning_content") or delta.get("reasoning"):
            return Kind.REASONING, finish
        if "role" in delta:
            return Kind.ROLE, finish
    elif choice.get("text"):
        return Kind.CONTENT, finish
    return (Kind.USAGE if isinstance(obj.get("usage"), dict) else Kind.OTHER), finish


def _error_message(obj: dict[str, Any]) -> str:
    error = obj.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    return str(message)


def classify(payload: bytes) -> Chunk:
    """Classify the data of one SSE event. Raises ``ValueError`` on malformed JSON."""
    if payload == b"[DONE]":
        return _DONE
    obj = _decode(payload)
    kind, finish = _kind(obj)
    if kind is Kind.ERROR:
        return Chunk(kind=Kind.ERROR, error=_error_message(obj))
    return Chunk(
        kind=kind,
        usage=parse_usage(obj.get("usage")),
        finish_reason=finish,
        timings=parse_timings(obj),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamSummary:
    """What a whole SSE response said, with content chunk arrivals relative to ``sent_ns``."""

    content_offsets_us: list[int]
    chunk_tokens: list[int] | None
    reasoning_offsets_us: list[int]
    first_token_ns: int | None
    first_reasoning_ns: int | None
    usage: Usage | None
    timings: ServerTimings | None
    finish_reason: str | None
    done: bool
    error: str | None


_PLAIN_CONTENT = re.compile(rb'"(?:delta":\{"content|text)":"(?!")')
"""A compact (vLLM-style) content chunk: ``"delta":{"content":"<non-empty>`` or ``"text":"..``."""
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens":(\d+)')


def plain_content_tokens(payload: bytes) -> int | None:
    """For a chunk that is certainly plain content with no finish reason, its
    cumulative completion tokens (-1 when it carries no usage); None for anything else.

    The byte checks cost a fraction of a JSON decode and are exact for compactly
    serialised chunks; any other shape falls through to the full decode.
    """
    # Errors carry no content delta, and server timings ride on the final chunk (whose
    # finish_reason is set), so these two checks are enough. (``find``, not ``in``: see
    # loadgen.sse.)
    if payload.find(b'"finish_reason":null') < 0 or _PLAIN_CONTENT.search(payload) is None:
        return None
    match = _COMPLETION_TOKENS.search(payload)
    return int(match.group(1)) if match is not None else -1


class StreamState:
    """A response's events classified so far, fed in arrival order (``add``, one event).

    The reference per-event path of ``summarize_stream``; ``loadgen.sse_bulk`` also appends
    whole runs of plain content chunks to ``content``/``tokens`` the way ``add`` would.
    """

    __slots__ = (
        "content",
        "done",
        "error",
        "finish",
        "first_reasoning",
        "first_token",
        "last_completion",
        "reasoning",
        "sent_ns",
        "timings",
        "tokens",
        "tokens_known",
        "usage_raw",
    )

    def __init__(self, sent_ns: int) -> None:
        self.sent_ns = sent_ns
        self.content: list[int] = []
        self.reasoning: list[int] = []
        self.tokens: list[int] = []
        self.tokens_known = True
        self.last_completion = 0
        self.first_token: int | None = None
        self.first_reasoning: int | None = None
        self.usage_raw: Any = None
        self.timings: ServerTimings | None = None
        self.finish: str | None = None
        self.done = False
        self.error: str | None = None

    def add(self, ts: int, payload: bytes) -> None:
        """Classify one event's data, which arrived at ``ts``."""
        if payload == b"[DONE]":
            self.done = True
            return
        plain = plain_content_tokens(payload)
        if plain is not None:
            if self.first_token is None:
                self.first_token = ts
            self.content.append((ts - self.sent_ns) // 1000)
            if plain >= 0:
                self.tokens.append(plain - self.last_completion)
                self.last_completion = plain
            else:
                self.tokens_known = False
            return
        self.add_decoded(ts, payload)

    def add_decoded(self, ts: int, payload: bytes) -> None:
        """``add`` for an event already known not to be ``[DONE]`` nor plain content
        (``plain_content_tokens`` is None): it is decoded."""
        try:
            obj = _decode(payload)
        except ValueError as exc:
            self.error = self.error or str(exc)
            return
        self._add_decoded(ts, obj)

    def _add_decoded(self, ts: int, obj: dict[str, Any]) -> None:
        kind, chunk_finish = _kind(obj)
        raw = obj.get("usage")
        if raw is not None:
            self.usage_raw = raw
        if "metrics" in obj or "timings" in obj:
            self.timings = parse_timings(obj) or self.timings
        if chunk_finish is not None:
            self.finish = chunk_finish
        if kind is Kind.CONTENT:
            if self.first_token is None:
                self.first_token = ts
            self.content.append((ts - self.sent_ns) // 1000)
            completion = raw.get("completion_tokens") if isinstance(raw, dict) else None
            if isinstance(completion, int):
                self.tokens.append(completion - self.last_completion)
                self.last_completion = completion
            else:
                self.tokens_known = False
        elif kind is Kind.REASONING:
            if self.first_reasoning is None:
                self.first_reasoning = ts
            self.reasoning.append((ts - self.sent_ns) // 1000)
            completion = raw.get("completion_tokens") if isinstance(raw, dict) else None
            if isinstance(completion, int):
                self.last_completion = completion
        elif kind is Kind.ERROR:
            self.error = self.error or f"server error in stream: {_error_message(obj)}"

    def summary(self) -> StreamSummary:
        """What the events added so far said."""
        content = self.content
        return StreamSummary(
            content_offsets_us=content,
            chunk_tokens=self.tokens if self.tokens_known and content else None,
            reasoning_offsets_us=self.reasoning,
            first_token_ns=self.first_token,
            first_reasoning_ns=self.first_reasoning,
            usage=parse_usage(self.usage_raw),
            timings=self.timings,
            finish_reason=self.finish,
            done=self.done,
            error=self.error,
        )


def summarize_stream(events: list[tuple[int, bytes]], sent_ns: int) -> StreamSummary:
    """Classify a response's recorded ``(arrival_ns, data)`` events, after the stream ended.

    JSON decoding happens here, never while bytes are arriving. Tokens per content chunk
    come from cumulative ``usage.completion_tokens`` when the server sends usage on every
    chunk (vLLM's ``continuous_usage_stats``); otherwise they are unknown (None).
    """
    state = StreamState(sent_ns)
    add = state.add
    for ts, payload in events:
        add(ts, payload)
    return state.summary()
