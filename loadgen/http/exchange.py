"""One request and its streamed response on a fast-transport connection: ``Exchange``.

Filled by the connection (``loadgen.http.connection``) as bytes arrive, each read a
stamped piece; read by the consumer once the head is in: ``status``, ``headers``, the body
as stamped reads (``stamped()``, ``drain``, ``aread``), under one ``ReadDeadline``. Raises
httpx's exception types, as an httpx transport does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import httpx

from loadgen.http.deadline import ReadDeadline
from loadgen.http.headers import RawHeaders
from loadgen.http.stamping import Progress

if TYPE_CHECKING:
    from loadgen.http.connection import Connection


class Exchange(httpx.AsyncByteStream):
    """One request and its response on a connection: filled by the protocol as bytes
    arrive, read by the consumer once the head is in (``status``, ``raw_headers``,
    ``progress``; the body as stamped reads: ``stamped()``, ``drain``, ``aread``).
    Closing it (``close``, or the end of ``stamped``/``drain``/``aread``) gives the
    connection back to its pool."""

    __slots__ = (
        "_closed",
        "_release",
        "buffered",
        "chunks",
        "complete",
        "conn",
        "deadline",
        "draining",
        "error",
        "headers_done",
        "keep_alive",
        "progress",
        "raw_headers",
        "sink",
        "status",
        "waiter",
    )

    def __init__(
        self,
        conn: Connection,
        headers_done: asyncio.Future[None],
        progress: Progress,
        release: Callable[[Connection, bool], None],
        deadline: ReadDeadline | None,
    ) -> None:
        self.conn = conn
        self.status = 0
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.headers_done = headers_done
        self.progress = progress
        self.chunks: deque[tuple[int, bytes]] = deque()
        self.buffered = 0
        self.complete = False
        self.keep_alive = False
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.sink: Callable[[int, bytes], bool | None] | None = None
        """While set (``drain``), each read goes straight to it instead of ``chunks``."""
        self.deadline = deadline
        """The read timeout and overall deadline (None: no limit)."""
        self.draining: ReadDeadline | None = None
        """While draining (``drain``), the deadline each read restarts."""
        self._release = release
        self._closed = False

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the consumer's side
    @property
    def headers(self) -> RawHeaders:
        return RawHeaders(self.raw_headers)

    async def _wait(self) -> None:
        """Until the protocol wakes this body (bytes, the end, an error) or it times out."""
        waiter = asyncio.get_running_loop().create_future()
        self.waiter = waiter
        if self.deadline is not None:
            self.deadline.waiting(waiter)
        try:
            await waiter
        finally:
            self.waiter = None

    async def stamped(self) -> AsyncIterator[tuple[int, bytes]]:
        conn = self.conn
        chunks = self.chunks
        try:
            while True:
                while chunks:
                    item = chunks.popleft()
                    conn.consumed(len(item[1]))
                    yield item
                if self.complete:
                    return
                if self.error is not None:
                    raise self.error
                await self._wait()
        finally:
            self.close()

    async def drain(self, sink: Callable[[int, bytes], bool | None]) -> None:
        """Give ``sink`` each read's ``(arrival_ns, bytes)``, as ``stamped()`` yields them,
        until the body ends; raises what ``stamped()`` raises. A sink that answers True
        has seen enough: the body ends there (the connection is closed, nothing more is
        read) and ``drain`` returns.

        ``sink`` runs inside the protocol's ``data_received``: no task switch and no future
        per read, only one wait for the whole body (each read restarts the read timeout).
        It must be quick and must not raise (that fails the exchange).
        """
        conn = self.conn
        try:
            chunks = self.chunks
            while chunks:
                stamp, data = chunks.popleft()
                conn.consumed(len(data))
                if sink(stamp, data):
                    conn.stop_reading(self)
                    return
            self.sink = sink
            self.draining = self.deadline
            while not self.complete:
                if self.error is not None:
                    raise self.error
                await self._wait()
            if self.error is not None:  # the sink failed on the last read
                raise self.error
        finally:
            self.sink = None
            self.draining = None
            self.close()

    async def aread(self) -> bytes:
        """The whole body (an error response's, say), then the connection goes back."""
        return b"".join([data async for _, data in self.stamped()])

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for _, data in self.stamped():
            yield data

    def close(self) -> None:
        """Give the connection back (kept alive when the response ended cleanly)."""
        if self._closed:
            return
        self._closed = True
        if self.deadline is not None:
            self.deadline.cancel()
        conn = self.conn
        reusable = self.complete and self.keep_alive and self.error is None and not conn.closed
        conn.finish()
        self._release(conn, reusable)

    async def aclose(self) -> None:
        self.close()
