"""The client on the Responses API's typed events and on embeddings replies, from a real
loopback server that writes them split across reads (``scripted``): every way a reply
goes wrong is that request's row, with the deltas received kept."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from scripted import response, scripted_server

from loadgen.client import PreparedRequest, StreamingClient
from loadgen.clock import Clock
from loadgen.openai.bodies import endpoint_path
from loadgen.run.session import make_transport
from traces import schema as s
from traces.records import RunRow, TraceRequest

pytestmark = pytest.mark.serial

TRANSPORTS = ["fast", "httpx"]


def ev(kind: str, compact: bool = True, **fields: Any) -> bytes:
    data = orjson.dumps({"type": kind, **fields})
    if not compact:  # a server that writes spaced JSON: no byte fast path, same result
        data = data.replace(b'":', b'": ').replace(b',"', b', "')
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def delta(text: str, compact: bool = True) -> bytes:
    return ev("response.output_text.delta", compact, item_id="m", output_index=0, delta=text)


def completed(status: str = "completed", **response: Any) -> bytes:
    usage = {
        "input_tokens": 7,
        "input_tokens_details": {"cached_tokens": 2},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": 10,
    }
    body = {"id": "resp_1", "status": status, "usage": usage, **response}
    return ev(f"response.{status}", response=body)


CREATED = ev("response.created", response={"id": "resp_1", "status": "in_progress"})


def job(api: str) -> PreparedRequest:
    trace = TraceRequest(
        index=0, request_id="q0", arrival_s=0.0, api=api, input_tokens=7, output_tokens=3
    )
    return PreparedRequest(trace=trace, x_request_id="t-q0", path=endpoint_path(api), body=b"{}")


async def record_of(kind: str, url: str, api: str) -> RunRow:
    clock = Clock()
    transport = make_transport(kind, clock.now_ns, max_connections=1)
    records: list[RunRow] = []
    async with httpx.AsyncClient(transport=transport, timeout=5.0) as http:
        client = StreamingClient(
            http,
            base_url=url + "/v1",
            now_ns=clock.now_ns,
            run_id="t",
            timeout_s=5.0,
            transport=transport,
            max_event_bytes=4096,
        )
        await client.execute(client.ready(job(api)), clock.now_ns(), records.append)
    return records[0]


def replay_one(kind: str, body: bytes, api: str = s.API_RESPONSES, **kw: Any) -> RunRow:
    async def main() -> RunRow:
        async with scripted_server([response(body, **kw)], splits=(25, 90, 200)) as (url, _):
            return await record_of(kind, url, api)

    return asyncio.run(main())


@pytest.mark.parametrize("compact", [True, False])
@pytest.mark.parametrize("kind", TRANSPORTS)
def test_a_responses_stream_is_a_row(kind: str, compact: bool) -> None:
    reasoning = ev("response.reasoning_text.delta", compact, item_id="r", delta="hm")
    body = (
        CREATED
        + reasoning
        + delta(" a", compact)
        + delta("", compact)  # no token
        + delta(" b", compact)
        + ev("response.output_text.done", text=" a b")
        + delta(" c", compact)
        + completed()
    )
    rec = replay_one(kind, body)
    assert (rec.outcome, rec.error) == (s.OUTCOME_OK, None)
    assert len(rec.chunk_offsets_us) == 3
    assert rec.chunk_tokens is None
    assert len(rec.reasoning_offsets_us) == 1
    assert rec.first_reasoning_ns is not None
    assert rec.first_token_ns is not None
    assert rec.first_reasoning_ns <= rec.first_token_ns
    assert (rec.prompt_tokens, rec.completion_tokens) == (7, 3)
    assert (rec.cached_tokens, rec.reasoning_tokens) == (2, 1)
    assert rec.finish_reason == "completed"


@pytest.mark.parametrize(
    ("tail", "error"),
    [
        (
            ev("response.failed", response={"status": "failed", "error": {"message": "boom"}}),
            "response failed: boom",
        ),
        (ev("error", code="ERR_X", message="bad"), "server error in stream: bad (ERR_X)"),
        (b"", "stream ended without response.completed or response.incomplete"),
        (b"data: {not json\n\n", "malformed chunk"),
        (
            completed(usage={"input_tokens": "7"}),
            "usage.input_tokens = '7': not an integer",
        ),
    ],
)
def test_a_failed_responses_stream_is_an_error_row(tail: bytes, error: str) -> None:
    rec = replay_one("fast", CREATED + delta(" a") + delta(" b") + tail)
    assert rec.outcome == s.OUTCOME_PROTOCOL_ERROR
    assert rec.error is not None
    assert error in rec.error
    assert len(rec.chunk_offsets_us) == 2  # what arrived is kept


def test_an_incomplete_response_gives_its_reason() -> None:
    body = CREATED + delta(" a") + completed("incomplete", incomplete_details={"reason": "x"})
    rec = replay_one("fast", body)
    assert (rec.outcome, rec.finish_reason, rec.completion_tokens) == (s.OUTCOME_OK, "x", 3)


def _embeddings(n: int) -> bytes:
    data = [{"object": "embedding", "index": i, "embedding": [0.5, -0.5]} for i in range(n)]
    usage = {"prompt_tokens": 9, "total_tokens": 9}
    return orjson.dumps({"object": "list", "data": data, "usage": usage, "metrics": {}})


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_an_embeddings_reply_is_a_row(kind: str) -> None:
    rec = replay_one(kind, _embeddings(4), s.API_EMBEDDINGS, content_type=b"application/json")
    assert (rec.outcome, rec.error, rec.items, rec.prompt_tokens) == (s.OUTCOME_OK, None, 4, 9)
    assert rec.first_token_ns is None
    assert list(rec.chunk_offsets_us) == []
    assert rec.completion_tokens is None


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"object": "list", "data": [{"embedding', "malformed embeddings reply"),
        (b'{"data": 3}', "data = 3: not a list"),
        (b'{"data": [{"index": 0}]}', "data[0]"),
        (b"", "empty embeddings reply"),
        (b'{"error": {"message": "nope"}}', "server error: nope"),
        (_embeddings(400), "longer than 4096 bytes"),
    ],
)
def test_a_bad_embeddings_reply_is_an_error_row(body: bytes, error: str) -> None:
    rec = replay_one("fast", body, s.API_EMBEDDINGS, content_type=b"application/json")
    assert rec.outcome == s.OUTCOME_PROTOCOL_ERROR
    assert rec.error is not None
    assert error in rec.error
    assert rec.items is None


def test_request_bodies_of_the_two_apis() -> None:
    from loadgen.openai.bodies import build_body, split_words
    from traces.prompts.maker import Prompt
    from traces.runinfo import Capabilities

    caps = Capabilities()
    prompt = Prompt(text="one two three four five")
    body = orjson.loads(
        build_body(api=s.API_RESPONSES, model="m", prompt=prompt, max_tokens=9, caps=caps)
    )
    assert (body["input"], body["max_output_tokens"], body["stream"]) == (prompt.text, 9, True)
    assert "stream_options" not in body
    assert "max_tokens" not in body
    embed = orjson.loads(
        build_body(
            api=s.API_EMBEDDINGS, model="m", prompt=prompt, max_tokens=9, caps=caps, embed_batch=2
        )
    )
    assert embed == {"model": "m", "input": ["one two", "three four five"]}
    assert split_words("a b", 5) == ["a", "b"]  # never an empty item
    assert split_words("", 3) == [""]
    assert (endpoint_path(s.API_RESPONSES), endpoint_path(s.API_EMBEDDINGS)) == (
        "/responses",
        "/embeddings",
    )
