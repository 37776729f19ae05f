"""Request bodies built ahead of their due times, off the event loop, when the trace needs
it: the replay's side of the body preparer (``loadgen.prepare.worker`` is the process).

A 1M-token prompt takes 0.1-0.2 s to build and a 16-image request seconds to encode; built
on the loop (or in a thread, which holds the GIL through the joins, the base64 and the
JSON encoding) every request due meanwhile is late. So a replay whose requests carry images,
or prompts of ``AHEAD_TOKENS`` or more, builds their bodies in a process of its own, in
trace order, at most ``--prepare-ahead-mib`` ahead of what the replay has taken (more
only for a body the replay waits for: see ``loadgen.prepare.worker``); the loop
only maps each body and writes it (``loadgen.http.pool.Outgoing.body``: the head and the
body go to the socket as two writes, the body never copied into one buffer with the head).
``plan_ahead`` decides from the trace before the run starts: a replay of ordinary prompts
starts no process and pays nothing.

Closed sessions' later turns are built when their parent has ended (``ahead_order``): the
replay asks for each then, during the think time. What the process cannot build at all: a
closed session's chat turns under ``--history live`` (their bodies hold the server's
replies, known only when the parent turn has ended). They are built on the loop when their
parent ends, during the think time, as without the preparer; the rest of such a trace
(completions rows) is built ahead.

The process starts before the run's start (about a second: spawn and imports), so a start
gate's ready-then-start still holds. ``summary`` is run.json's ``health.prepare_ahead``.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import multiprocessing
import os
import pickle
import shutil
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Sequence
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess
from pathlib import Path

from loadgen.client import Body
from loadgen.errors import PrepareAheadError
from loadgen.prepare.preparer import Preparer
from loadgen.prepare.worker import Built, Failed, Job, Need, Ready, Unmapped, serve
from loadgen.sessions import NONE, SessionPlan
from loadgen.shape import LoadShape
from traces import schema as s
from traces.health import PrepareAhead
from traces.records import TraceRequest

AHEAD_TOKENS = 16_384
"""A prompt this long or longer is built ahead (about 2 ms of the loop's time to build)."""
DEFAULT_AHEAD_MIB = 256
"""``--prepare-ahead-mib``'s default: bodies built and not yet taken, at most."""
READY_TIMEOUT_S = 60.0
"""How long the process may take to start (spawn, imports, unpickling the trace)."""
_MIB = 1024 * 1024
_SHM = Path("/dev/shm")


def ahead_reason(
    requests: Sequence[TraceRequest], covered: Sequence[bool], *, with_images: bool
) -> str | None:
    """Why ``requests`` need their bodies built ahead (images, huge prompts), or None;
    ``covered``: which of them the process could build (``covered_positions``)."""
    images = huge = 0
    for req, ok in zip(requests, covered, strict=True):
        if not ok:
            continue
        if req.images and with_images:
            images += 1
        literal = req.prompt if req.prompt is not None else req.messages
        if req.input_tokens >= AHEAD_TOKENS or (
            literal is not None and len(literal) >= 4 * AHEAD_TOKENS
        ):
            huge += 1
    parts = []
    if images:
        parts.append(f"{images} request(s) with images")
    if huge:
        parts.append(f"{huge} prompt(s) of {AHEAD_TOKENS:,}+ tokens")
    return ", ".join(parts) or None


def covered_positions(requests: Sequence[TraceRequest], shape: LoadShape) -> list[bool]:
    """Which requests' bodies can be built ahead: all but the chat turns a live history
    rewrites (``loadgen.history``; closed sessions with ``--history live``)."""
    live = shape.closed_sessions and shape.live_history
    return [not (live and req.api == s.API_CHAT) for req in requests]


def plan_ahead(
    preparer: Preparer,
    requests: Sequence[TraceRequest],
    shape: LoadShape,
    bound_mib: int,
    plan: SessionPlan | None = None,
) -> AheadBodies | None:
    """The body preparer for this replay, or None when its trace needs none (or
    ``bound_mib`` is 0: every body built on the loop). ``plan``: the requests' sessions,
    for closed sessions (whose later turns are built when they are needed)."""
    if bound_mib <= 0 or not requests:
        return None
    covered = covered_positions(requests, shape)
    reason = ahead_reason(requests, covered, with_images=preparer.prompts.with_images)
    if reason is None:
        return None
    return AheadBodies(
        preparer,
        requests,
        covered,
        bound_bytes=bound_mib * _MIB,
        reason=reason,
        order=ahead_order(covered, shape, plan),
    )


def ahead_order(covered: Sequence[bool], shape: LoadShape, plan: SessionPlan | None) -> list[int]:
    """The positions built ahead, in the order the replay takes them: every covered one in
    trace order; with closed sessions only those that wait for no turn (the others are
    due when their parent has ended, which no order can know: built then, on demand,
    during the think time)."""
    if shape.closed_sessions and plan is not None:
        return [i for i, ok in enumerate(covered) if ok and plan.waits_for[i] == NONE]
    return [i for i, ok in enumerate(covered) if ok]


class AheadBodies:
    """Bodies of one replay's requests, built by a process of their own (start it, take
    each body by position, close it); loop-local."""

    def __init__(
        self,
        preparer: Preparer,
        requests: Sequence[TraceRequest],
        covered: Sequence[bool],
        *,
        bound_bytes: int,
        reason: str,
        order: Sequence[int] | None = None,
    ) -> None:
        """``order``: the positions built ahead, in order (default: every covered one);
        any other covered one is built when it is taken."""
        self._order = (
            tuple(order) if order is not None else tuple(i for i, c in enumerate(covered) if c)
        )
        self._early = bytearray(len(covered))
        for i in self._order:
            self._early[i] = 1
        self._preparer = preparer
        self._requests = requests
        self._covered = list(covered)
        self.bound_bytes = bound_bytes
        self.reason = reason
        self._built: dict[int, Built] = {}
        self._unmapped: deque[int] = deque()
        """Positions whose mapped body is gone (appended from whichever thread dropped it)."""
        self._waiting: dict[int, asyncio.Future[Built]] = {}
        self._error: BaseException | None = None
        self._ready: asyncio.Future[None] | None = None
        self._conn: Connection | None = None
        self._proc: SpawnProcess | None = None
        self._spool: Path | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ahead = self.peak_bytes = self._bytes = self._bodies = self._waits = 0
        self._start_ms = self._wait_ms = 0.0
        self._closing = False
        self._reader: threading.Thread | None = None

    async def start(self) -> None:
        """Start the process and wait until it is building."""
        began = time.perf_counter()
        loop = self._loop = asyncio.get_running_loop()
        self._spool = Path(tempfile.mkdtemp(prefix="loadgen-ahead-", dir=_spool_root()))
        ctx = multiprocessing.get_context("spawn")
        mine, theirs = ctx.Pipe(duplex=True)
        job = Job(
            recipe=self._preparer.recipe,
            requests=tuple(
                r if c else None for r, c in zip(self._requests, self._covered, strict=True)
            ),
            order=self._order,
            bound_bytes=self.bound_bytes,
            spool=str(self._spool),
        )
        proc = ctx.Process(
            target=serve,
            args=(pickle.dumps(job), theirs, os.getpid()),
            name="loadgen-prepare",
            daemon=True,
        )
        self._conn, self._proc = mine, proc
        self._ready = loop.create_future()
        await asyncio.to_thread(proc.start)  # writes the pickled trace to the child
        theirs.close()  # the child's end: its death is then the pipe's end here
        # A thread reads the pipe (blocking) and hands each message to the loop: the loop's
        # own reader would leave a message read in part (uvloop makes the descriptor
        # non-blocking), and a thread costs the loop one callback per message.
        self._reader = threading.Thread(target=self._read, name="loadgen-prepare-read")
        self._reader.daemon = True
        self._reader.start()
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), READY_TIMEOUT_S)
        except TimeoutError as exc:
            raise PrepareAheadError(
                f"the body preparer did not start within {READY_TIMEOUT_S:g} s"
            ) from exc
        self._start_ms = (time.perf_counter() - began) * 1e3

    def count_from_now(self) -> None:
        """Count waits for bodies from now on (the run's start: the first bodies taken
        before it are waited for by design)."""
        self._waits, self._wait_ms = 0, 0.0

    def covers(self, position: int) -> bool:
        """Whether request ``position``'s body comes from the process."""
        return self._covered[position]

    def ready(self, position: int) -> bool:
        """Whether ``take(position)`` returns at once (built, not covered, or failed)."""
        return not self._covered[position] or position in self._built or self._error is not None

    async def take(self, position: int) -> Body:
        """The body of request ``position``, waiting for it if the process has not built
        it yet (the loop runs meanwhile); raises what building it raised."""
        built = self._built.pop(position, None)
        if built is None:
            if self._error is not None:
                raise self._error
            assert self._loop is not None
            future = self._waiting[position] = self._loop.create_future()
            assert self._conn is not None
            with contextlib.suppress(OSError):  # ended: the error comes through the pipe
                self._conn.send(Need(position))  # past the bound, if that is what holds it
            began = time.perf_counter()
            try:
                built = await future
            finally:
                self._waiting.pop(position, None)
                if self._early[position]:  # one built on demand is waited for by design
                    self._waits += 1
                    self._wait_ms += (time.perf_counter() - began) * 1e3
        self._ahead -= built.size
        self._bodies += 1
        self._bytes += built.size
        assert self._conn is not None
        unmapped = self._unmapped
        with contextlib.suppress(OSError):  # the process has ended: no credit is needed
            self._conn.send(built.size)
            if unmapped:
                self._conn.send(Unmapped(tuple(unmapped.popleft() for _ in range(len(unmapped)))))
        if built.data is not None:
            return built.data
        assert self._spool is not None
        path = self._spool / str(position)
        with path.open("rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        # The process removes the file once the body is unmapped (told with the next
        # credit): the pages are freed there, not on the loop.
        weakref.finalize(mapped, unmapped.append, position)
        return memoryview(mapped)

    def _read(self) -> None:
        """The reader thread: every message to the loop, then the pipe's end."""
        conn, loop = self._conn, self._loop
        assert conn is not None
        assert loop is not None
        try:
            while True:
                msg = conn.recv()
                loop.call_soon_threadsafe(self._on, msg)
        except (EOFError, OSError):
            pass
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            loop.call_soon_threadsafe(self._ended)

    def _ended(self) -> None:
        if self._error is None and not self._closing:
            proc = self._proc
            if proc is not None:
                proc.join(timeout=1.0)  # the run fails here: the loop may wait for its status
            code = proc.exitcode if proc is not None else None
            self._fail(PrepareAheadError(f"the body preparer process died (exit code {code})"))

    def _on(self, msg: object) -> None:
        if isinstance(msg, Built):
            self._ahead += msg.size
            self.peak_bytes = max(self.peak_bytes, self._ahead)
            waiter = self._waiting.pop(msg.position, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(msg)
            else:
                self._built[msg.position] = msg
        elif isinstance(msg, Ready):
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif isinstance(msg, Failed):
            self._fail(msg.error)

    def _fail(self, error: BaseException) -> None:
        self._error = error
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(error)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(error)

    def close(self) -> None:
        """End the process and remove the bodies it built that were not taken."""
        self._closing = True
        conn, proc = self._conn, self._proc
        if proc is not None and proc.pid is not None:
            proc.terminate()  # its end of the pipe closes: the reader thread sees the end
            proc.join(timeout=5)
        if self._reader is not None:
            self._reader.join(timeout=5)
        if conn is not None:
            conn.close()
        if self._spool is not None:
            shutil.rmtree(self._spool, ignore_errors=True)

    def summary(self) -> PrepareAhead:
        """What the preparer did (run.json's ``health.prepare_ahead``)."""
        return PrepareAhead(
            reason=self.reason,
            bound_mib=round(self.bound_bytes / _MIB, 3),
            bodies=self._bodies,
            mib=round(self._bytes / _MIB, 3),
            peak_mib=round(self.peak_bytes / _MIB, 3),
            waits=self._waits,
            wait_ms=round(self._wait_ms, 1),
            start_ms=round(self._start_ms, 1),
        )


@contextlib.asynccontextmanager
async def running(ahead: AheadBodies | None) -> AsyncIterator[None]:
    """``ahead`` started for the block and closed after it (nothing when None)."""
    if ahead is None:
        yield
        return
    try:
        await ahead.start()
        yield
    finally:
        ahead.close()


def merge_prepare_ahead(parts: Sequence[PrepareAhead | None]) -> PrepareAhead | None:
    """Several shards' preparers as one: sums, the worst peak and start, the first
    reason."""
    known = [p for p in parts if p is not None]
    if not known:
        return None
    return PrepareAhead(
        reason=known[0].reason,
        bound_mib=known[0].bound_mib,
        bodies=sum(p.bodies for p in known),
        mib=round(sum(p.mib for p in known), 3),
        peak_mib=max(p.peak_mib for p in known),
        waits=sum(p.waits for p in known),
        wait_ms=round(sum(p.wait_ms for p in known), 1),
        start_ms=max(p.start_ms for p in known),
    )


def _spool_root() -> str | None:
    """Where bodies are written: tmpfs (``/dev/shm``) where there is one, else the
    temporary directory."""
    if _SHM.is_dir() and os.access(_SHM, os.W_OK):
        return str(_SHM)
    return None
