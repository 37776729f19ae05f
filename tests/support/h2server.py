"""A tiny OpenAI-compatible HTTP/2 server (cleartext, prior knowledge) for the ``--http2``
tests: it speaks only HTTP/2, so a request that reaches it came over HTTP/2.

``GET /v1/models`` lists one model; ``POST /v1/chat/completions`` and ``/v1/completions``
answer a short SSE stream (``stream: true``) or one JSON body; anything else is 404.
Built on the ``h2`` package's sans-IO state machine over ``asyncio`` streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import orjson

MODEL = "h2-model"
TOKENS = 3


@dataclass
class H2Server:
    """What the server saw: the ``:path`` of every request, in order."""

    port: int = 0
    paths: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def _chunk(text: str | None, finish: str | None, usage: bool = False) -> bytes:
    obj: dict[str, object] = {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [
            {"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}
        ],
    }
    if usage:
        obj = {"id": "x", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": TOKENS}}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _answer(path: str, body: bytes) -> tuple[int, bytes, list[bytes]]:
    """Status, content type and the body's pieces (each sent as its own DATA frame)."""
    if path == "/v1/models":
        return 200, b"application/json", [orjson.dumps({"data": [{"id": MODEL}]})]
    if path in ("/v1/chat/completions", "/v1/completions"):
        request = orjson.loads(body)
        if request.get("stream"):
            pieces = [_chunk(f"t{i} ", None) for i in range(TOKENS)]
            pieces += [_chunk(None, "length"), _chunk(None, None, usage=True), b"data: [DONE]\n\n"]
            return 200, b"text/event-stream", pieces
        whole = {
            "choices": [{"index": 0, "message": {"content": "t"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": TOKENS},
        }
        return 200, b"application/json", [orjson.dumps(whole)]
    return 404, b"application/json", [b'{"error": "not found"}']


async def _serve(
    server: H2Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    conn.initiate_connection()
    writer.write(conn.data_to_send())
    paths: dict[int, str] = {}
    bodies: dict[int, bytearray] = {}
    try:
        while data := await reader.read(65536):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    headers = dict(event.headers)
                    path = headers[b":path"].decode()
                    paths[event.stream_id] = path
                    bodies[event.stream_id] = bytearray()
                    server.paths.append(path)
                elif isinstance(event, h2.events.DataReceived):
                    bodies[event.stream_id] += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):  # the request is complete
                    sid = event.stream_id
                    status, kind, pieces = _answer(paths[sid], bytes(bodies.pop(sid)))
                    conn.send_headers(sid, [(b":status", b"%d" % status), (b"content-type", kind)])
                    for i, piece in enumerate(pieces):
                        conn.send_data(sid, piece, end_stream=i == len(pieces) - 1)
                        writer.write(conn.data_to_send())
                        await writer.drain()
            writer.write(conn.data_to_send())
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


@asynccontextmanager
async def h2_server() -> AsyncIterator[H2Server]:
    """Serve on 127.0.0.1, port 0, in the running loop, until the block ends."""
    state = H2Server()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _serve(state, reader, writer)

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    state.port = listener.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        listener.close()
