"""A loopback server that breaks the rules on purpose, one named scenario per way (on the
test path via pytest's ``pythonpath``, and imported by ``bench/hostile.py``; not a test
module).

Each scenario is a function of a size (the scale of its hostility: the bytes of the
endless body, of the long line, ...) that makes the reply the server writes to every
request: its pieces, written in order and each drained before the next, so that a reply
of any size holds one piece at a time in memory (the same block object is written again
and again). The tests run the scenarios at a few MiB, the benchmark at the sizes of
issue 19 (hundreds of MiB); "endless" means as long as ``size`` or until the client hangs
up, whichever is first. The server listens on ``127.0.0.1`` port 0, answers every
request on a connection with the scenario's reply, and closes the connection after it
when the reply says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from itertools import chain, repeat

import orjson

BLOCK = 64 * 1024
"""The bytes of one piece of a long body."""

_FILL = b"x" * BLOCK
_OK_SSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
_CHUNKED = b"transfer-encoding: chunked\r\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """What the server writes for one request: ``pieces`` in order (each drained before
    the next: a reply of any size is held one piece at a time), then it closes the
    connection when ``close``."""

    pieces: Iterable[bytes]
    close: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """One hostile behaviour: ``reply(size)`` builds the reply; ``default_size`` is the
    size the tests use when they do not choose one."""

    name: str
    about: str
    reply: Callable[[int], Reply]
    default_size: int = 4 * 1024 * 1024


# ---------------------------------------------------------------- bodies of the scenarios
def chunk(data: bytes) -> bytes:
    """``data`` as one chunk of the chunked coding."""
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"


def sse_event(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def content_chunk(text: str) -> dict[str, object]:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": None}
    return {"object": "chat.completion.chunk", "choices": [choice]}


FINISH = sse_event(
    {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
)
DONE = b"data: [DONE]\n\n"


def chat_stream(tokens: int) -> bytes:
    """A complete, well-formed chat stream of ``tokens`` content chunks."""
    return b"".join(sse_event(content_chunk(f" t{k}")) for k in range(tokens)) + FINISH + DONE


def _filled(size: int, frame: Callable[[bytes], bytes] = bytes) -> Iterator[bytes]:
    """``size`` bytes of filler in blocks of ``BLOCK``, each passed through ``frame``."""
    left = size
    while left > 0:
        block = _FILL if left >= BLOCK else _FILL[:left]
        yield frame(block)
        left -= len(block)


def _endless_error(size: int) -> Reply:
    head = b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\n" + _CHUNKED
    return Reply(pieces=chain([head + b"\r\n"], _filled(size, chunk), [LAST_CHUNK]))


def _huge_error(size: int) -> Reply:
    head = b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\n"
    return Reply(pieces=chain([head + b"content-length: %d\r\n\r\n" % size], _filled(size)))


def _long_line(size: int) -> Reply:
    """One content chunk whose text is ``size`` bytes long: one ``data:`` line of it."""
    before, after = orjson.dumps(content_chunk("\x00")).split(b"\\u0000")
    head = [_OK_SSE + _CHUNKED + b"\r\n", chunk(b"data: " + before)]
    tail = [chunk(after + b"\n\n" + FINISH + DONE), LAST_CHUNK]
    return Reply(pieces=chain(head, _filled(size, chunk), tail))


_CR_LINE = b"data: " + orjson.dumps(content_chunk(" t")) + b"\r"


def _cr_only(size: int) -> Reply:
    """``data:`` lines of ``size`` bytes in all, each ended by a lone CR: a CR ends a line,
    two end an event, so this is one event that grows to the end, where a second CR ends
    it."""
    lines = _CR_LINE * (BLOCK // len(_CR_LINE))
    count = max(1, size // len(lines))
    tail = b"\r" + FINISH.replace(b"\n", b"\r") + DONE.replace(b"\n", b"\r")
    body = repeat(chunk(lines), count)
    return Reply(pieces=chain([_OK_SSE + _CHUNKED + b"\r\n"], body, [chunk(tail), LAST_CHUNK]))


def _close_delimited(size: int) -> Reply:
    """HTTP/1.1, no Content-Length and no chunking: the body ends when the server closes."""
    return Reply(pieces=[_OK_SSE + b"\r\n", chat_stream(3)])


def _http10(size: int) -> Reply:
    """HTTP/1.0 without Content-Length: the body ends when the server closes."""
    return Reply(
        pieces=[b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n", chat_stream(3)]
    )


def _garbage(size: int) -> Reply:
    return Reply(pieces=[b"\x16\x03\x01 this is not HTTP at all\r\n\r\n\x00\xff" * 4])


def _redirect(size: int) -> Reply:
    head = b"HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:9/v1/elsewhere\r\n"
    return Reply(pieces=[head + b"content-length: 0\r\n\r\n"], close=False)


def _continue(size: int) -> Reply:
    """``100 Continue`` first, in a read of its own, then the real response."""
    body = chunk(chat_stream(3)) + LAST_CHUNK
    return Reply(pieces=[b"HTTP/1.1 100 Continue\r\n\r\n", _OK_SSE + _CHUNKED + b"\r\n" + body])


def _bad_chunk(size: int) -> Reply:
    """Two good chunks and a malformed chunk size, written at once: one read."""
    good = chunk(sse_event(content_chunk(" a"))) + chunk(sse_event(content_chunk(" b")))
    return Reply(pieces=[_OK_SSE + _CHUNKED + b"\r\n" + good + b"zz\r\nnot hex\r\n"])


def _endless_head(size: int) -> Reply:
    """A status line, then header lines of ``size`` bytes in all, never the blank line."""
    line = b"x-pad: " + b"p" * 1000 + b"\r\n"
    lines = line * (BLOCK // len(line))
    return Reply(pieces=chain([b"HTTP/1.1 200 OK\r\n"], repeat(lines, max(1, size // len(lines)))))


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="endless_error", about="a 500 whose chunked body goes on", reply=_endless_error
        ),
        Scenario(name="huge_error", about="a 500 with a Content-Length body", reply=_huge_error),
        Scenario(name="long_line", about="one SSE data line of `size` bytes", reply=_long_line),
        Scenario(name="cr_only", about="`size` bytes of CR-ended lines, one event", reply=_cr_only),
        Scenario(
            name="close_delimited", about="HTTP/1.1 body ended by close", reply=_close_delimited
        ),
        Scenario(name="http10", about="HTTP/1.0 body ended by close", reply=_http10),
        Scenario(name="garbage", about="bytes that are not HTTP", reply=_garbage),
        Scenario(name="redirect", about="302 Found", reply=_redirect),
        Scenario(name="continue", about="100 Continue, then 200", reply=_continue),
        Scenario(name="bad_chunk", about="good chunks and a bad one in one read", reply=_bad_chunk),
        Scenario(name="endless_head", about="header lines that never end", reply=_endless_head),
    )
}
"""Every scenario by name (the order of issue 19's table)."""


# ---------------------------------------------------------------- the server
@dataclass(slots=True)
class HostileLog:
    """What the server did: requests read, bytes written, and replies cut short because the
    client hung up (what a bounded client does to an endless body)."""

    requests: int = 0
    written: int = 0
    hung_up: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)


