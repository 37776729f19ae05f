"""The fast transport against responses that break the rules: what the exchange makes of
each (issue 19, items 4 and 5), through httpx's API and ``FastTransport.open``, with
chunked bodies decoded by ``loadgen.http._chunked`` and by httptools
(``conftest.body_decoder``). The servers are real loopback ones (``scripted``,
``hostile``); the client's outcomes for the same scenarios are in ``test_hostile.py``.
"""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import pytest
from hostile import SCENARIOS, chat_stream, chunk, hostile_server
from scripted import Paced, response, scripted_server

from loadgen.clock import Clock
from loadgen.http import connection as http11
from loadgen.http.connection import MAX_HEAD_BYTES
from loadgen.http.exchange import Exchange
from loadgen.http.pool import FastTransport, Outgoing, Timeouts, origin_of
from loadgen.http.stamping import STAMPED, MalformedResponse, Progress, read_head

pytestmark = [pytest.mark.usefixtures("body_decoder"), pytest.mark.serial]

SSE = b"data: one\n\ndata: two\n\ndata: [DONE]\n\n"
POST = b"POST /v1/x HTTP/1.1\r\nhost: h\r\ncontent-length: 2\r\n\r\n{}"


async def body_of(client: httpx.AsyncClient, url: str) -> tuple[int, bytes]:
    async with client.stream("POST", url + "/v1/x", content=b"{}") as resp:
        data = b"".join([piece async for _, piece in resp.extensions[STAMPED].stamped()])
        return resp.status_code, data


def fast() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=FastTransport(Clock().now_ns))


# ---------------------------------------------------------------- interim responses
@pytest.mark.parametrize("split", [False, True], ids=["one-read", "two-reads"])
@pytest.mark.parametrize("interim", [b"100 Continue\r\n", b"103 Early Hints\r\nlink: </a>\r\n"])
def test_interim_responses_are_skipped(interim: bytes, split: bool) -> None:
    """Issue 19: ``100 Continue`` then 200 was recorded as status 100."""
    final = response(SSE, sizes=(5, 7))
    first = b"HTTP/1.1 " + interim + b"\r\n"
    reply = Paced(steps=((0.0, first), (0.01, final))) if split else first + final

    async def main() -> None:
        async with scripted_server([reply, response(SSE)]) as (url, log), fast() as client:
            async with client.stream("POST", url + "/v1/x", content=b"{}") as resp:
                assert resp.status_code == 200
                assert "link" not in resp.headers  # the interim response's headers
                assert b"".join([p async for _, p in resp.extensions[STAMPED].stamped()]) == SSE
            assert await body_of(client, url) == (200, SSE)
            assert log.connections == 1  # the response ended cleanly: kept alive

    asyncio.run(main())


def test_an_unasked_protocol_switch_is_malformed() -> None:
    reply = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\nconnection: upgrade\r\n\r\nxyz"

    async def main() -> None:
        async with scripted_server([reply]) as (url, _), fast() as client:
            with pytest.raises(MalformedResponse, match="switched protocols"):
                await body_of(client, url)

    asyncio.run(main())


# ---------------------------------------------------------------- close-delimited bodies
@pytest.mark.parametrize("name", ["close_delimited", "http10"])
def test_a_body_ended_by_a_clean_close_is_whole(name: str) -> None:
    """Issue 19: recorded as ``disconnect`` (6 of 6). The connection is not reused."""

    async def main() -> None:
        async with hostile_server(SCENARIOS[name]) as (url, log), fast() as client:
            for _ in range(2):
                assert await body_of(client, url) == (200, chat_stream(3))
        assert log.requests == 2

    asyncio.run(main())


def test_a_length_delimited_body_cut_by_a_close_is_still_a_disconnect() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n"
    reply = Paced(steps=((0.0, head + b"data: one\n\n"),), close=True)

    async def main() -> None:
        async with scripted_server([reply]) as (url, _), fast() as client:
            with pytest.raises(httpx.RemoteProtocolError, match="complete message body") as info:
                await body_of(client, url)
            assert not isinstance(info.value, MalformedResponse)

    asyncio.run(main())


# ---------------------------------------------------------------- malformed responses
def test_garbage_is_a_malformed_response() -> None:
    """Issue 19: recorded as ``disconnect``; the server did not go away, it broke HTTP."""

    async def main() -> None:
        async with hostile_server(SCENARIOS["garbage"]) as (url, _), fast() as client:
            with pytest.raises(MalformedResponse, match="malformed HTTP response"):
                await body_of(client, url)

    asyncio.run(main())


