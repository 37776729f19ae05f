"""A Responses API stream's events classified in arrival order: ``ResponsesState`` and
its feed, ``ResponsesFeed``.

The same state as chat's (``StreamState``: content and reasoning arrivals, usage, finish,
errors) filled from the Responses API's typed events (``loadgen.openai.events``). The C
walk classifies chat chunks only; a Responses stream has its own feed, which frames each
read (``SSEDecoder.feed_raw``) and hands the events it completed to ``add_text``: a read
whose events are all compact, non-empty ``response.output_text.delta`` (nearly every read
of a stream) is counted with two byte counts and one list extension, without splitting
or decoding a single event; any other read goes event by event through ``add``, where a
compact delta is still counted by a byte check and only the others are decoded. The two
paths leave the same state (tested on every split of a stream). Per-delta token counts
are not sent by this API: ``chunk_tokens`` stays unknown, and the total comes from
``response.completed``'s ``usage``.
"""

from __future__ import annotations

from loadgen.openai.chunks import RESPONSES_USAGE_NAMES, decode_object
from loadgen.openai.events import (
    EMPTY_DELTA,
    TEXT_DELTA,
    EventKind,
    classify_event,
    plain_text_delta,
)
from loadgen.openai.timings import parse_timings
from loadgen.stream.sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder, decode_blocks
from loadgen.stream.state import StreamState

__all__ = ["ResponsesFeed", "ResponsesState"]


class ResponsesState(StreamState):
    """``StreamState`` for ``/v1/responses``: ``done`` is set by ``response.completed``
    or ``response.incomplete`` (the API sends no ``[DONE]``)."""

    __slots__ = ()

    usage_names = RESPONSES_USAGE_NAMES

    def add_text(self, ts: int, text: bytes) -> None:
        """Add the events of ``text`` (whole CR-free blocks, as ``feed_raw`` returns them),
        which arrived at ``ts``: in bulk when every one is a compact text delta."""
        deltas = text.count(TEXT_DELTA)
        if deltas and deltas == text.count(b"\n\n") + 1 and text.find(EMPTY_DELTA) < 0:
            if self.first_token is None:
                self.first_token = ts
            self.content.extend([(ts - self.sent_ns) // 1000] * deltas)
            self.tokens_known = False
            return
        add = self.add
        for payload in decode_blocks(text):
            add(ts, payload)

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


class ResponsesFeed:
    """A Responses stream's reads into its ``ResponsesState``: ``take(ts, data)`` per read
    (the transport's sink; True once an event was beyond ``max_event_bytes``, as
    ``EventFeed``), ``finish(ts)`` at the end of the body."""

    __slots__ = ("_decoder", "_state")

    def __init__(
        self, state: ResponsesState, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    ) -> None:
        self._state = state
        self._decoder = SSEDecoder(max_event_bytes)

    def take(self, ts: int, data: bytes) -> bool:
        decoder = self._decoder
        text = decoder.feed_raw(data)
        if text:
            self._state.add_text(ts, text)
        if decoder.error is None:
            return False
        if self._state.error is None:
            self._state.error = decoder.error
        return True

    def finish(self, ts: int) -> None:
        """The body ended: a last event that lacked its blank line still counts."""
        add = self._state.add
        for payload in self._decoder.flush():
            add(ts, payload)
