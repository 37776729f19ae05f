"""The SSE decoder: spec cases, and the same bytes split anywhere give the same events.

The C walk (``loadgen.stream._sse_scan``) frames reads itself, so the same cases also go
through ``EventFeed`` on both implementations, with chunks as the events' data, and must
give the summary of the decoder's events.
"""

from __future__ import annotations

import orjson
import pytest
from feeds import IMPLS, fed, reference, split, stamps_for
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.stream.sse import SSEDecoder


def decode_all(chunks: list[bytes]) -> list[bytes]:
    dec = SSEDecoder()
    out: list[bytes] = []
    for c in chunks:
        out.extend(dec.feed(c))
    out.extend(dec.flush())
    return out


def test_single_events_and_done() -> None:
    stream = b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n'
    assert decode_all([stream]) == [b'{"a":1}', b'{"b":2}', b"[DONE]"]


def test_line_endings_comments_and_fields() -> None:
    stream = b": keep-alive\r\n\r\nevent: x\r\nid: 3\r\ndata: one\r\ndata:two\r\n\r\ndata: z\r\r"
    assert decode_all([stream]) == [b"one\ntwo", b"z"]


def test_event_without_data_is_not_dispatched() -> None:
    assert decode_all([b"event: ping\n\n: comment\n\n"]) == []


def test_incomplete_event_waits_for_blank_line() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"data: par") == []
    assert dec.feed(b"tial\n") == []
    assert dec.feed(b"\n") == [b"partial"]


def test_flush_dispatches_unterminated_final_event() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"data: a\n\ndata: [DONE]") == [b"a"]
    assert dec.flush() == [b"[DONE]"]


payload = st.binary(min_size=0, max_size=40).map(
    lambda b: b.replace(b"\n", b"").replace(b"\r", b"")
)
line_end = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def sse_streams(draw: st.DrawFn) -> bytes:
    parts: list[bytes] = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["data", "comment", "field", "multi"]))
        end = draw(line_end)
        if kind == "comment":
            parts.append(b":" + draw(payload) + end + end)
        elif kind == "field":
            parts.append(b"event: e" + end + b"data: " + draw(payload) + end + end)
        elif kind == "multi":
            parts.append(b"data: " + draw(payload) + end + b"data:" + draw(payload) + end + end)
        else:
            parts.append(b"data: " + draw(payload) + end + end)
    return b"".join(parts)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(stream=sse_streams(), data=st.data())
def test_split_points_do_not_change_events(stream: bytes, data: st.DataObject) -> None:
    whole = decode_all([stream])
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    pieces = []
    prev = 0
    for c in [*cuts, len(stream)]:
        pieces.append(stream[prev:c])
        prev = c
    assert decode_all(pieces) == whole


@settings(max_examples=200, deadline=None, derandomize=True)
@given(stream=st.binary(max_size=200), data=st.data())
def test_arbitrary_bytes_split_anywhere_are_consistent(stream: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(stream)))
    assert decode_all([stream[:cut], stream[cut:]]) == decode_all([stream])


def content(k: int) -> bytes:
    """A compact content chunk with cumulative usage ``k``: each one's place shows in the
    summary (its read's stamp, its token delta)."""
    choice = {"index": 0, "delta": {"content": f" t{k}"}, "finish_reason": None}
    return orjson.dumps({"choices": [choice], "usage": {"completion_tokens": k * k}})


C1, C2 = content(1), content(2)
SPEC_CASES = {
    "events-and-done": ([b"data: " + C1 + b"\n\ndata: " + C2 + b"\n\ndata: [DONE]\n\n"], 2),
    "line-endings-comments-fields": (
        [
            b": keep-alive\r\n\r\nevent: x\r\nid: 3\r\ndata: "
            + C1[:20]
            + b"\r\ndata:"
            + C1[20:]
            + b"\r\n\r\ndata: "
            + C2
            + b"\r\r"
        ],
        2,
    ),
    "no-data-no-event": ([b"event: ping\n\n: comment\n\n"], 0),
    "waits-for-blank-line": ([b"data: " + C1[:9], C1[9:] + b"\n", b"\n"], 1),
    "flush-dispatches-the-last": ([b"data: " + C1 + b"\n\ndata: " + C2], 2),
    "crlf-split-across-reads": (
        [b"data: " + C1 + b"\r", b"\n\r", b"\ndata: " + C2 + b"\r\n\r\n"],
        2,
    ),
}


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize(("pieces", "events"), SPEC_CASES.values(), ids=SPEC_CASES.keys())
def test_feed_frames_the_spec_cases_as_the_decoder_does(
    pieces: list[bytes], events: int, native: bool
) -> None:
    stamps = stamps_for(pieces)
    summary = fed(pieces, stamps, 10**9, native=native)
    assert summary == reference(pieces, stamps, 10**9)
    assert len(summary.content_offsets_us) == events


chunk_payload = st.one_of(
    st.integers(0, 40).map(content),
    st.sampled_from([b"[DONE]", b'{"choices":[],"usage":{"completion_tokens":3}}', b"{}"]),
    payload,
)


@st.composite
def chunk_streams(draw: st.DrawFn) -> bytes:
    """``sse_streams``' framing with chunks (and arbitrary bytes) as the events' data."""
    parts: list[bytes] = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["data", "data", "comment", "field", "multi"]))
        end = draw(line_end)
        if kind == "comment":
            parts.append(b":" + draw(payload) + end + end)
        elif kind == "field":
            parts.append(b"event: e" + end + b"data: " + draw(chunk_payload) + end + end)
        elif kind == "multi":
            one = draw(chunk_payload)
            cut = draw(st.integers(0, len(one)))
            parts.append(b"data: " + one[:cut] + end + b"data:" + one[cut:] + end + end)
        else:
            parts.append(b"data: " + draw(chunk_payload) + end + end)
    return b"".join(parts)


@pytest.mark.parametrize("native", IMPLS)
@settings(max_examples=300, deadline=None, derandomize=True)
@given(stream=chunk_streams(), data=st.data())
def test_split_points_do_not_change_the_summary(
    native: bool, stream: bytes, data: st.DataObject
) -> None:
    pieces = split(stream, data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    stamps = stamps_for(pieces)
    assert fed(pieces, stamps, 10**9, native=native) == reference(pieces, stamps, 10**9)
