"""The streaming client against a scripted loopback server, on both transports.

The fast transport's path (requests encoded from a template, ``FastTransport.open``, one
timer per exchange) and httpx's (``httpx.Request``, ``asyncio.timeout``) must record the
same rows: outcome, error text, status, chunks and usage, and stamps in causal order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from feeds import IMPLS
from hypothesis import given, settings
from hypothesis import strategies as st
from scripted import Paced, chunked, response, scripted_server

from loadgen.client import PreparedRequest, StreamingClient
from loadgen.clock import Clock
from loadgen.http.pool import FastTransport, RequestTemplate, Timeouts, encode
from loadgen.http.stamping import Progress
from loadgen.run.session import make_transport
from loadgen.stream.feed import NATIVE
from traces import schema as s
from traces.records import RunRow, TraceRequest

pytestmark = pytest.mark.serial

TRANSPORTS = ["fast", "httpx"]
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def usage(n: int) -> dict[str, int]:
    return {"prompt_tokens": 5, "total_tokens": 5 + n, "completion_tokens": n}


def event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps({**HEAD, **chunk}) + b"\n\n"


ROLE = event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})


def token(k: int) -> bytes:
    choice = {"index": 0, "delta": {"content": f" t{k}"}, "finish_reason": None}
    return event({"choices": [choice], "usage": usage(k)})


def tail(n: int) -> bytes:
    finish = event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    return finish + event({"choices": [], "usage": usage(n)}) + b"data: [DONE]\n\n"


def stream(n: int) -> bytes:
    return ROLE + b"".join(token(k) for k in range(1, n + 1)) + tail(n)


def job(i: int = 0, xid: str | None = None) -> PreparedRequest:
    trace = TraceRequest(
        index=i, request_id=f"q{i}", arrival_s=0.0, input_tokens=5, output_tokens=3
    )
    return PreparedRequest(
        trace=trace, x_request_id=xid or f"t-q{i}", path="/chat/completions", body=b'{"a":1}'
    )


async def records_of(
    kind: str,
    url: str,
    jobs: list[PreparedRequest],
    *,
    timeout_s: float = 5.0,
    read_s: float | None = None,
    native: bool = NATIVE,
) -> list[RunRow]:
    """Send ``jobs`` one after the other, as the replay does (``ready`` first); ``native``
    picks the implementation that classifies the bodies (``loadgen.stream.feed``)."""
    clock = Clock()
    transport = make_transport(kind, clock.now_ns, max_connections=4)
    read = read_s if read_s is not None else timeout_s
    limits = httpx.Timeout(connect=timeout_s, read=read, write=timeout_s, pool=None)
    records: list[RunRow] = []
    async with httpx.AsyncClient(transport=transport, timeout=limits) as http:
        client = StreamingClient(
            http,
            base_url=url + "/v1",
            now_ns=clock.now_ns,
            run_id="t",
            timeout_s=timeout_s,
            transport=transport,
            native_feed=native,
        )
        for j in jobs:
            await client.execute(client.ready(j), clock.now_ns(), records.append)
    return records


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("kind", TRANSPORTS)
def test_a_stream_is_recorded_with_causal_stamps(kind: str, native: bool) -> None:
    body = stream(3)

    async def main() -> tuple[list[RunRow], list[bytes]]:
        replies = [response(body, sizes=[len(ROLE), len(token(1))])] * 2
        async with scripted_server(replies, splits=(60, 400)) as (url, log):
            got = await records_of(kind, url, [job(0), job(1)], native=native)
        return got, log.requests

    (first, second), requests = run(main())
    for rec in (first, second):
        assert (rec.outcome, rec.error, rec.http_status) == (s.OUTCOME_OK, None, 200)
        assert list(rec.chunk_tokens or ()) == [1, 1, 1]
        assert len(rec.chunk_offsets_us) == 3
        assert (rec.completion_tokens, rec.prompt_tokens, rec.finish_reason) == (3, 5, "length")
        stamps = [
            rec.sent_ns,
            rec.request_written_ns,
            rec.headers_ns,
            rec.first_byte_ns,
            rec.first_token_ns,
            rec.end_ns,
        ]
        assert all(x is not None for x in stamps)
        assert stamps == sorted(stamps), stamps
    # The first request opened the connection; the second reused it.
    assert first.connect_start_ns is not None
    assert first.connected_ns is not None
    assert first.connect_start_ns <= first.connected_ns <= (first.request_written_ns or 0)
    assert second.connect_start_ns is None
    assert second.connected_ns is None
    head = requests[0].split(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"post /v1/chat/completions http/1.1\r\n")
    for line in (b"x-request-id: t-q0", b"content-length: 7", b"accept: text/event-stream"):
        assert line in head.split(b"\r\n"), line
    assert requests[0].endswith(b'\r\n\r\n{"a":1}')


def test_both_transports_and_both_feeds_record_the_same_row() -> None:
    """Each transport with each implementation of the feed (the C walk where it is built,
    and the reference)."""
    body = stream(5)
    natives = [True, False] if NATIVE else [False]

    async def main() -> list[RunRow]:
        out: list[RunRow] = []
        for kind in TRANSPORTS:
            for native in natives:
                async with scripted_server([response(body)]) as (url, _):
                    out += await records_of(kind, url, [job(0)], native=native)
        return out

    first, *others = run(main())
    timeless = {"sent_ns", "due_ns", "end_ns", "chunk_offsets_us"}
    for other in others:
        for name in RunRow._fields:
            if name in timeless or name.endswith("_ns"):
                continue
            assert getattr(first, name) == getattr(other, name), name
        assert len(other.chunk_offsets_us) == 5
    assert len(first.chunk_offsets_us) == 5


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_an_http_error_is_a_row_with_the_servers_message(kind: str) -> None:
    error = orjson.dumps({"error": {"message": "model is overloaded", "code": 503}})
    reply = response(error, status=b"503 Service Unavailable", content_type=b"application/json")

    async def main() -> list[RunRow]:
        async with scripted_server([reply, response(stream(1))]) as (url, _):
            return await records_of(kind, url, [job(0), job(1)])

    failed, fine = run(main())
    assert failed.outcome == s.OUTCOME_HTTP_ERROR
    assert failed.http_status == 503
    assert failed.error == "HTTP 503: model is overloaded"
    assert list(failed.chunk_offsets_us) == []
    assert fine.outcome == s.OUTCOME_OK  # the connection went back to the pool cleanly


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("kind", TRANSPORTS)
def test_a_disconnect_mid_body_keeps_the_chunks_it_got(kind: str, native: bool) -> None:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    partial = chunked(ROLE + token(1) + token(2))[: -len(b"0\r\n\r\n")]
    reply = Paced(steps=((0.0, head), (0.01, partial)), close=True)

    async def main() -> list[RunRow]:
        async with scripted_server([reply]) as (url, _):
            return await records_of(kind, url, [job(0)], native=native)

    (rec,) = run(main())
    assert rec.outcome == s.OUTCOME_DISCONNECT
    assert rec.http_status == 200
    assert len(rec.chunk_offsets_us) == 2
    assert rec.error is not None
    assert "RemoteProtocolError" in rec.error


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("kind", TRANSPORTS)
def test_the_whole_request_times_out_even_while_bytes_keep_coming(kind: str, native: bool) -> None:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    steps = [(0.0, head + chunked(ROLE)[:-5])]
    steps += [(0.05, chunked(token(k))[:-5]) for k in range(1, 41)]  # 2 s of tokens
    reply = Paced(steps=tuple(steps))

    async def main() -> list[RunRow]:
        async with scripted_server([reply]) as (url, _):
            return await records_of(kind, url, [job(0)], timeout_s=0.4, native=native)

    (rec,) = run(main())
    assert rec.outcome == s.OUTCOME_TIMEOUT
    assert rec.error == "no complete response within 0.4 s"
    assert 2 <= len(rec.chunk_offsets_us) <= 10
    assert rec.end_ns is not None
    assert rec.sent_ns is not None
    assert 0.35e9 <= rec.end_ns - rec.sent_ns <= 1.5e9


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_a_silent_server_is_a_read_timeout(kind: str) -> None:
    reply = Paced(steps=((1.5, response(stream(1))),))

    async def main() -> list[RunRow]:
        async with scripted_server([reply]) as (url, _):
            return await records_of(kind, url, [job(0)], timeout_s=5.0, read_s=0.2)

    (rec,) = run(main())
    assert rec.outcome == s.OUTCOME_TIMEOUT
    assert rec.error is not None
    assert rec.error.startswith("ReadTimeout")
    assert rec.end_ns is not None
    assert rec.sent_ns is not None
    assert rec.end_ns - rec.sent_ns < 1.2e9


def test_a_request_id_httpx_must_check_is_not_templated() -> None:
    async def main() -> list[bytes]:
        async with scripted_server([response(stream(1))] * 2) as (url, log):
            records = await records_of("fast", url, [job(0, "plain-id"), job(1, "tab\there")])
        assert [r.outcome for r in records] == [s.OUTCOME_OK] * 2
        return log.requests

    plain, tabbed = run(main())
    assert b"x-request-id: plain-id\r\n" in plain
    assert b"\r\nx-request-id: tab\there\r\n" in tabbed


def _header_lines(wire: bytes) -> tuple[bytes, list[bytes], bytes]:
    head, _, body = wire.partition(b"\r\n\r\n")
    first, *lines = head.split(b"\r\n")
    return first, sorted(line.lower() for line in lines), body


HEADER_NAMES = st.sampled_from(["x-tenant", "authorization", "accept", "user-agent", "x-a"])
VALUES = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    headers=st.dictionaries(HEADER_NAMES, VALUES, max_size=4),
    xid=VALUES,
    body=st.binary(max_size=64),
    path=st.sampled_from(["/chat/completions", "/completions"]),
)
def test_a_template_encodes_what_httpx_would_send(
    headers: dict[str, str], xid: str, body: bytes, path: str
) -> None:
    http = httpx.AsyncClient(headers={"x-client": "c"})
    build: Callable[[str, bytes], httpx.Request] = lambda rid, content: http.build_request(  # noqa: E731
        "POST",
        "http://h.example:8080/v1" + path,
        content=content,
        headers={**headers, "x-request-id": rid},
    )
    template = RequestTemplate.of(build("placeholder", b""))
    out = template.encode(xid, body)
    assert out is not None
    reference = encode(build(xid, body), body)
    assert out.origin == reference.origin == ("http", "h.example", 8080)
    assert _header_lines(out.data) == _header_lines(reference.data)


def test_connection_slots_are_shared_first_come_first_served() -> None:
    """``max_connections=1``: requests wait for the one slot; one whose deadline passes
    while waiting fails with TimeoutError, one cancelled while waiting gives up its turn,
    and the slot still serves the rest."""

    async def main() -> None:
        clock = Clock()
        transport = FastTransport(clock.now_ns, max_connections=1)
        replies = [Paced(steps=((0.15, response(stream(1))),))] + [response(stream(1))] * 3
        async with scripted_server(replies) as (url, log):
            http = httpx.AsyncClient(transport=transport)
            template = RequestTemplate.of(http.build_request("POST", url + "/v1/x", content=b""))

            async def send(deadline_s: float | None = None) -> int:
                out = template.encode("id", b"{}")
                assert out is not None
                deadline = clock.now_ns() + int(deadline_s * 1e9) if deadline_s else None
                ex = await transport.open(out, Progress(clock.now_ns), Timeouts(), deadline)
                await ex.aread()
                return ex.status

            first = asyncio.create_task(send())
            await asyncio.sleep(0.02)  # the first holds the slot for 150 ms
            late = asyncio.create_task(send(deadline_s=0.05))
            cancelled = asyncio.create_task(send())
            waiting = asyncio.create_task(send())
            await asyncio.sleep(0.02)
            cancelled.cancel()
            with pytest.raises(TimeoutError, match="no complete response"):
                await late
            assert await first == 200
            assert await waiting == 200
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            assert await send() == 200
            await http.aclose()
        assert log.most_open == 1
        assert transport.connections_in_use == 0

    run(main())
