"""Response-chunk classification (sans-IO): the data of one SSE event as a ``Chunk``.

Content, reasoning, role-only, usage-only, done or error. Chunks are not tokens: only
content chunks count toward TTFT and ITL. ``plain_content_tokens`` is the byte-level fast
check for compact content chunks; ``chunk_kind`` is the one classification of a decoded
chunk (``loadgen.stream._sse_scan`` mirrors it in C, tested against it).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.openai.timings import ServerTimings, parse_timings


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
    # loadgen.stream.sse.)
    if payload.find(b'"finish_reason":null') < 0 or _PLAIN_CONTENT.search(payload) is None:
        return None
    match = _COMPLETION_TOKENS.search(payload)
    return int(match.group(1)) if match is not None else -1


def decode_object(payload: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"malformed chunk: {payload[:80]!r}") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"chunk is not a JSON object: {payload[:80]!r}")
    return obj


def chunk_kind(obj: dict[str, Any]) -> tuple[Kind, str | None]:
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


def error_message(obj: dict[str, Any]) -> str:
    error = obj.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    return str(message)


def classify(payload: bytes) -> Chunk:
    """Classify the data of one SSE event. Raises ``ValueError`` on malformed JSON."""
    if payload == b"[DONE]":
        return _DONE
    obj = decode_object(payload)
    kind, finish = chunk_kind(obj)
    if kind is Kind.ERROR:
        return Chunk(kind=Kind.ERROR, error=error_message(obj))
    return Chunk(
        kind=kind,
        usage=parse_usage(obj.get("usage")),
        finish_reason=finish,
        timings=parse_timings(obj),
    )
