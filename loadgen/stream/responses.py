"""A Responses API stream's events classified in arrival order: ``ResponsesState``.

The same state as chat's (``StreamState``: content and reasoning arrivals, usage, finish,
errors) filled from the Responses API's typed events (``loadgen.openai.events``). Its
``add`` is the feed's per-event path: the C walk classifies chat chunks only, so a
Responses stream is fed with ``EventFeed(native=False)``. A compact
``response.output_text.delta`` (nearly every event of a stream) is counted by a byte check
without decoding, as chat's plain content chunks are; the others are decoded. Per-delta
token counts are not sent by this API: ``chunk_tokens`` stays unknown, and the total comes
from ``response.completed``'s ``usage``.
"""

from __future__ import annotations

from loadgen.openai.chunks import RESPONSES_USAGE_NAMES, decode_object
from loadgen.openai.events import EventKind, classify_event, plain_text_delta
from loadgen.openai.timings import parse_timings
from loadgen.stream.state import StreamState

__all__ = ["ResponsesState"]


class ResponsesState(StreamState):
    """``StreamState`` for ``/v1/responses``: ``done`` is set by ``response.completed``
    or ``response.incomplete`` (the API sends no ``[DONE]``)."""

    __slots__ = ()

    usage_names = RESPONSES_USAGE_NAMES

    def add(self, ts: int, payload: bytes) -> None:
        """Classify one event's data, which arrived at ``ts``."""
        if plain_text_delta(payload):
            if self.first_token is None:
                self.first_token = ts
            self.content.append((ts - self.sent_ns) // 1000)
            self.tokens_known = False
            return
        self.add_decoded(ts, payload)

    def add_decoded(self, ts: int, payload: bytes) -> None:
        try:
            obj = decode_object(payload)
        except ValueError as exc:
            self.error = self.error or str(exc)
            return
        event = classify_event(obj)
        kind = event.kind
        if kind is EventKind.CONTENT:
            if self.first_token is None:
                self.first_token = ts
            self.content.append((ts - self.sent_ns) // 1000)
            self.tokens_known = False
        elif kind is EventKind.REASONING:
            if self.first_reasoning is None:
                self.first_reasoning = ts
            self.reasoning.append((ts - self.sent_ns) // 1000)
        elif kind is EventKind.END:
            self.done = True
            if event.usage is not None:
                self.usage_raw = event.usage
            if event.finish is not None:
                self.finish = event.finish
            if "metrics" in obj or "timings" in obj:
                self.timings = parse_timings(obj) or self.timings
        elif kind is EventKind.ERROR:
            self.error = self.error or event.error
