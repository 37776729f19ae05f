"""From server bytes to Parquet rows, fuzzed: whatever a server streams, every request is
exactly one row and the recorder writes them all.

Each example serves one to three responses from a scripted loopback server: SSE events of
every kind with values of every JSON type where numbers and strings belong (integers far
beyond any column, negative counts, wrong types, malformed JSON, garbage lines), framed
chunked or by length, possibly cut short or answered with an error status, and written in
random pieces. The streaming client reads them on a drawn transport and feed, as a replay
does, and gives each record to a ``RunRecorder``. The properties:

- one record per request, and ``requests.parquet`` holds exactly those rows: the recorder
  never fails;
- every record fits its columns where it is built (``record_problem``), so no catch-all
  was needed (no ``unreadable response``);
- a complete, well-framed response keeps every content chunk the reference classification
  finds in its body, however the values around them were wrong.

The default run is quick; the long variant runs 10,000 examples (about 7 minutes on two
cores), so it runs only when asked: ``LOADGEN_LONG_FUZZ=1 pytest tests/loadgen/test_rows_fuzz.py``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rows import RowsHarness
from scripted import Paced

from loadgen.stream.feed import NATIVE
from loadgen.stream.sse import SSEDecoder
from loadgen.stream.state import summarize_stream
from traces import schema as s
from traces.records import record_problem

# Where a number or a string belongs, anything JSON (and Python's json) can say.
ODD_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**15, 2**31, 2**31 - 1, 2**63, 2**64, -(2**63) - 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
ANY_VALUE = st.recursive(
    ODD_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
COUNT = st.one_of(st.integers(0, 50), ANY_VALUE)
"""Usage counts: mostly plausible, often not."""
FINISH = st.one_of(st.sampled_from([None, "stop", "length"]), ANY_VALUE)


def data(obj: object) -> bytes:
    # json, not orjson: any integer size, and NaN/Infinity a strict parser refuses.
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


@st.composite
def usage(draw: st.DrawFn) -> object:
    if draw(st.integers(0, 5)) == 0:
        return draw(ANY_VALUE)
    out: dict[str, Any] = {}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if draw(st.booleans()):
            out[key] = draw(COUNT)
    if draw(st.integers(0, 3)) == 0:
        out["prompt_tokens_details"] = {"cached_tokens": draw(COUNT)}
    if draw(st.integers(0, 3)) == 0:
        out["completion_tokens_details"] = {"reasoning_tokens": draw(COUNT)}
    return out


EVENT_KINDS = [
    *("content", "content", "content", "text", "role", "reasoning", "finish", "usage"),
    *("error", "timings", "metrics", "done", "malformed", "garbage", "scalar"),
]


@st.composite
def event(draw: st.DrawFn, completion: list[int]) -> bytes:
    """One SSE event of any kind; ``completion`` carries a plausible cumulative count, so
    that runs of well-counted chunks (the C walk's fast path) happen too."""
    kind = draw(st.sampled_from(EVENT_KINDS))
    choice: dict[str, Any] = {"index": 0, "finish_reason": None}
    obj: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
    if kind == "content":
        choice["delta"] = {"content": draw(st.text(min_size=1, max_size=4))}
    elif kind == "text":
        choice["text"] = draw(st.one_of(st.text(min_size=1, max_size=4), ANY_VALUE))
    elif kind == "role":
        choice["delta"] = {"role": "assistant", "content": ""}
    elif kind == "reasoning":
        choice["delta"] = {"reasoning_content": draw(st.text(min_size=1, max_size=4))}
    elif kind == "finish":
        choice["delta"] = {}
        choice["finish_reason"] = draw(FINISH)
    elif kind == "error":
        return data({"error": {"message": draw(ANY_VALUE), "code": draw(ANY_VALUE)}})
    elif kind == "timings":
        choice["finish_reason"] = "stop"
        obj["timings"] = {"prompt_ms": draw(ANY_VALUE), "predicted_ms": draw(ANY_VALUE)}
    elif kind == "metrics":
        obj["metrics"] = {
            key: draw(ANY_VALUE) for key in ("prefill_ms", "queue_ms", "instance", "ttft_ms")
        }
    elif kind == "done":
        return b"data: [DONE]\n\n"
    elif kind == "malformed":
        return b"data: {" + draw(st.binary(max_size=12)).replace(b"\n", b"") + b"\n\n"
    elif kind == "garbage":
        return draw(st.binary(max_size=24))
    elif kind == "scalar":
        return data(draw(ANY_VALUE))
    if kind != "usage":
        obj["choices"] = [choice]
    else:
        obj["choices"] = []
    how = draw(st.integers(0, 3))
    if how == 1 and kind in ("content", "text", "reasoning"):
        completion[0] += draw(st.integers(0, 3))
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": completion[0]}
    elif how == 2 or kind == "usage":
        obj["usage"] = draw(usage())
    return data(obj)


@st.composite
def reply(draw: st.DrawFn) -> tuple[bytes | Paced, bytes | None]:  # a Reply
    """A response in random pieces, and its SSE body when it is complete and well framed
    (None when it is cut short, garbled or an error status)."""
    completion = [0]
    body = b"".join(draw(st.lists(event(completion), max_size=12)))
    framing = draw(st.sampled_from(["chunked", "chunked", "length", "cut", "status"]))
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    if framing == "status":
        head = b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
    if framing == "length" or framing == "status":
        wire = head + b"content-length: %d\r\n\r\n" % len(body) + body
    else:
        sizes = draw(st.lists(st.integers(1, 80), max_size=6))
        encoded = b""
        pos = 0
        for n in [*sizes, len(body)]:
            part = body[pos : pos + n]
            pos += len(part)
            if part:
                encoded += b"%x\r\n" % len(part) + part + b"\r\n"
        encoded += b"0\r\n\r\n"
        wire = head + b"transfer-encoding: chunked\r\n\r\n" + encoded
    complete = framing in ("chunked", "length")
    if framing == "cut":
        wire = wire[: draw(st.integers(0, len(wire) - 1))]
    cuts = sorted(draw(st.lists(st.integers(0, len(wire)), max_size=4)))
    pieces = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    steps = tuple((0.0, piece) for piece in pieces if piece)
    # A cut response ends with the connection: the client must not wait for the rest.
    return Paced(steps=steps, close=not complete), body if complete else None


def content_chunks(body: bytes) -> int:
    """Content chunks in a whole SSE body, by the reference classification."""
    decoder = SSEDecoder()
    events = [(1, payload) for payload in decoder.feed(body)]
    events += [(1, payload) for payload in decoder.flush()]
    return len(summarize_stream(events, 0).content_offsets_us)


@pytest.fixture(scope="module")
def harness() -> Iterator[RowsHarness]:
    made = RowsHarness()
    yield made
    made.close()


Reply = tuple[bytes | Paced, bytes | None]


def check(harness: RowsHarness, replies: list[Reply], kind: str, native: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        got = harness.rows_for([r for r, _ in replies], Path(tmp), kind=kind, native=native)
    assert got.failure is None, got.failure
    assert got.table is not None
    assert len(got.records) == len(replies)
    assert got.table.num_rows == len(replies)
    assert got.table.column(s.X_REQUEST_ID).to_pylist() == [r.x_request_id for r in got.records]
    for record, (_, body) in zip(got.records, replies, strict=True):
        assert record.outcome in s.OUTCOMES
        assert record_problem(record) is None, record_problem(record)
        assert not (record.error or "").startswith("unreadable response"), record.error
        if body is not None and record.outcome in (s.OUTCOME_OK, s.OUTCOME_PROTOCOL_ERROR):
            assert len(record.chunk_offsets_us) == content_chunks(body)


REPLIES = st.lists(reply(), min_size=1, max_size=3)
KINDS = st.sampled_from(["fast", "httpx"])
FEEDS = st.sampled_from([True, False] if NATIVE else [False])


@settings(max_examples=60)
@given(replies=REPLIES, kind=KINDS, native=FEEDS)
def test_every_request_is_one_row_whatever_the_server_sends(
    harness: RowsHarness, replies: list[Reply], kind: str, native: bool
) -> None:
    check(harness, replies, kind, native)


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("LOADGEN_LONG_FUZZ") != "1",
    reason="10,000 examples take minutes: set LOADGEN_LONG_FUZZ=1 to run them",
)
@pytest.mark.timeout(3600)
@settings(max_examples=10_000)
@given(replies=REPLIES, kind=KINDS, native=FEEDS)
def test_every_request_is_one_row_whatever_the_server_sends_10k(
    harness: RowsHarness, replies: list[Reply], kind: str, native: bool
) -> None:
    check(harness, replies, kind, native)
