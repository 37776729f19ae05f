"""Values a server sends that a run row cannot hold: each is the request's outcome
(``protocol_error``, naming the field), the chunks before it are kept, and the recorder
writes every row. Against a scripted loopback server, on both transports and both
implementations of the feed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from feeds import IMPLS
from rows import SSE_HEAD, rows_for
from scripted import chunked, response

from traces import schema as s
from traces.records import record_problem

TRANSPORTS = ["fast", "httpx"]


def event(obj: dict[str, Any]) -> bytes:
    # json, not orjson: it writes integers of any size, as a hostile server may.
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def content(k: int, completion: object = None) -> bytes:
    """A content chunk; ``completion`` as bytes is written verbatim (more digits than
    Python converts to text)."""
    chunk: dict[str, Any] = {
        "choices": [{"index": 0, "delta": {"content": f" t{k}"}, "finish_reason": None}]
    }
    if isinstance(completion, bytes):
        chunk["usage"] = {"prompt_tokens": 5, "completion_tokens": 0}
        return event(chunk).replace(b'"completion_tokens":0', b'"completion_tokens":' + completion)
    if completion is not None:
        chunk["usage"] = {"prompt_tokens": 5, "completion_tokens": completion}
    return event(chunk)


def finish(reason: object) -> bytes:
    return event({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})


def usage(**counts: object) -> bytes:
    return event({"choices": [], "usage": counts})


DONE = b"data: [DONE]\n\n"
ROLE = event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
THREE = ROLE + content(1) + content(2) + content(3)

CASES = {
    "finish_reason 7": (THREE + finish(7) + DONE, "finish_reason = 7: not a string"),
    "finish_reason {}": (THREE + finish({}) + DONE, "finish_reason = {}: not a string"),
    "finish_reason []": (THREE + finish([]) + DONE, "finish_reason = []: not a string"),
    "finish_reason true": (THREE + finish(True) + DONE, "finish_reason = True: not a string"),
    "completion_tokens 2**63": (
        THREE + finish("stop") + usage(prompt_tokens=5, completion_tokens=2**63) + DONE,
        "usage.completion_tokens = 9223372036854775808: does not fit int32",
    ),
    "completion_tokens 10**30": (
        THREE + finish("stop") + usage(completion_tokens=10**30) + DONE,
        "usage.completion_tokens = 1000000000000000019884624838656: does not fit int32",
    ),
    "completion_tokens '3'": (
        THREE + finish("stop") + usage(completion_tokens="3") + DONE,
        "usage.completion_tokens = '3': not an integer",
    ),
    "cached_tokens true": (
        THREE + finish("stop") + usage(prompt_tokens_details={"cached_tokens": True}) + DONE,
        "usage.prompt_tokens_details.cached_tokens = True: not an integer",
    ),
    "a chunk of 2**31 tokens": (
        ROLE
        + content(1, 1)
        + content(2, 2**31 + 1)
        + content(3, 2**31 + 2)
        + finish("stop")
        + DONE,
        "chunk_tokens = 2147483648 for chunk 1: does not fit int16",
    ),
    "a chunk of 2**15 tokens": (
        ROLE
        + content(1, 1)
        + content(2, 2**15 + 1)
        + content(3, 2**15 + 2)
        + finish("stop")
        + DONE,
        "chunk_tokens = 32768 for chunk 1: does not fit int16",
    ),
    "a count of 5,000 digits": (
        ROLE
        + content(1, 1)
        + content(2, b"9" * 5000)
        + content(3, b"9" * 5000)
        + finish("stop")
        + DONE,
        "chunk_tokens = 9999999999999999999 for chunk 1: does not fit int16",
    ),
}


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("kind", TRANSPORTS)
@pytest.mark.parametrize("case", list(CASES))
def test_a_value_no_column_holds_is_a_protocol_error_with_its_chunks(
    case: str, kind: str, native: bool, tmp_path: Path
) -> None:
    body, error = CASES[case]
    fine = THREE + finish("stop") + usage(prompt_tokens=5, completion_tokens=3) + DONE
    got = asyncio.run(
        rows_for([response(body), response(fine)], tmp_path, kind=kind, native=native)
    )
    assert got.failure is None
    assert got.table is not None
    assert got.table.num_rows == 2  # the recorder wrote both rows
    bad, good = got.table.to_pylist()
    assert (bad["outcome"], bad["error"], bad["http_status"]) == (
        s.OUTCOME_PROTOCOL_ERROR,
        error,
        200,
    )
    assert len(bad["chunk_offsets_us"]) == 3  # the chunks received are kept
    assert (good["outcome"], good["error"], len(good["chunk_offsets_us"])) == (
        s.OUTCOME_OK,
        None,
        3,
    )
    assert all(record_problem(r) is None for r in got.records)


def test_the_repr_of_a_huge_value_is_bounded(tmp_path: Path) -> None:
    body = THREE + finish("x" * 100 + "y") + finish(["z" * 10_000]) + DONE
    got = asyncio.run(rows_for([response(body)], tmp_path))
    assert got.table is not None
    (row,) = got.table.to_pylist()
    assert row["outcome"] == s.OUTCOME_PROTOCOL_ERROR
    assert row["error"].startswith("finish_reason = ['zzzz")
    assert row["error"].endswith("(10004 chars): not a string")
    assert len(row["error"]) < 120


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("kind", TRANSPORTS)
def test_a_good_chunk_in_the_same_read_as_bad_framing_is_kept(
    kind: str, native: bool, tmp_path: Path
) -> None:
    """One write, so one read: a well-framed chunk holding two content events, then bytes
    that are no chunk size. The events before the fault were sent: they count."""
    framed = chunked(ROLE + content(1) + content(2))[: -len(b"0\r\n\r\n")]
    reply = SSE_HEAD + framed + b"\xff\xff\r\n"
    got = asyncio.run(rows_for([reply], tmp_path, kind=kind, native=native))
    assert got.table is not None
    (row,) = got.table.to_pylist()
    # Both transports: h11's parse error is told from a close (``stamping.classified``).
    assert row["outcome"] == s.OUTCOME_PROTOCOL_ERROR
    assert row["error"].startswith("MalformedResponse: malformed HTTP response")
    assert len(row["chunk_offsets_us"]) == 2
