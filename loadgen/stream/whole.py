"""A non-streamed response body (``--no-stream``) into its ``StreamState``: ``WholeBody``.

The same two calls as ``loadgen.stream.feed.EventFeed`` (``take`` per socket read,
``finish`` at the end), so the client reads both kinds of body alike. The reads are kept
(up to ``max_bytes``) and decoded once, at the end: the usage, the finish reason and any
server timings in the body (the simulator's ``metrics``, llama.cpp's ``timings``) go into
the state; no content chunk is added, so the row has no first token and no inter-token
gaps (TTFT and TPOT are undefined for it, not zero). Imports ``loadgen.openai`` and
``loadgen.stream.body`` only.
"""

from __future__ import annotations

from loadgen.openai.chunks import chunk_kind, decode_object, error_message
from loadgen.openai.timings import parse_timings
from loadgen.stream.body import BodyReads


class WholeBody(BodyReads):
    """One JSON response body, gathered and decoded at its end (``finish``)."""

    __slots__ = ()

    def finish(self, ts: int) -> None:
        """The body ended: decode it into the state."""
        state = self._state
        if state.error is not None:
            return
        try:
            obj = decode_object(self.body())
        except ValueError as exc:
            state.error = f"non-streamed response: {exc}"
            return
        if obj.get("error") is not None:
            state.error = f"server error in response: {error_message(obj)}"
            return
        _, finish = chunk_kind(obj)  # content or not: no first-token time in a whole body
        state.usage_raw = obj.get("usage")
        state.finish = finish
        state.timings = parse_timings(obj)
        state.done = True
