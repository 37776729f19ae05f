"""Response-chunk classification (sans-IO): the data of one SSE event as a ``Chunk``.

Content, tool call, reasoning, role-only, usage-only, done or error. Chunks are not
tokens: only content and tool-call chunks count toward TTFT and ITL (a tool call is
output the client waits for; ``StreamState`` counts tool-call chunks apart too).
``plain_content_tokens`` is the byte-level fast check for compact content chunks;
``chunk_kind`` is the one classification of a decoded chunk (``loadgen.stream._sse_scan``
mirrors it in C, tested against it). ``read_usage`` and
``read_finish`` take the values a run row stores from a chunk and say what is wrong with
one that has the wrong JSON type (the caller turns that into the request's outcome).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.openai.timings import ServerTimings, parse_timings
from traces.errors import shown


class Kind(enum.Enum):
    """What one SSE event is."""

    CONTENT = "content"
    TOOL_CALL = "tool_call"
    """A ``delta.tool_calls`` chunk (OpenAI's streamed function calls): output, timed as
    content, counted apart."""
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


def parse_usage(raw: Any) -> Usage | None:
    """Read an OpenAI ``usage`` object (with ``prompt_tokens_details.cached_tokens``); a
    count of the wrong type reads as absent (``read_usage`` says which)."""
    return read_usage(raw)[0]


CHAT_USAGE_NAMES: tuple[str, str, str, str] = (
    "prompt_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "completion_tokens_details",
)
"""The keys of an OpenAI chat, completions or embeddings ``usage`` object: input count,
output count, and the two detail objects (``cached_tokens``, ``reasoning_tokens``)."""
RESPONSES_USAGE_NAMES: tuple[str, str, str, str] = (
    "input_tokens",
    "output_tokens",
    "input_tokens_details",
    "output_tokens_details",
)
"""The same keys in the Responses API's ``usage`` object."""


def read_usage(
    raw: Any, names: tuple[str, str, str, str] = CHAT_USAGE_NAMES
) -> tuple[Usage | None, str | None]:
    """An OpenAI ``usage`` object's counts (``prompt_tokens``, ``completion_tokens``,
    ``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``;
    ``names`` gives the keys, the Responses API's are ``RESPONSES_USAGE_NAMES``)
    and, when one is not an integer, ``"usage.<path> = <value>: not an integer"`` for the
    first such (that count reads as None). Null or absent is None; a float with an integral
    value is that integer; a bool, string, list or object is not a count. The counts are
    not range-checked: the record builder knows the columns. None, None when ``raw`` is not
    an object."""
    if not isinstance(raw, dict):
        return None, None
    inputs, outputs, in_details, out_details = names
    problems: list[str] = []
    details = raw.get(in_details)
    more = raw.get(out_details)
    usage = Usage(
        prompt_tokens=_count(raw, inputs, "", problems),
        completion_tokens=_count(raw, outputs, "", problems),
        cached_tokens=(
            _count(details, "cached_tokens", f"{in_details}.", problems)
            if isinstance(details, dict)
            else None
        ),
        reasoning_tokens=(
            _count(more, "reasoning_tokens", f"{out_details}.", problems)
            if isinstance(more, dict)
            else None
        ),
    )
    return usage, problems[0] if problems else None


def _count(obj: dict[str, Any], key: str, path: str, problems: list[str]) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    problems.append(f"usage.{path}{key} = {shown(value)}: not an integer")
    return None


def read_finish(value: Any) -> tuple[str | None, str | None]:
    """A chunk's ``finish_reason`` as recorded (a string, or None for null), and
    ``"finish_reason = <value>: not a string"`` when it is some other JSON value (which
    then reads as None)."""
    if value is None or isinstance(value, str):
        return value, None
    return None, f"finish_reason = {shown(value)}: not a string"


_PLAIN_CONTENT = re.compile(rb'"(?:delta":\{"content|text)":"(?!")')
"""A compact (vLLM-style) content chunk: ``"delta":{"content":"<non-empty>`` or ``"text":"..``."""
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens":(\d+)')
_HUGE_COUNT = 10**19
"""What a count of more digits than ``int`` reads (4,300 by default) stands for: beyond
every count column, which the record builder refuses."""


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
    if match is None:
        return -1
    try:
        return int(match.group(1))
    except ValueError:  # more digits than the interpreter converts
        return _HUGE_COUNT


def decode_object(payload: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"malformed chunk: {payload[:80]!r}") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"chunk is not a JSON object: {payload[:80]!r}")
    return obj


def chunk_kind(obj: dict[str, Any]) -> tuple[Kind, Any]:
    """The kind of a decoded chunk and its ``finish_reason`` as sent: any JSON value, which
    ``read_finish`` checks (no allocation on the common path)."""
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
        if delta.get("tool_calls"):
            return Kind.TOOL_CALL, finish
        if delta.get("content"):
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
        finish_reason=read_finish(finish)[0],
        timings=parse_timings(obj),
    )


def reply_text(body: bytes) -> str:
    """The content text of a whole SSE response body, in order: each event's
    ``choices[0].delta.content`` (chat) or ``choices[0].text`` (completions), and the
    ``function.arguments`` fragments of its ``delta.tool_calls`` (a tool call's arguments
    stand for its text). For a live session history (``--history live``), after the
    response has ended; events that are not JSON objects with such a string are
    skipped."""
    parts: list[str] = []
    for line in body.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if not payload or payload == b"[DONE]":
            continue
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue
        choices = obj.get("choices") if isinstance(obj, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            continue
        choice = choices[0]
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if isinstance(text, str):
            parts.append(text)
        calls = delta.get("tool_calls") if isinstance(delta, dict) else None
        if isinstance(calls, list):
            parts.extend(_arguments(calls))
    return "".join(parts)


def _arguments(calls: list[Any]) -> list[str]:
    """The ``function.arguments`` strings of a delta's ``tool_calls``."""
    out: list[str] = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        args = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(args, str):
            out.append(args)
    return out
