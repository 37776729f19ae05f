"""Both implementations of ``loadgen.stream.feed`` as a test parameter, and the reference
they are compared with (on the test path via pytest's ``pythonpath``; not a test module).

``IMPLS`` parametrizes a test's ``native`` argument: the C walk (skipped where
``loadgen.stream._sse_scan`` is not built) and the reference (``SSEDecoder`` framing and
``StreamState.add`` per event), which installs without a compiler use.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from loadgen.stream.feed import NATIVE, EventFeed
from loadgen.stream.sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder
from loadgen.stream.state import StreamState, StreamSummary, summarize_stream

IMPLS = [
    pytest.param(
        True,
        id="c",
        marks=pytest.mark.skipif(not NATIVE, reason="loadgen.stream._sse_scan is not built"),
    ),
    pytest.param(False, id="reference"),
]
SENT_NS = 1_000


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    """``stream`` cut at ``cuts`` (any order, repeats give empty reads)."""
    bounds = [0, *sorted(cuts), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def stamps_for(pieces: list[bytes]) -> list[int]:
    return [1_000_000 * (i + 1) for i in range(len(pieces))]


def reference(
    pieces: list[bytes],
    stamps: list[int],
    end_ns: int,
    *,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> StreamSummary:
    """What the client recorded before any fast path: ``SSEDecoder.feed`` per read, each
    event stamped with its read's time, ``summarize_stream`` once the stream ended; the
    decoder's refusal of a stream (an event beyond ``max_event_bytes``) is its error
    unless an event's came first."""
    dec = SSEDecoder(max_event_bytes)
    events: list[tuple[int, bytes]] = []
    for ts, data in zip(stamps, pieces, strict=True):
        events.extend((ts, payload) for payload in dec.feed(data))
    events.extend((end_ns, payload) for payload in dec.flush())
    summary = summarize_stream(events, SENT_NS)
    if dec.error is not None and summary.error is None:
        summary = dataclasses.replace(summary, error=dec.error)
    return summary


def fed(
    pieces: list[bytes],
    stamps: list[int],
    end_ns: int,
    *,
    native: bool,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> StreamSummary:
    """As the client does it: each read through an ``EventFeed`` as it arrives, until
    ``take`` says the stream has ended (an event beyond ``max_event_bytes``)."""
    state = StreamState(SENT_NS)
    feed = EventFeed(state, native=native, max_event_bytes=max_event_bytes)
    for ts, data in zip(stamps, pieces, strict=True):
        if feed.take(ts, data):
            break
    feed.finish(end_ns)
    return state.summary()


def fed_events(payloads: list[bytes], *, native: bool) -> StreamSummary:
    """Each payload (no LF or CR in it) as one ``data:`` event in its own read; checked
    against ``summarize_stream`` of the same stamped events before it is returned."""
    pieces = [b"data: " + p + b"\n\n" for p in payloads]
    stamps = stamps_for(pieces)
    summary = fed(pieces, stamps, 10**9, native=native)
    assert summary == summarize_stream(list(zip(stamps, payloads, strict=True)), SENT_NS)
    return summary
