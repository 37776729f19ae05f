"""A response body read whole (``/v1/embeddings``, not streamed): ``BodyFeed``, on
``BodyReads`` (the reads kept to a limit, which ``loadgen.stream.whole`` shares).

The transport's sink, as ``EventFeed`` is for streams: each read is kept as it arrives
(no decoding on the hot path) up to a limit, and the body is decoded once it has ended
(``finish``), into the request's ``StreamState``: its ``usage``, its ``items`` and, when
the reply is unusable, its ``error``. A body longer than the limit ends the read (``take``
answers True) and is the request's error.
"""

from __future__ import annotations

from loadgen.openai.embeddings import read_embeddings
from loadgen.stream.sse import DEFAULT_MAX_EVENT_BYTES, size_text
from loadgen.stream.state import StreamState

__all__ = ["BodyFeed", "BodyReads"]


class BodyReads:
    """The reads of one response body that is decoded whole, at its end: ``take(ts,
    data)`` keeps each read (up to ``max_bytes``: beyond, the read ends and the state gets
    the error), ``body()`` hands them over joined, once. Subclasses decode in ``finish``."""

    __slots__ = ("_limit", "_parts", "_size", "_state")

    def __init__(self, state: StreamState, *, max_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._state = state
        self._limit = max_bytes
        self._parts: list[bytes] = []
        self._size = 0

    def take(self, ts: int, data: bytes) -> bool:
        """Keep one read; True (read no more) once the body is beyond the limit."""
        self._size += len(data)
        if self._size > self._limit:
            if self._state.error is None:
                self._state.error = (
                    f"a reply body longer than {size_text(self._limit)} (the limit: loadgen "
                    "replay --max-event-mib): it was not read further"
                )
            self._parts.clear()
            return True
        self._parts.append(data)
        return False

    def body(self) -> bytes:
        """The reads joined (and let go)."""
        data = b"".join(self._parts)
        self._parts.clear()
        return data


class BodyFeed(BodyReads):
    """One embeddings response's reads: ``take(ts, data)`` per read, ``finish(ts)`` at
    its end."""

    __slots__ = ()

    def finish(self, ts: int) -> None:
        """The body ended: decode it into the state (once)."""
        state = self._state
        if state.error is not None:
            return
        reply = read_embeddings(self.body())
        state.usage_raw = reply.usage
        state.items = reply.items
        state.timings = reply.timings
        state.error = reply.error
        state.done = reply.error is None
