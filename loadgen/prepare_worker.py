"""The body preparer's process (``loadgen.prepare_ahead``): builds request bodies in trace
order and hands each to the replay, never more than a bound of bytes ahead.

Spawned (not forked: the replay's process has threads), at a lower priority than the
replay, and ended with it (``PR_SET_PDEATHSIG``). It talks to the replay over one duplex
pipe: it sends ``Ready``, then one ``Built`` per body in the order of its positions, then
``Done``, or ``Failed`` when a body cannot be built (the replay raises it for that
request). The replay sends back the size of each body it has taken: the credit that lets
this process build further. A body is announced only while the bodies announced and not
yet taken, with it, fit the bound (one body larger than the bound goes alone), or when the
replay waits for it (``Need``: a session opener held for a slot that only a later turn
can free must not keep that turn's body behind the bound). A small
body travels in the message; a larger one as a file in ``spool`` (tmpfs where there is
one), which the replay maps instead of reading, and which this process removes once the
replay has unmapped it (``Unmapped``): the last reference to a tmpfs file frees its pages,
a millisecond or more for a body of a few MiB, so that happens here rather than on the
replay's loop. After the last body it keeps doing so until the replay closes the pipe.

Imports the one body builder (``loadgen.openai.bodies.BodyRecipe``, as ``loadgen.prepare``
does) and nothing of the replay's HTTP client: it starts in about the time its imports of
``traces`` take.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
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
    the body itself), in the order of their positions."""

    recipe: BodyRecipe
    requests: tuple[TraceRequest | None, ...]
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
class Done:
    pass


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
    spool = Path(job.spool)
    try:
        conn.send(Ready())
        ahead, need = 0, -1
        for position, req in enumerate(job.requests):
            if req is None:
                continue
            try:
                body = job.recipe.build(req)
            except Exception as exc:  # the replay raises it where it takes the body
                conn.send(Failed(position, _portable(exc)))
                return
            size = len(body)
            while True:
                if not conn.poll():
                    if ahead == 0 or ahead + size <= job.bound_bytes or position <= need:
                        break
                    conn.poll(None)  # waits for the replay to take a body, or to need one
                msg = conn.recv()
                if isinstance(msg, Need):
                    need = max(need, msg.position)
                elif isinstance(msg, Unmapped):
                    _remove(spool, msg.positions)
                else:
                    ahead -= msg
            if size < INLINE_BYTES:
                conn.send(Built(position, size, body))
            else:
                (spool / str(position)).write_bytes(body)
                conn.send(Built(position, size, None))
            ahead += size
            del body
        conn.send(Done())
        while True:
            msg = conn.recv()
            if isinstance(msg, Unmapped):
                _remove(spool, msg.positions)
    except (EOFError, OSError):
        return  # the replay closed the pipe: it ended, or stopped early


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
