"""Both implementations of ``loadgen.stream.feed`` (the C walk and the reference) against
the per-event reference.

The reference is what the client did before any fast path: ``SSEDecoder.feed`` per read,
one ``(ts, data)`` per event, ``summarize_stream``. For any bytes split into reads at any
points, every way of feeding them (``EventFeed``, ``add_read`` per read, ``summarize_reads``)
must give the same ``StreamSummary`` on both implementations; the strategies mix every kind
of chunk (and bytes that only look like them) so that runs of plain content are interrupted
anywhere. The fuzz is derandomized: the same examples on every run.
"""

from __future__ import annotations

import orjson
import pytest
from feeds import IMPLS, SENT_NS, fed, reference, split, stamps_for
from fuzzsize import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.stream.feed import NATIVE, Read, add_read, summarize_reads
from loadgen.stream.sse import SSEDecoder, decode_blocks
from loadgen.stream.state import StreamState, StreamSummary

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1795953908, "model": "m"}


def raw_reads(pieces: list[bytes], stamps: list[int], end_ns: int) -> list[Read]:
    dec = SSEDecoder()
    reads: list[Read] = []
    for ts, data in zip(stamps, pieces, strict=True):
        got = dec.feed_raw(data)
        if got:
            reads.append((ts, got))
    tail = dec.flush()
    if tail:
        reads.append((end_ns, tail))
    return reads


def incremental(reads: list[Read], *, native: bool) -> StreamSummary:
    """One ``feed_raw`` result at a time, as they arrive."""
    state = StreamState(SENT_NS)
    for ts, got in reads:
        add_read(state, ts, got, native=native)
    return state.summary()


def every_way(
    pieces: list[bytes], stamps: list[int], end_ns: int, *, native: bool
) -> StreamSummary:
    """The summary of one implementation, the same whichever way the reads are fed."""
    reads = raw_reads(pieces, stamps, end_ns)
    summary = summarize_reads(reads, SENT_NS, native=native)
    assert incremental(reads, native=native) == summary
    assert fed(pieces, stamps, end_ns, native=native) == summary
    return summary


def assert_same_as_reference(stream: bytes, cuts: list[int], *, native: bool) -> None:
    """Split into reads at ``cuts``: the implementation's summary is the per-event one."""
    pieces = split(stream, cuts)
    stamps = stamps_for(pieces)
    assert every_way(pieces, stamps, 10**9, native=native) == reference(pieces, stamps, 10**9)


def usage(completion: object) -> dict[str, object]:
    return {"prompt_tokens": 7, "total_tokens": 9, "completion_tokens": completion}


tokens_value: st.SearchStrategy[object] = st.one_of(
    st.integers(0, 300),
    st.integers(0, 2**64 - 1),
    st.integers(-(2**63), -1),
    st.sampled_from(["5", None, 1.5, 7.0, True, False, [], {}]),
)
"""Usage counts, of every JSON type and beyond every column's range."""
odd_finish = st.sampled_from([7, 0, {}, [], True, False, 1.5, ["stop"], {"a": 1}])
"""``finish_reason`` values that are no string: ``summary`` leaves them out and says so."""


