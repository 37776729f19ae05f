"""The SSE framing's bounds, on both implementations of ``loadgen.stream.feed``: an event
longer than the limit ends the stream wherever the reads split it, the C walk refuses
exactly where the reference does, and the time to frame a long event grows linearly with
it (issue 19: a 16 MB line took 2.9 s and a CR-only stream 15 s, quadratic in their size).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson
import pytest
from feeds import IMPLS, fed, reference, split, stamps_for
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.stream.feed import EventFeed
from loadgen.stream.sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder
from loadgen.stream.state import StreamState, StreamSummary

LIMIT = 100
LIMIT_ERROR = f"an SSE event longer than {LIMIT} bytes"


def content(text: str) -> bytes:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": None}
    return orjson.dumps({"choices": [choice]})


def test_the_default_holds_a_whole_1m_token_response() -> None:
    """32 bytes per token: a token JSON-escaped at worst (``\\ud83d\\ude00``, 12 bytes)
    with room for the chunk's other fields."""
    assert DEFAULT_MAX_EVENT_BYTES == 32 * 1024 * 1024
    assert DEFAULT_MAX_EVENT_BYTES >= 1_000_000 * 32
    with pytest.raises(ValueError, match="at least 1"):
        SSEDecoder(0)


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_an_event_of_the_limit_is_read_and_one_byte_more_ends_the_stream(
    native: bool, ending: bytes
) -> None:
    """The size counts the event's lines, each line end as one byte, not the blank line."""
    first = b"data: " + content("a") + ending * 2
    at_limit = b"data: " + b"x" * 40 + ending + b"data: " + b"y" * 47
    assert len(first) < LIMIT
    assert len(at_limit) - len(ending) + 1 == LIMIT
    after = b"data: " + content("c") + ending * 2 + b"data: [DONE]" + ending * 2
    for extra, refused in ((b"", False), (b"z", True)):
        stream = first + at_limit + extra + ending * 2 + after
        for cuts in ([], [len(first) + 20], list(range(0, len(stream), 7))):
            pieces = split(stream, cuts)
            stamps = stamps_for(pieces)
            got = fed(pieces, stamps, 10**9, native=native, max_event_bytes=LIMIT)
            assert got == reference(pieces, stamps, 10**9, max_event_bytes=LIMIT)
            if refused:  # the first event counts; the long one and all after it do not
                assert got.error is not None
                assert got.error.startswith(LIMIT_ERROR)
                assert "--max-event-mib" in got.error
                assert (len(got.content_offsets_us), got.done) == (1, False)
            else:
                assert got.error is not None  # the long event is no JSON: its own error
                assert not got.error.startswith(LIMIT_ERROR)
                assert (len(got.content_offsets_us), got.done) == (2, True)


@pytest.mark.parametrize("native", IMPLS)
def test_a_refused_stream_takes_no_more_and_holds_nothing(native: bool) -> None:
    state = StreamState(0)
    feed = EventFeed(state, native=native, max_event_bytes=1000)
    assert feed.take(1, b"data: " + content("a") + b"\n\n") is False
    assert feed.take(2, b"data: " + b"x" * 600) is False
    assert feed.take(3, b"x" * 600) is True  # the event is now beyond 1000 bytes
    assert feed._decoder._pending == b""  # its bytes were let go
    assert feed.take(4, b"\n\ndata: " + content("b") + b"\n\n") is True
    feed.finish(5)
    summary = state.summary()
    assert summary.error is not None
    assert summary.error.startswith("an SSE event longer than 1000 bytes")
    assert len(summary.content_offsets_us) == 1


@pytest.mark.parametrize("native", IMPLS)
def test_an_error_in_an_earlier_event_stays_the_error(native: bool) -> None:
    error = orjson.dumps({"error": {"message": "overloaded"}})
    stream = b"data: " + error + b"\n\ndata: " + b"x" * 100 + b"\n\n"
    got = fed([stream], [1], 10**9, native=native, max_event_bytes=50)
    assert got.error == "server error in stream: overloaded"


def stampless(summary: StreamSummary) -> tuple[object, ...]:
    """What a summary says that does not depend on where the reads split the stream."""
    return (
        len(summary.content_offsets_us),
        summary.chunk_tokens,
        len(summary.reasoning_offsets_us),
        summary.usage,
        summary.finish_reason,
        summary.done,
        summary.error,
    )


_LINE = st.sampled_from(
    [
        b"data: " + content("a"),
        b"data: " + content("a" * 30),
        b"data: [DONE]",
        b": comment",
        b"data: x" * 5,
        b"event: e",
    ]
)
_END = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def long_events(draw: st.DrawFn) -> bytes:
    """Events of one to a few lines, some of them long, framed with any line ends."""
    out: list[bytes] = []
    for _ in range(draw(st.integers(0, 8))):
        lines = draw(st.lists(_LINE, min_size=1, max_size=3))
        end = draw(_END)
        out.append(end.join(lines) + end + draw(_END))
        if draw(st.integers(0, 4)) == 0:
            out.append(draw(_END))  # an extra blank line
    return b"".join(out)


@pytest.mark.parametrize("native", IMPLS)
@settings(max_examples=400, deadline=None, derandomize=True)
@given(stream=long_events(), limit=st.integers(1, 160), data=st.data())
def test_the_verdict_does_not_depend_on_the_splits(
    native: bool, stream: bytes, limit: int, data: st.DataObject
) -> None:
    """Against the reference on the same reads, and against the stream in one read."""
    pieces = split(stream, data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    stamps = stamps_for(pieces)
    got = fed(pieces, stamps, 10**9, native=native, max_event_bytes=limit)
    assert got == reference(pieces, stamps, 10**9, max_event_bytes=limit)
    whole = reference([stream], [1], 10**9, max_event_bytes=limit)
    assert stampless(got) == stampless(whole)


# ---------------------------------------------------------------- linear time
def _long_line(size: int) -> bytes:
    return b"data: " + content("x" * size) + b"\n\ndata: [DONE]\n\n"


def _cr_lines(size: int) -> bytes:
    line = b"data: " + content(" t") + b"\r"
    return line * (size // len(line)) + b"\r"


def _frame_time(stream: bytes, *, native: bool, read: int = 16 * 1024) -> float:
    """The CPU time to take ``stream`` in reads of ``read`` bytes: the best of 5."""
    best = float("inf")
    pieces = [stream[i : i + read] for i in range(0, len(stream), read)]
    for _ in range(5):
        state = StreamState(0)
        feed = EventFeed(state, native=native)
        start = time.thread_time()
        for i, piece in enumerate(pieces):
            feed.take(i, piece)
        feed.finish(len(pieces))
        best = min(best, time.thread_time() - start)
        assert state.summary().error is None
    return best


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("make", [_long_line, _cr_lines], ids=["long-line", "cr-lines"])
def test_framing_time_grows_linearly_with_the_event(
    native: bool, make: Callable[[int], bytes]
) -> None:
    """4 times the bytes in one event: about 4 times the time (16 when each read rescans
    what came before, as it did). The bound sits between the two: 10 leaves room for the
    small event fitting in a cache the large one does not (8.3x was seen on the C path under
    load) and for a noisy machine, and still fails a rescan."""
    # Sizes large enough that a millisecond of a neighbour's noise is small beside them.
    small = _frame_time(make(2 * 1024 * 1024), native=native)
    large = _frame_time(make(8 * 1024 * 1024), native=native)
    assert large / max(small, 1e-4) < 10.0, (small, large)