@asynccontextmanager
async def hostile_server(
    scenario: Scenario, size: int | None = None
) -> AsyncIterator[tuple[str, HostileLog]]:
    """Serve ``scenario`` at ``size`` (its default when None) on ``127.0.0.1`` port 0;
    yields the base URL and the log. Waits for its connections to end before closing."""
    scale = scenario.default_size if size is None else size
    log = HostileLog()
    log.idle.set()
    open_now = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now
        open_now += 1
        log.idle.clear()
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                log.requests += 1
                reply = scenario.reply(scale)
                for piece in reply.pieces:
                    writer.write(piece)
                    await writer.drain()
                    log.written += len(piece)
                if reply.close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            log.hung_up += 1
        finally:
            open_now -= 1
            if not open_now:
                log.idle.set()
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", log
    finally:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                await log.idle.wait()
        server.close()
        await server.wait_closed()


@contextlib.contextmanager
def hostile_server_thread(
    scenario: Scenario, size: int | None = None
) -> Iterator[tuple[str, HostileLog]]:
    """``hostile_server`` on an event loop of its own in a thread: the client under test
    (another process, or this one's main loop) then pays none of the server's work."""
    ready: list[tuple[str, HostileLog]] = []
    started = threading.Event()
    loop = asyncio.new_event_loop()
    stop = loop.create_future()

    async def serve() -> None:
        async with hostile_server(scenario, size) as served:
            ready.append(served)
            started.set()
            await stop

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    if not started.wait(10.0):
        raise RuntimeError("the hostile server did not start")
    try:
        yield ready[0]
    finally:
        loop.call_soon_threadsafe(stop.set_result, None)
        thread.join(10.0)
        loop.close()