def test_the_chunks_before_a_bad_one_in_the_same_read_are_delivered() -> None:
    """Issue 19: a valid chunk in the same read as a bad one was dropped."""

    async def main() -> None:
        got: list[bytes] = []
        async with (
            hostile_server(SCENARIOS["bad_chunk"]) as (url, _),
            fast() as client,
            client.stream("POST", url + "/v1/x", content=b"{}") as resp,
        ):
            with pytest.raises(MalformedResponse, match=r"(?i)invalid character in chunk size"):
                await resp.extensions[STAMPED].drain(lambda ts, data: got.append(data))
        assert b"".join(got).count(b"data: ") == 2

    asyncio.run(main())


def test_a_head_that_never_ends_is_refused_at_the_cap() -> None:
    """A head is read up to MAX_HEAD_BYTES (and one read); the server is hung up on."""

    async def main() -> None:
        size = 1024 * MAX_HEAD_BYTES
        async with hostile_server(SCENARIOS["endless_head"], size) as (url, log), fast() as client:
            with pytest.raises(MalformedResponse, match="response head longer than 64 KiB"):
                await body_of(client, url)
        assert log.hung_up == 1
        assert log.written < size // 8

    asyncio.run(main())


# ---------------------------------------------------------------- a consumer that stops
async def reads_until_enough(client: httpx.AsyncClient, url: str) -> int:
    """Drain a body with a sink that has seen enough after its first read."""
    reads: list[int] = []

    def enough(ts: int, data: bytes) -> bool:
        reads.append(len(data))
        return True

    async with client.stream("POST", url + "/v1/x", content=b"{}") as resp:
        await resp.extensions[STAMPED].drain(enough)
    return len(reads)


def test_a_sink_that_has_seen_enough_ends_the_body_and_the_connection() -> None:
    async def main() -> None:
        scenario = SCENARIOS["endless_error"]
        size = 64 * 1024 * 1024
        async with hostile_server(scenario, size) as (url, log), fast() as client:
            for _ in range(2):
                assert await reads_until_enough(client, url) == 1
        assert (log.requests, log.hung_up) == (2, 2)  # a connection each, both cut
        assert log.written < size

    asyncio.run(main())


@pytest.mark.parametrize(("size", "cut"), [(10_000, False), (3 * 1024 * 1024, True)])
def test_read_head_keeps_the_head_and_counts_up_to_the_cap(size: int, cut: bool) -> None:
    async def main() -> None:
        async with (
            hostile_server(SCENARIOS["huge_error"], size) as (url, _),
            fast() as client,
            client.stream("POST", url + "/v1/x", content=b"{}") as resp,
        ):
            head = await read_head(resp.extensions[STAMPED], keep=4096, cap=1024 * 1024)
        assert head.data == b"x" * 4096
        assert head.cut is cut
        if cut:
            assert 1024 * 1024 <= head.received < size
            assert re.search(r"cut after 1\.\d MiB read: connection closed", head.note())
        else:
            assert head.received == size
            assert head.note() == " [body of 10000 bytes, first 4096 bytes kept]"

    asyncio.run(main())


# ---------------------------------------------------------------- the overall deadline
def _busy(seconds: float) -> None:
    """The CPU time a consumer spends on what it read (the loop is held meanwhile)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def consume(exchange: Exchange) -> None:
    """Read the body through ``stamped()`` at about 1 GB/s."""
    async for _, data in exchange.stamped():
        _busy(len(data) / 1e9)


def test_a_body_that_never_pauses_still_ends_at_the_deadline() -> None:
    """Read through ``stamped()``: the deadline's timer could fire while the consumer was
    busy with bytes already in, and a wait that started after the deadline was let
    through (an endless error body read whole: 53 s past a 25 s deadline)."""

    async def main() -> None:
        clock = Clock()
        transport = FastTransport(clock.now_ns)
        async with hostile_server(SCENARIOS["endless_error"], 1 << 40) as (url, _):
            origin = origin_of(httpx.URL(url))
            start = clock.now_ns()
            exchange = await transport.open(
                Outgoing(origin, POST),
                Progress(clock.now_ns),
                Timeouts(read_s=5.0, total_s=0.3),
                deadline_ns=start + 300_000_000,
            )
            with pytest.raises(TimeoutError, match=r"within 0\.3 s"):
                await consume(exchange)
            assert clock.now_ns() - start < 3e9
            await transport.aclose()

    asyncio.run(main())


def test_the_c_decoder_is_used_when_built(body_decoder: str) -> None:
    """The parametrization is real: httptools alone when the C decoder is switched off."""
    assert (http11._Dechunker is None) == (body_decoder == "httptools")
    assert chunk(b"ab") == b"2\r\nab\r\n"
