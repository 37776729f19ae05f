"""The Responses API's streamed events (``/v1/responses`` with ``stream: true``), sans-IO.

Each SSE event's data is a JSON object whose ``type`` names it (OpenAI's streaming events
reference; vLLM and other servers send the same names). What a run row needs from them:

* content: ``response.output_text.delta`` (also ``response.refusal.delta`` and
  ``response.function_call_arguments.delta``, as chat counts refusals and tool calls);
  one with an empty ``delta`` carries no token and is not counted;
* reasoning: ``response.reasoning_text.delta``, ``response.reasoning_summary_text.delta``;
* the end: ``response.completed`` or ``response.incomplete``, whose ``response`` holds
  ``usage`` (``input_tokens``, ``output_tokens``, ``input_tokens_details.cached_tokens``,
  ``output_tokens_details.reasoning_tokens``) and, when incomplete,
  ``incomplete_details.reason``. There is no ``data: [DONE]``;
* failures: ``response.failed`` (its ``response.error``) and ``error`` (``message`` at the
  top level).

Everything else (``response.created``, ``response.in_progress``, item and part events, the
``.done`` events) says nothing a row keeps. Pure: imports orjson's decoded values only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final

TEXT_DELTA: Final = b'"type":"response.output_text.delta"'
"""The compact form of the one event of a stream that is frequent: the fast path's key."""
EMPTY_DELTA: Final = b'"delta":""'

CONTENT_TYPES: Final = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.function_call_arguments.delta",
    }
)
REASONING_TYPES: Final = frozenset(
    {"response.reasoning_text.delta", "response.reasoning_summary_text.delta"}
)
END_TYPES: Final = frozenset({"response.completed", "response.incomplete"})
FAILED: Final = "response.failed"
ERROR: Final = "error"


class EventKind(enum.Enum):
    """What one Responses event is, for a run row."""

    CONTENT = "content"
    REASONING = "reasoning"
    END = "end"
    ERROR = "error"
    OTHER = "other"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseEvent:
    """One classified event: its kind and, for the end, the final response's ``usage``
    and status as sent (``finish``), and for a failure its message."""

    kind: EventKind
    usage: Any = None
    finish: Any = None
    error: str | None = None


_OTHER: Final = ResponseEvent(kind=EventKind.OTHER)
_CONTENT: Final = ResponseEvent(kind=EventKind.CONTENT)
_REASONING: Final = ResponseEvent(kind=EventKind.REASONING)


def plain_text_delta(payload: bytes) -> bool:
    """Whether ``payload`` is certainly a compact, non-empty ``response.output_text.delta``
    (a byte check: a quote inside a JSON string is escaped, so the unescaped key-value pair
    is the event's own ``type``). False means: decode it and ``classify_event``."""
    return payload.find(TEXT_DELTA) >= 0 and payload.find(EMPTY_DELTA) < 0


def classify_event(obj: dict[str, Any]) -> ResponseEvent:
    """The kind of one decoded event object."""
    kind = obj.get("type")
    if kind in CONTENT_TYPES:
        return _CONTENT if obj.get("delta") else _OTHER
    if kind in REASONING_TYPES:
        return _REASONING if obj.get("delta") else _OTHER
    if kind in END_TYPES:
        response = obj.get("response")
        if not isinstance(response, dict):
            return ResponseEvent(kind=EventKind.ERROR, error=f"{kind} without a response object")
        return ResponseEvent(
            kind=EventKind.END, usage=response.get("usage"), finish=_finish(response)
        )
    if kind == FAILED:
        response = obj.get("response")
        error = response.get("error") if isinstance(response, dict) else None
        return ResponseEvent(kind=EventKind.ERROR, error=f"response failed: {_message(error)}")
    if kind == ERROR:
        return ResponseEvent(kind=EventKind.ERROR, error=f"server error in stream: {_message(obj)}")
    if obj.get("error") is not None:  # an OpenAI-style error object, as chat servers send
        return ResponseEvent(
            kind=EventKind.ERROR, error=f"server error in stream: {_message(obj['error'])}"
        )
    return _OTHER


def _finish(response: dict[str, Any]) -> Any:
    """The row's ``finish_reason``: the reason an incomplete response gives
    (``max_output_tokens``), else its ``status`` (``completed``)."""
    details = response.get("incomplete_details")
    if isinstance(details, dict) and details.get("reason") is not None:
        return details.get("reason")
    return response.get("status")


def _message(error: Any) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        code = error.get("code")
        text = str(message) if message is not None else "no message"
        return f"{text} ({code})" if code is not None else text
    return "no message" if error is None else str(error)
