"""A response's SSE events classified in arrival order: ``StreamState``, the reference.

``StreamState.add`` is the per-event reference path; ``loadgen.stream.feed`` drives the C
walk (``loadgen.stream._sse_scan``) over the same state, and falls back to ``add`` where
the C module is not built. Offsets are microseconds after ``sent_ns``; stamps are
nanoseconds of the run's monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.openai.chunks import (
    CHAT_USAGE_NAMES,
    Kind,
    Usage,
    chunk_kind,
    decode_object,
    error_message,
    plain_content_tokens,
    read_finish,
    read_usage,
)
from loadgen.openai.timings import ServerTimings, parse_timings


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
    """What made the stream unusable as sent: a malformed chunk, an error event, or a value
    a row stores (``finish_reason``, a usage count) of the wrong JSON type, which then
    reads as None. The first of these, in that order of precedence."""
    tool_call_chunks: int = 0
    """Chunks whose delta carries ``tool_calls`` (also in ``content_offsets_us``: a tool
    call is output, and starts TTFT as content does)."""
    first_tool_call_ns: int | None = None
    """Arrival of the first tool-call chunk."""
    items: int | None = None
    """Embeddings in the reply (``/v1/embeddings``); None for the streaming APIs."""


class StreamState:
    """A response's events classified so far, fed in arrival order (``add``, one event).

    The reference per-event path of ``summarize_stream``; the C walk
    (``loadgen.stream._sse_scan``) also appends whole runs of plain content chunks to
    ``content``/``tokens`` the way ``add`` would, and reads and writes these slots and
    calls these methods by name (``tests/loadgen/test_sse_scan_names.py`` checks them).
    """

    __slots__ = (
        "content",
        "done",
        "error",
        "finish",
        "first_reasoning",
        "first_token",
        "first_tool_call",
        "items",
        "last_completion",
        "reasoning",
        "sent_ns",
        "timings",
        "tokens",
        "tokens_known",
        "tool_calls",
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
        self.tool_calls = 0
        """Tool-call chunks so far (``Kind.TOOL_CALL``)."""
        self.first_tool_call: int | None = None
        self.usage_raw: Any = None
        self.timings: ServerTimings | None = None
        self.finish: object = None
        """The last ``finish_reason`` that was not null, as sent (``summary`` checks it)."""
        self.done = False
        self.error: str | None = None
        self.items: int | None = None

    usage_names = CHAT_USAGE_NAMES
    """The keys of the ``usage`` object this API sends (``read_usage``)."""

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
            obj = decode_object(payload)
        except ValueError as exc:
            self.error = self.error or str(exc)
            return
        self._add_decoded(ts, obj)

    def _add_decoded(self, ts: int, obj: dict[str, Any]) -> None:
        kind, chunk_finish = chunk_kind(obj)
        raw = obj.get("usage")
        if raw is not None:
            self.usage_raw = raw
        if "metrics" in obj or "timings" in obj:
            self.timings = parse_timings(obj) or self.timings
        if chunk_finish is not None:
            self.finish = chunk_finish
        if kind is Kind.CONTENT or kind is Kind.TOOL_CALL:
            if self.first_token is None:
                self.first_token = ts
            if kind is Kind.TOOL_CALL:
                self.tool_calls += 1
                if self.first_tool_call is None:
                    self.first_tool_call = ts
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
            self.error = self.error or f"server error in stream: {error_message(obj)}"

    def summary(self) -> StreamSummary:
        """What the events added so far said. The values a row stores are checked for their
        JSON type here, once, whichever implementation filled the state: a wrong one is
        left out and named in ``error``; the chunks received are kept."""
        content = self.content
        usage, usage_problem = read_usage(self.usage_raw, self.usage_names)
        finish, finish_problem = read_finish(self.finish)
        return StreamSummary(
            content_offsets_us=content,
            chunk_tokens=self.tokens if self.tokens_known and content else None,
            reasoning_offsets_us=self.reasoning,
            first_token_ns=self.first_token,
            first_reasoning_ns=self.first_reasoning,
            usage=usage,
            timings=self.timings,
            finish_reason=finish,
            done=self.done,
            error=self.error or finish_problem or usage_problem,
            tool_call_chunks=self.tool_calls,
            first_tool_call_ns=self.first_tool_call,
            items=self.items,
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
