"""One response body's socket reads into its ``StreamState``: ``EventFeed``.

The client hands over each read's bytes as they arrive (``EventFeed.take``, the transport's
sink); the events the read completed are added to the stream's ``StreamState`` with the
read's arrival time. Two implementations do that, and leave the same state:

* the C walk, ``loadgen.stream._sse_scan``, where the package was built with a C compiler:
  one call per read frames it as ``SSEDecoder.feed_raw`` does (on the decoder's own state,
  with its limit on an event's size) and classifies its events.
  Runs of plain content chunks are added without Python (about 0.1-0.2 µs per event); the
  role, finish, usage and reasoning chunks are decoded by orjson and classified in C;
  errors and server timings go through ``StreamState``'s methods.
* the reference: ``SSEDecoder`` frames the read and ``StreamState.add`` classifies each
  event. Installs without the C module use it.

``native`` picks one (by default the C walk where it is built); the tests run every case
on both and compare them with the reference. An event longer than the decoder's limit
(``SSEDecoder``, ``max_event_bytes``) ends the stream: ``StreamState.error`` says so (unless
an earlier event set it), and ``take`` answers True from then on, which tells the
transport to read no more of the body. Must not import the client or the transports.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Final

from loadgen.stream.sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder, decode_blocks, event_data
from loadgen.stream.state import StreamState, StreamSummary

Read = tuple[int, bytes | list[bytes]]
"""One socket read: its arrival time and its completed events (their text, as ``feed_raw``
gives it, or their decoded data)."""

_AddBlock = Callable[[StreamState, int, bytes], None]
_scan_read: Callable[[StreamState, int, bytes, _AddBlock], None] | None
_scan_feed: Callable[[SSEDecoder, StreamState, _AddBlock, int, bytes], bool] | None
try:
    from loadgen.stream._sse_scan import scan_feed as _scan_feed
    from loadgen.stream._sse_scan import scan_read as _scan_read
except ImportError:  # built without a C compiler: the reference gives the same result
    _scan_read = _scan_feed = None

NATIVE: Final = _scan_feed is not None
"""Whether ``loadgen.stream._sse_scan`` is built: the default of every ``native`` here."""
_NOT_BUILT = "loadgen.stream._sse_scan is not built: pass native=False"


def summarize_reads(reads: list[Read], sent_ns: int, *, native: bool = NATIVE) -> StreamSummary:
    """``summarize_stream`` of the events of ``reads``, each stamped with its read's time."""
    state = StreamState(sent_ns)
    for ts, got in reads:
        add_read(state, ts, got, native=native)
    return state.summary()


def add_read(
    state: StreamState, ts: int, got: bytes | list[bytes], *, native: bool = NATIVE
) -> None:
    """Add the events one read completed (``got``, as ``feed_raw`` returned it) to
    ``state``, in order, stamped ``ts``: with the C walk (``native``) or ``StreamState.add``
    per event."""
    if isinstance(got, bytes):
        if native:
            if _scan_read is None:
                raise RuntimeError(_NOT_BUILT)
            _scan_read(state, ts, got, _add_block)
            return
        got = decode_blocks(got)
    add = state.add
    for payload in got:
        add(ts, payload)


class EventFeed:
    """One response body's reads into its ``StreamState``: ``take(ts, data)`` for each
    socket read (the transport's sink), ``finish(ts)`` at the end of the body.

    ``take`` answers whether the stream has ended for good: True once an event was longer
    than ``max_event_bytes`` (then ``StreamState.error`` says so and nothing more is
    read), which tells the transport to stop reading the body.

    With ``native`` (the default where the C module is built), ``take`` is that module's
    ``scan_feed`` bound to this body's decoder and state: framing and classification in one
    call, with no Python frame per read. Without it, ``SSEDecoder.feed`` frames the read
    and ``StreamState.add`` classifies each event it completed."""

    __slots__ = ("_decoder", "_state", "take")

    def __init__(
        self,
        state: StreamState,
        *,
        native: bool = NATIVE,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._state = state
        self._decoder = SSEDecoder(max_event_bytes)
        self.take: Callable[[int, bytes], bool]
        if native:
            if _scan_feed is None:
                raise RuntimeError(_NOT_BUILT)
            self.take = partial(_scan_feed, self._decoder, state, _add_block)
        else:
            self.take = self._take

    def _take(self, ts: int, data: bytes) -> bool:
        decoder = self._decoder
        add = self._state.add
        for payload in decoder.feed(data):
            add(ts, payload)
        if decoder.error is None:
            return False
        if self._state.error is None:  # an error in an earlier event came first
            self._state.error = decoder.error
        return True

    def finish(self, ts: int) -> None:
        """The body ended: a last event that lacked its blank line still counts."""
        add = self._state.add
        for payload in self._decoder.flush():
            add(ts, payload)


def _add_block(state: StreamState, ts: int, block: bytes) -> None:
    """One event block the C walk leaves to the decoder's own rules (multi-line data,
    comments, other fields)."""
    payload = event_data(block)
    if payload is not None:
        state.add(ts, payload)
