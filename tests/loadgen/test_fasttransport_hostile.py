"""The fast transport against responses that break the rules: what the exchange makes of
each (issue 19, items 4 and 5), through httpx's API and ``FastTransport.open``, with
chunked bodies decoded by ``loadgen.http._chunked`` and by httptools
(``conftest.body_decoder``). The servers are real loopback ones (``scripted``,
``hostile``).
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from hostile import SCENARIOS, chunk, hostile_server

from loadgen.clock import Clock
from loadgen.http import connection as http11
from loadgen.http.connection import MalformedResponse
from loadgen.http.pool import FastTransport
from loadgen.http.stamping import STAMPED

pytestmark = pytest.mark.usefixtures("body_decoder")

SSE = b"data: one\n\ndata: two\n\ndata: [DONE]\n\n"
POST = b"POST /v1/x HTTP/1.1\r\nhost: h\r\ncontent-length: 2\r\n\r\n{}"


async def body_of(client: httpx.AsyncClient, url: str) -> tuple[int, bytes]:
    async with client.stream("POST", url + "/v1/x", content=b"{}") as resp:
        data = b"".join([piece async for _, piece in resp.extensions[STAMPED].stamped()])
        return resp.status_code, data


def fast() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=FastTransport(Clock().now_ns))


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


def test_the_c_decoder_is_used_when_built(body_decoder: str) -> None:
    """The parametrization is real: httptools alone when the C decoder is switched off."""
    assert (http11._Dechunker is None) == (body_decoder == "httptools")
    assert chunk(b"ab") == b"2\r\nab\r\n"
