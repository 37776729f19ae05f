"""The body preparer's process (``loadgen.prepare.ahead``): builds request bodies ahead, in
the order the replay will want them, and hands each to the replay, never more than a bound
of bytes ahead; and any other body when the replay needs it.

Spawned (not forked: the replay's process has threads), at a lower priority than the
replay, and ended with it (``PR_SET_PDEATHSIG``). It talks to the replay over one duplex
pipe: it sends ``Ready``, then one ``Built`` per body, or ``Failed`` when a body cannot be
built (the replay raises it for that request; the process ends). The replay sends back the
size of each body it has taken: the credit that lets this process build further. A body is
announced only while the bodies announced and not yet taken, with it, fit the bound (one
body larger than the bound goes alone). A body the replay waits for (``Need``) is built
next and announced whatever the bound says: a closed session's later turn (built on demand,
once its parent has ended: its turn comes at a time no order can know) or one the bound
holds back (a session opener held for a slot that only a later turn can free must not keep
that turn behind the bound). A small body travels in the message; a larger one as a file in
``spool`` (tmpfs where there is one), which the replay maps instead of reading, and which
this process removes once the replay has unmapped it (``Unmapped``): the last reference to
a tmpfs file frees its pages, a millisecond or more for a body of a few MiB, so that
happens here rather than on the replay's loop. It runs until the replay closes the pipe.

Imports the one body builder (``loadgen.openai.bodies.BodyRecipe``, as ``loadgen.prepare.preparer``
does) and nothing of the replay's HTTP client: it starts in about the time its imports of
``traces`` take.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from loadgen.openai.bodies import BodyRecipe
from loadgen.parentdeath import die_with_parent
from traces.records import TraceRequest

INLINE_BYTES = 65_536
"""Bodies smaller than this travel in the pipe's message; larger ones as a file."""
_NICE = 2
"""How much lower the preparer's priority is than the replay's: on a shared core the
replay's loop, waking for a due time, runs first. Only a little: at +5, on a host busy
with other processes the preparer got a third of their share and fell seconds behind
(bench/prepare_ahead.py at load average 13), which makes requests far later than a loop
that waits a little for the core."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """What the process builds: ``requests`` (one per position, None where the replay builds
    the body itself); those of ``order`` ahead, in that order, within ``bound_bytes``, and
    any other when the replay needs it."""

    recipe: BodyRecipe
    requests: tuple[TraceRequest | None, ...]
    order: tuple[int, ...]
    bound_bytes: int
    spool: str


@dataclass(frozen=True, slots=True)
class Ready:
    pass


@dataclass(frozen=True, slots=True)
class Built:
    position: int
    size: int
    data: bytes | None
    """The body itself when small, else None: it is the file ``spool/position``."""


@dataclass(frozen=True, slots=True)
class Failed:
    position: int
    error: BaseException


@dataclass(frozen=True, slots=True)
class Unmapped:
    """From the replay: the bodies of these positions are no longer mapped."""

    positions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Need:
    """From the replay: it waits for the body of ``position``; build up to it whatever
    the bound says."""

    position: int


def serve(pickled_job: bytes, conn: Connection, parent_pid: int) -> None:
    """Entry point of the process (``multiprocessing`` spawn target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the replay stops it (a Ctrl-C is its)
    die_with_parent(parent_pid)
    with contextlib.suppress(OSError):
        os.nice(_NICE)
    job: Job = pickle.loads(pickled_job)
    with contextlib.suppress(EOFError, OSError):  # the replay closed the pipe: it has ended
        _Worker(job, conn).run()


class _Worker:
    def __init__(self, job: Job, conn: Connection) -> None:
        self.job = job
        self.conn = conn
        self.spool = Path(job.spool)
        self.ahead = 0
        """Bytes announced and not yet taken."""
        self.needs: deque[int] = deque()
        self.sent: set[int] = set()

    def run(self) -> None:
        job, conn = self.job, self.conn
        conn.send(Ready())
        order = iter(job.order)
        pending: tuple[int, bytes] | None = None
        while True:
            self.pump(block=False)
            while self.needs:
                position = self.needs.popleft()
                if position in self.sent or job.requests[position] is None:
                    continue
                if pending is not None and pending[0] == position:
                    body, pending = pending[1], None
                else:
                    body = self.build(position)
                self.announce(position, body)  # needed now: whatever the bound says
            if pending is None:
                position = next((p for p in order if p not in self.sent), -1)
                if position >= 0:
                    pending = (position, self.build(position))
            if pending is not None and (
                self.ahead == 0 or self.ahead + len(pending[1]) <= job.bound_bytes
            ):
                self.announce(*pending)
                pending = None
                continue
            self.pump(block=True)  # a credit, a need, or the end

    def pump(self, *, block: bool) -> None:
        """Handle what the replay sent: everything waiting, and with ``block`` at least
        one message."""
        conn = self.conn
        if block:
            conn.poll(None)
        while conn.poll():
            msg = conn.recv()
            if isinstance(msg, Need):
                self.needs.append(msg.position)
            elif isinstance(msg, Unmapped):
                _remove(self.spool, msg.positions)
            else:
                self.ahead -= msg

    def build(self, position: int) -> bytes:
        req = self.job.requests[position]
        assert req is not None
        try:
            return self.job.recipe.build(req)
        except Exception as exc:  # the replay raises it where it takes the body
            self.conn.send(Failed(position, _portable(exc)))
            raise EOFError from exc  # nothing more to build: end as if the pipe had

    def announce(self, position: int, body: bytes) -> None:
        size = len(body)
        if size < INLINE_BYTES:
            self.conn.send(Built(position, size, body))
        else:
            (self.spool / str(position)).write_bytes(body)
            self.conn.send(Built(position, size, None))
        self.sent.add(position)
        self.ahead += size


def _remove(spool: Path, positions: tuple[int, ...]) -> None:
    for position in positions:
        (spool / str(position)).unlink(missing_ok=True)


def _portable(exc: Exception) -> BaseException:
    """``exc``, or where it does not survive pickling, a ``RuntimeError`` that says it."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc
