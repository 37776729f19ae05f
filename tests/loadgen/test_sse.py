"""The SSE decoder: spec cases, and the same bytes split anywhere give the same events."""

from __future__ import annotations

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


@settings(max_examples=300, deadline=None)
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


@settings(max_examples=200, deadline=None)
@given(stream=st.binary(max_size=200), data=st.data())
def test_arbitrary_bytes_split_anywhere_are_consistent(stream: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(stream)))
    assert decode_all([stream[:cut], stream[cut:]]) == decode_all([stream])
