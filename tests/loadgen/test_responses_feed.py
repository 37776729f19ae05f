"""``ResponsesFeed`` (reads counted in bulk when every event is a compact text delta) leaves
the same ``ResponsesState`` as the per-event reference, however the stream is split."""

from __future__ import annotations

import random

import orjson

from loadgen.stream.feed import EventFeed
from loadgen.stream.responses import ResponsesFeed, ResponsesState
from loadgen.stream.sse import event_data
from loadgen.stream.state import StreamSummary


def _ev(kind: str, spaced: bool = False, **fields: object) -> bytes:
    data = orjson.dumps({"type": kind, **fields})
    if spaced:
        data = data.replace(b'":', b'": ')
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def _delta(text: str, spaced: bool = False) -> bytes:
    return _ev("response.output_text.delta", spaced, item_id="m", output_index=0, delta=text)


BODY = (
    _ev("response.created", response={"status": "in_progress"})
    + b": keep-alive comment\n\n"
    + _ev("response.reasoning_text.delta", delta="hm")
    + b"".join(_delta(f" w{i}") for i in range(6))
    + _delta("")
    + _delta(" spaced", spaced=True)
    + b'data: {"type":"response.output_text.delta","delta":" no event line"}\n\n'
    + b"".join(_delta(f" v{i}") for i in range(4))
    + _ev(
        "response.completed",
        response={"status": "completed", "usage": {"input_tokens": 4, "output_tokens": 12}},
    )
)


def _bulk(reads: list[bytes]) -> StreamSummary:
    state = ResponsesState(0)
    feed = ResponsesFeed(state)
    for i, data in enumerate(reads):
        feed.take(i * 1000, data)
    feed.finish(len(reads) * 1000)
    return state.summary()


def _reference(reads: list[bytes]) -> StreamSummary:
    state = ResponsesState(0)
    feed = EventFeed(state, native=False)
    for i, data in enumerate(reads):
        feed.take(i * 1000, data)
    feed.finish(len(reads) * 1000)
    return state.summary()


def test_the_bulk_feed_is_the_reference_on_every_split() -> None:
    whole = _reference([BODY])
    assert len(whole.content_offsets_us) == 12  # the empty delta is no token
    assert len(whole.reasoning_offsets_us) == 1
    assert whole.done
    assert (whole.usage and whole.usage.completion_tokens) == 12
    for cut in range(1, len(BODY)):
        reads = [BODY[:cut], BODY[cut:]]
        assert _bulk(reads) == _reference(reads), cut
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(BODY)), 12))
        reads = [BODY[a:b] for a, b in zip([0, *cuts], [*cuts, len(BODY)], strict=True)]
        assert _bulk(reads) == _reference(reads)


def test_an_event_line_before_one_data_line_is_read_as_the_general_rule() -> None:
    for block in (b"event: x\ndata: {}", b"event: x\ndata:{}", b"event: x\ndata: a\ndata: b"):
        lines = [line for line in block.split(b"\n") if line.startswith(b"data:")]
        expected = b"\n".join(line[5:].removeprefix(b" ") for line in lines)
        assert event_data(block) == expected
