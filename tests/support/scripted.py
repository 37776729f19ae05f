"""A loopback HTTP/1.1 server that writes scripted responses, split and paced as asked, so
the client under test sees the reads a real network produces (on the test path via
pytest's ``pythonpath``; not a test module)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


def chunked(body: bytes, sizes: Sequence[int] = ()) -> bytes:
    """``body`` as a chunked transfer encoding: chunks of ``sizes``, then the rest."""
    out = b""
    pos = 0
    for n in sizes:
        part = body[pos : pos + n]
        pos += n
        if part:
            out += f"{len(part):x}\r\n".encode() + part + b"\r\n"
    if pos < len(body):
        rest = body[pos:]
        out += f"{len(rest):x}\r\n".encode() + rest + b"\r\n"
    return out + b"0\r\n\r\n"


def response(
    body: bytes,
    *,
    sizes: Sequence[int] = (),
    close: bool = False,
    status: bytes = b"200 OK",
    content_type: bytes = b"text/event-stream",
) -> bytes:
    """A whole chunked response."""
    head = b"HTTP/1.1 " + status + b"\r\ncontent-type: " + content_type + b"\r\n"
    head += b"transfer-encoding: chunked\r\n"
    if close:
        head += b"connection: close\r\n"
    return head + b"\r\n" + chunked(body, sizes)


@dataclass(frozen=True, slots=True)
class Paced:
    """A reply written in steps: each ``(delay_s, data)`` after sleeping ``delay_s``; the
    connection is closed after the last when ``close`` (else kept for the next request)."""

    steps: tuple[tuple[float, bytes], ...]
    close: bool = False


@dataclass(slots=True)
class ServerLog:
    """What the server saw: each request's bytes, and connections accepted. ``idle`` is set
    while no connection is open, so a test can wait for its handlers to finish before the
    server closes (a handler cancelled at loop shutdown is logged as an error by 3.11)."""

    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)


@asynccontextmanager
async def scripted_server(
    replies: Sequence[bytes | Paced],
    *,
    splits: Sequence[int] = (),
    close_after: bool = False,
    ssl_ctx: ssl.SSLContext | None = None,
) -> AsyncIterator[tuple[str, ServerLog]]:
    """Serve ``replies`` in order, one per request on any connection. A plain ``bytes``
    reply is written in pieces cut at ``splits``, 2 ms apart."""
    log = ServerLog()
    log.idle.set()
    queue = list(replies)

    async def write_reply(writer: asyncio.StreamWriter, reply: bytes | Paced) -> bool:
        if isinstance(reply, Paced):
            for delay_s, data in reply.steps:
                await asyncio.sleep(delay_s)
                writer.write(data)
                await writer.drain()
            return reply.close
        pos = 0
        for i, cut in enumerate([*splits, len(reply)]):
            if i:
                await asyncio.sleep(0.002)
            writer.write(reply[pos:cut])
            await writer.drain()
            pos = cut
        return close_after

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        log.connections += 1
        log.open_now += 1
        log.idle.clear()
        log.most_open = max(log.most_open, log.open_now)
        try:
            while queue:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                log.requests.append(head + body)
                if await write_reply(writer, queue.pop(0)):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            log.open_now -= 1
            if not log.open_now:
                log.idle.set()
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ssl_ctx)
    port = server.sockets[0].getsockname()[1]
    scheme = "https" if ssl_ctx else "http"
    try:
        yield f"{scheme}://127.0.0.1:{port}", log
    finally:
        server.close()
        await server.wait_closed()