@st.composite
def json_chunk(draw: st.DrawFn) -> bytes:
    """A compact (orjson) chunk of any kind a server sends."""
    kind = draw(
        st.sampled_from(
            [
                *("chat", "chat", "chat", "text", "llama", "role", "reasoning", "finish"),
                *("usage", "error", "empty", "tool", "timings", "reasoning2"),
            ]
        )
    )
    text = draw(st.text(max_size=6))
    finish = draw(st.one_of(st.sampled_from([None, None, None, "length", "stop"]), odd_finish))
    obj: dict[str, object] = dict(HEAD)
    if kind == "chat":
        obj["choices"] = [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]
    elif kind == "text":
        obj["choices"] = [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]
    elif kind == "llama":
        obj = {"choices": [{"finish_reason": finish, "index": 0, "delta": {"content": text}}]}
        obj.update(HEAD)
    elif kind == "role":
        obj["choices"] = [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        ]
    elif kind == "reasoning":
        obj["choices"] = [{"index": 0, "delta": {"reasoning_content": text}, "finish_reason": None}]
    elif kind == "finish":
        obj["choices"] = [{"index": 0, "delta": {}, "finish_reason": finish or "stop"}]
    elif kind == "usage":
        obj["choices"] = []
        obj["metrics"] = {"queue_ms": 1.0, "prefill_ms": 2.0}
    elif kind == "timings":  # llama.cpp's last chunk
        obj["choices"] = [{"index": 0, "delta": {}, "finish_reason": finish or "stop"}]
        obj["timings"] = {"prompt_n": 5, "prompt_ms": 4.5, "predicted_ms": 9.25}
    elif kind == "reasoning2":
        obj["choices"] = [{"index": 0, "delta": {"reasoning": text}, "finish_reason": None}]
    elif kind == "error":
        obj = {"error": {"message": text, "code": 500}}
    elif kind == "empty":
        obj["choices"] = [{"index": 0, "delta": {"content": ""}, "finish_reason": None}]
    else:  # a tool call: OpenAI's first delta (id, name), an arguments fragment, or both
        call: dict[str, object] = {"index": 0, "function": {"arguments": text}}
        if draw(st.booleans()):
            call.update(id="call_1", type="function", function={"name": "f", "arguments": ""})
        delta: dict[str, object] = {"tool_calls": draw(st.sampled_from([[call], [], None]))}
        if draw(st.booleans()):
            delta["content"] = draw(st.sampled_from([None, "", text]))
        obj["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    if kind != "error":
        how = draw(st.integers(0, 3))
        if how == 1:
            obj["usage"] = None  # OpenAI's chunks before the last, with include_usage
        elif how >= 2:
            obj["usage"] = usage(draw(tokens_value))
    return orjson.dumps(obj)


FRAGMENTS = [
    b'"delta":{"content":"',
    b'"text":"',
    b'"finish_reason":null',
    b'"completion_tokens":',
    b'"completion_tokens":7',
    b'"completion_tokens":007',
    b'"completion_tokens":12345678901234567890123',
    b'"completion_tokens":' + b"9" * 5000,  # more digits than int() reads
    b'"finish_reason":"stop"',
    b'{"content":"',
    b'"next":"a',
    b'_reason":null',
    b'_tokens":3',
    b'"',
    b"x",
    b"{",
    b"}",
    b",",
    b"[DONE]",
    b"data: ",
]


@st.composite
def odd_payload(draw: st.DrawFn) -> bytes:
    """Bytes built from the keys the byte checks look for: mostly not JSON at all."""
    return b"".join(draw(st.lists(st.sampled_from(FRAGMENTS), max_size=8)))


@st.composite
def plain_chunks(draw: st.DrawFn) -> list[bytes]:
    """Plain content chunks of one layout, with cumulative usage or without."""
    layout = draw(st.sampled_from(["chat", "text", "llama"]))
    usage_kind = draw(st.sampled_from(["cumulative", "none", "fixed", "odd"]))
    out: list[bytes] = []
    completion = draw(st.integers(0, 2**64 - 100))
    for _ in range(draw(st.integers(1, 12))):
        text = draw(st.text(min_size=1, max_size=4))
        if layout == "chat":
            choice = {"index": 0, "delta": {"content": text}, "finish_reason": None}
            obj: dict[str, object] = {**HEAD, "choices": [choice]}
        elif layout == "text":
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": None}
            obj = {**HEAD, "choices": [choice]}
        else:
            choice = {"finish_reason": None, "index": 0, "delta": {"content": text}}
            obj = {"choices": [choice], **HEAD}
        completion += draw(st.integers(0, 3))
        if usage_kind == "cumulative":
            obj["usage"] = usage(completion)
        elif usage_kind == "fixed":
            obj["usage"] = usage(5)
        elif usage_kind == "odd":
            obj["usage"] = usage(draw(tokens_value))
        out.append(orjson.dumps(obj))
    return out


@st.composite
def near_plain(draw: st.DrawFn, line: bytes) -> bytes:
    """A plain content line changed where the byte checks look: a key removed, renamed or
    emptied, a fragment inserted anywhere (a second usage key, say) and maybe more, or cut
    short."""
    how = draw(st.integers(0, 5))
    if how == 0:
        return line.replace(b'"finish_reason":null', b'"stop_reason":null')
    if how == 1:
        return line.replace(b'{"content":"', b'{"content":""').replace(b'"text":"', b'"text":""')
    if how == 2:
        return line.replace(draw(st.sampled_from(FRAGMENTS)), b"")
    if how == 3:
        return line[: draw(st.integers(0, len(line)))]
    cut = draw(st.integers(0, len(line)))
    line = line[:cut] + draw(st.sampled_from(FRAGMENTS)) + line[cut:]
    return draw(near_plain(line)) if draw(st.booleans()) else line


@st.composite
def sse_stream(draw: st.DrawFn) -> bytes:
    """Events of every kind, mostly plain content in long runs, framed in every way."""
    plain = draw(plain_chunks())
    one = plain[0]
    out: list[bytes] = []
    for _ in range(draw(st.integers(0, 30))):
        pick = draw(st.integers(0, 21))
        if pick < 10:
            out.extend(b"data: " + p + b"\n\n" for p in plain)
        elif pick < 12:
            out.append(b"data: " + draw(json_chunk()) + b"\n\n")
        elif pick < 14:
            out.append(b"data: " + draw(odd_payload()) + b"\n\n")
        elif pick == 14:
            out.append(b"data: [DONE]\n\n")
        elif pick == 15:  # multi-line data, or data without the space
            out.append(b"data: " + one + b"\ndata:" + one + b"\n\n")
        elif pick == 16:  # comments and extra blank lines
            out.append(draw(st.sampled_from([b": ping\n\n", b"\n", b"\n\n\n", b"event: x\n"])))
        elif pick == 17:
            out.append(b"data: " + one + draw(st.sampled_from([b"\r\n\r\n", b"\r\r", b"\n"])))
        else:
            out.append(b"data: " + draw(near_plain(one)) + b"\n\n")
    if draw(st.booleans()) and out:
        out[-1] = out[-1].rstrip(b"\n")  # no final blank line: flush dispatches it
    return b"".join(out)


@pytest.mark.parametrize("native", IMPLS)
@settings(max_examples=examples(400), deadline=None, derandomize=True)
@given(stream=sse_stream(), data=st.data())
def test_summary_equals_per_event_reference(
    native: bool, stream: bytes, data: st.DataObject
) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    assert_same_as_reference(stream, cuts, native=native)


@pytest.mark.skipif(not NATIVE, reason="loadgen.stream._sse_scan is not built")
@settings(max_examples=examples(300), deadline=None, derandomize=True)
@given(stream=sse_stream(), data=st.data())
def test_c_and_reference_agree_on_the_same_split_bytes(stream: bytes, data: st.DataObject) -> None:
    """Both implementations on one example at a time, whatever Hypothesis draws for each
    parametrized run above."""
    pieces = split(stream, data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    stamps = stamps_for(pieces)
    c = fed(pieces, stamps, 10**9, native=True)
    assert c == fed(pieces, stamps, 10**9, native=False)
    assert c == reference(pieces, stamps, 10**9)


@st.composite
def raw_stream(draw: st.DrawFn) -> bytes:
    parts = draw(
        st.lists(
            st.sampled_from(
                [b"data: a", b"data: b", b"data:c", b"\n", b"\r", b"\r\n", b": c", b"x"]
            ),
            max_size=30,
        )
    )
    return b"".join(parts)


@pytest.mark.parametrize("native", IMPLS)
@settings(max_examples=examples(400), deadline=None, derandomize=True)
@given(stream=st.one_of(raw_stream(), sse_stream(), st.binary(max_size=120)), data=st.data())
def test_feed_raw_decodes_to_what_feed_returns(
    native: bool, stream: bytes, data: st.DataObject
) -> None:
    """``feed_raw`` (whose framing the C walk repeats) against ``feed``, and the feed of
    the same reads against the reference."""
    pieces = split(stream, data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    ref, raw = SSEDecoder(), SSEDecoder()
    for piece in pieces:
        assert decode_blocks(raw.feed_raw(piece)) == ref.feed(piece)
    assert raw.flush() == ref.flush()
    stamps = stamps_for(pieces)
    assert fed(pieces, stamps, 10**9, native=native) == reference(pieces, stamps, 10**9)


def vllm_stream(n: int, *, continuous: bool, api: str = "chat") -> bytes:
    chunks: list[dict[str, object]] = [
        {**HEAD, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    ]
    for k in range(1, n + 1):
        if api == "chat":
            choice: dict[str, object] = {"index": 0, "delta": {"content": f" t{k}"}}
        else:
            choice = {"index": 0, "text": f" t{k}"}
        choice.update({"logprobs": None, "finish_reason": None})
        chunk: dict[str, object] = {**HEAD, "choices": [choice]}
        if continuous:
            chunk["usage"] = usage(k)
        chunks.append(chunk)
    chunks.append({**HEAD, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    chunks.append({**HEAD, "choices": [], "usage": usage(n)})
    events = [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks]
    return b"".join(events) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("paced", [False, True], ids=["bursts", "paced"])
@pytest.mark.parametrize("continuous", [True, False])
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_plain_runs_skip_the_per_event_path(
    continuous: bool, api: str, paced: bool, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The C walk adds plain content runs without ``StreamState.add`` (the point of it);
    the reference calls it once per event. Both give the reference's summary."""
    calls = 0
    add = StreamState.add

    def counting_add(self: StreamState, ts: int, payload: bytes) -> None:
        nonlocal calls
        calls += 1
        add(self, ts, payload)

    monkeypatch.setattr(StreamState, "add", counting_add)
    stream = vllm_stream(200, continuous=continuous, api=api)
    if paced:  # one event per read, as when tokens come slower than the client reads
        ends = [i + 2 for i in range(len(stream) - 1) if stream[i : i + 2] == b"\n\n"]
        pieces = split(stream, ends[:-1])
    else:
        pieces = split(stream, [len(stream) // 3, len(stream) // 2])
    stamps = [1_000_000 * (i + 2) for i in range(len(pieces))]
    reads = raw_reads(pieces, stamps, 10**9)
    summary = summarize_reads(reads, SENT_NS, native=native)
    events = 200 + 4  # role, finish, usage, [DONE]
    assert calls <= 4 + 2 * 3 if native else calls == events  # 2 * 3: read boundaries
    calls = 0
    assert incremental(reads, native=native) == summary
    assert calls <= 4 + 2 * 3 if native else calls == events
    calls = 0
    assert fed(pieces, stamps, 10**9, native=native) == summary
    assert calls <= 3 + 2 * 3 if native else calls == events  # C takes [DONE] itself
    assert len(summary.content_offsets_us) == 200
    assert summary.chunk_tokens == ([1] * 200 if continuous else None)
    assert summary == reference(pieces, stamps, 10**9)


INSERTS = [*FRAGMENTS, b"1", b"23", b"0", b'\\"', b"\n", b"\n\n", b"data: "]
KEYS = [b'"finish_reason":null', b'"completion_tokens":', b'"delta":{"content":"', b'"text":"']


@st.composite
def changed_line(draw: st.DrawFn, line: bytes) -> bytes:
    """``line`` with one change where the byte checks look: inside, before or after one
    of its keys (a digit or a newline splitting it, a second copy, the key removed or its
    value changed), or a fragment inserted anywhere."""
    keys = [k for k in KEYS if line.find(k) >= 0]
    how = draw(st.integers(0, 6))
    if how == 6:  # into the content string, between the prefix and the tail lines share
        start = max(line.find(b'"content":"'), line.find(b'"text":"'))
        if start >= 0:
            cut = draw(st.integers(start + 8, len(line)))
            return line[:cut] + draw(st.sampled_from([b"\n", b"\n\n", *KEYS])) + line[cut:]
    if how in (0, 6) or not keys:
        cut = draw(st.integers(0, len(line)))
        return line[:cut] + draw(st.sampled_from(INSERTS)) + line[cut:]
    key = draw(st.sampled_from(keys))
    at = line.find(key)
    if how == 1:  # split the key
        cut = at + draw(st.integers(1, len(key) - 1))
        return line[:cut] + draw(st.sampled_from([b"7", b"\n", b'"'])) + line[cut:]
    if how == 2:  # a second copy anywhere
        cut = draw(st.integers(0, len(line)))
        return line[:cut] + key + draw(st.sampled_from([b"", b"5", b"null"])) + line[cut:]
    if how == 3:
        return line.replace(key, b"", 1)
    if how == 4:  # the value after the key
        end = at + len(key)
        return line[:end] + draw(st.sampled_from([b'"', b"null,", b'"stop",', b"9"])) + line[end:]
    return line.replace(key, key + key, 1)


@st.composite
def template_run(draw: st.DrawFn) -> bytes:
    """Plain content lines of one layout, some changed where the byte checks look
    (``changed_line``): near misses of plain content inside a run of it."""
    lines = [b"data: " + p for p in draw(plain_chunks())]
    out = [draw(changed_line(line)) if draw(st.integers(0, 3)) == 0 else line for line in lines]
    return b"\n\n".join(out) + draw(st.sampled_from([b"\n\n", b"\n\ndata: [DONE]\n\n", b""]))


@pytest.mark.parametrize("native", IMPLS)
@settings(max_examples=examples(1500), deadline=None, derandomize=True)
@given(stream=template_run(), data=st.data())
def test_template_runs_equal_per_event_reference(
    native: bool, stream: bytes, data: st.DataObject
) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=4))
    assert_same_as_reference(stream, cuts, native=native)


def _changed(continuous: bool, changes: dict[int, tuple[bytes, bytes]]) -> bytes:
    lines = vllm_stream(12, continuous=continuous).split(b"\n\n")
    for i, (old, new) in changes.items():
        assert lines[i].find(old) >= 0
        lines[i] = lines[i].replace(old, new, 1)
    return b"\n\n".join(lines)


FIN = b'"finish_reason":null'
TOK = b'"completion_tokens":'


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize(
    ("continuous", "changes"),
    [
        (False, {5: (b'" t5"', b'" t\n5"')}),  # a newline inside one line
        (True, {5: (b'" t5"', b'" t\n5"')}),
        (False, {5: (FIN, b'"finish_reason":"stop"')}),  # a finished chunk in the run
        (False, {5: (FIN, b'"finish_reason":nul')}),  # no finish key, not JSON
        (False, {5: (b'"delta":{"content":"', b'"delta":{"contents":"')}),  # no content key
        (True, {5: (FIN, b'"finish_reason":nu7ll')}),  # a digit inside a key...
        (True, {5: (FIN, FIN + FIN), 7: (FIN, b'"finish_reason":nu7ll')}),  # ...made up for
        (True, {5: (FIN, FIN + FIN), 7: (FIN, b'"finish_reason":nul')}),
        (True, {5: (FIN, TOK + b"1," + FIN), 7: (TOK, b'"completion_tok1ens":')}),
        (True, {5: (TOK, TOK + b"12345678901234567890")}),  # a count beyond 19 digits
        (False, {5: (b'{"content":"', b'{"content":""')}),  # empty content
        (True, {1: (b'" t1"', b'" t1' + FIN + b'"')}),  # the first line's template itself
        (True, {5: (b',"usage":', b'\ndata: ,"usage":')}),  # usage on a second data line
    ],
    ids=[
        "newline",
        "newline-usage",
        "finish-stop",
        "finish-broken",
        "content-key-renamed",
        "digit-in-key",
        "two-keys-and-none",
        "two-keys-and-none-usage",
        "usage-two-and-none",
        "usage-long",
        "empty-content",
        "odd-first-line",
        "usage-second-line",
    ],
)
def test_near_miss_lines(
    continuous: bool, changes: dict[int, tuple[bytes, bytes]], native: bool
) -> None:
    """Hand-made lines that must not be taken for plain content, or that make the run's
    token counts unknown or unreadable in C."""
    stream = _changed(continuous, changes)
    for cuts in ([], [len(stream) // 2], [len(stream) // 3, 2 * len(stream) // 3]):
        assert_same_as_reference(stream, cuts, native=native)


@pytest.mark.parametrize("native", IMPLS)
@settings(max_examples=examples(300), deadline=None, derandomize=True)
@given(
    stream=st.one_of(st.binary(max_size=300), raw_stream(), odd_payload().map(b"data: ".__add__)),
    data=st.data(),
)
def test_arbitrary_bytes_equal_per_event_reference(
    native: bool, stream: bytes, data: st.DataObject
) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=6))
    assert_same_as_reference(stream, cuts, native=native)
