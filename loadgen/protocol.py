"""OpenAI-compatible request bodies and response-chunk classification (sans-IO).

Builds ``/v1/chat/completions`` and ``/v1/completions`` bodies, and turns the data payload
of one SSE event into a ``Chunk``: content, reasoning, role-only, usage-only, done or error.
Chunks are not tokens: only content chunks count toward TTFT and ITL. Server-reported
timings (the simulator's ``metrics``, llama.cpp's ``timings``) are read from any chunk.
"""

from __future__ import annotations

import enum
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


def parse_timings(obj: dict[str, Any]) -> ServerTimings | None:
    """Server timings carried in a chunk: the simulator's ``metrics`` (ms fields) or
    llama.cpp's ``timings`` (``prompt_ms``: prefill, ``predicted_ms``: decode)."""
    metrics = obj.get("metrics")
    if isinstance(metrics, dict) and "prefill_ms" in metrics:
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
    timings = obj.get("timings")
    if isinstance(timings, dict) and "prompt_ms" in timings:
        return ServerTimings(
            prefill_ms=_float(timings.get("prompt_ms")),
            decode_ms=_float(timings.get("predicted_ms")),
        )
    return None


def classify(payload: bytes) -> Chunk:
    """Classify the data of one SSE event. Raises ``ValueError`` on malformed JSON."""
    if payload == b"[DONE]":
        return _DONE
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"malformed chunk: {payload[:80]!r}") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"chunk is not a JSON object: {payload[:80]!r}")
    error = obj.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else str(error)
        return Chunk(kind=Kind.ERROR, error=str(message))
    usage = parse_usage(obj.get("usage"))
    timings = parse_timings(obj)
    kind = Kind.USAGE if usage is not None else Kind.OTHER
    finish: str | None = None
    choices = obj.get("choices")
    if isinstance(choices, list) and choices:
        choice = choices[0]
        if isinstance(choice, dict):
            finish = choice.get("finish_reason")
            delta = choice.get("delta")
            if isinstance(delta, dict):
                if delta.get("content") or delta.get("tool_calls"):
                    kind = Kind.CONTENT
                elif delta.get("reasoning_content") or delta.get("reasoning"):
                    kind = Kind.REASONING
                elif "role" in delta:
                    kind = Kind.ROLE
                else:
                    kind = Kind.OTHER
            elif choice.get("text"):
                kind = Kind.CONTENT
            else:
                kind = Kind.OTHER
    return Chunk(kind=kind, usage=usage, finish_reason=finish, timings=timings)
