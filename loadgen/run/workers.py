"""Several replay processes from one common start time: the parent's side and the entry
point of each worker.

Each worker is a spawned process with its own event loop, clock anchor, HTTP client and
recorder, replaying its shard into ``run_dir/shard-k/``; nothing mutable is shared. The start
is common and comes after every worker is ready: each reports ready once its pool is
connected and its first requests are prepared, and when all have, the parent sends one start
time (a little ahead) down each worker's start pipe; a worker not ready within
``READY_TIMEOUT_S`` fails the run with its shard named. Workers die with the parent
(``PR_SET_PDEATHSIG`` on Linux: SIGTERM, a graceful stop; elsewhere the start pipe's end).
Workers report counters and a mergeable HdrHistogram four times a second for the live view, and
their outcome at the end. SIGINT and SIGTERM reach the parent, which forwards SIGTERM to the
workers (they ignore SIGINT, so a terminal's Ctrl-C is counted once).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import queue
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess
from typing import TYPE_CHECKING, Any

from loadgen.errors import LoadgenError, WorkerDiedError
from loadgen.parentdeath import die_with_parent

# Light at import: a spawned worker loads this module (and unpickles its arguments) before
# ``worker_main`` can catch a SIGTERM; the replay's modules load after (see worker_main).
if TYPE_CHECKING:
    from loadgen.live import StatsView
    from loadgen.run.shard import ShardOutcome, ShardPlan

_REPORT_S = 0.25
READY_TIMEOUT_S = 60.0
"""How long the parent waits for every worker to report ready (spawn, imports, pool,
prompts), and a worker for the start after it has."""
START_AHEAD_S = 0.1
"""How far ahead of the broadcast the common start is set (the pipes and the workers'
wake-ups take well under a millisecond on an idle host)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _WorkerReady:
    shard: int


@dataclass(frozen=True, slots=True, kw_only=True)
class _WorkerFailed:
    shard: int
    message: str
    died: bool = False
    """The process ended without reporting (a signal, a crash), not by an exception."""
    aborted: bool = False
    """It failed because the run was called off before the start (another worker failed)."""


class _NotStarted(LoadgenError):
    """The parent called the run off (or died) before sending the start (raised in a
    worker, reported to the parent, which turns it into its own one-line error)."""


def _await_start(conn: Connection, timeout_s: float) -> int:
    """The common start the parent sends down ``conn``."""
    try:
        if not conn.poll(timeout_s):
            raise _NotStarted(f"no common start within {timeout_s:.0f} s of being ready")
        start = conn.recv()
    except (EOFError, OSError) as exc:
        raise _NotStarted("the run was called off before the start") from exc
    if not isinstance(start, int):
        raise _NotStarted("the run was called off before the start")
    return start


def _first_leaf(exc: BaseException) -> BaseException:
    """The first exception that is not a group (a ``TaskGroup`` wraps what it carries)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def worker_main(pickled_plan: bytes, channel: Any, start: Connection, parent_pid: int) -> None:
    """Entry point of one worker process: ``pickled_plan`` is its ``ShardPlan`` (unpickled
    here, after the signal handlers), ``start`` carries the common start time."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A SIGTERM before the shard's own handler is in place (while it imports and sets up)
    # is kept, and raised again once that handler is: the shard then stops as interrupted.
    early_stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: early_stop.append(signum))
    die_with_parent(parent_pid)
    from loadgen.live import LiveStats
    from loadgen.run.runlock import RunLock
    from loadgen.run.shard import replay_shard, run_event_loop

    plan: ShardPlan = pickle.loads(pickled_plan)

    async def gate() -> int:
        if early_stop:
            os.kill(os.getpid(), signal.SIGTERM)
        channel.put(_WorkerReady(shard=plan.shard))
        return await asyncio.to_thread(_await_start, start, READY_TIMEOUT_S)

    async def main() -> ShardOutcome:
        holder: list[LiveStats] = []

        def on_start(stats: StatsView, total: int) -> None:
            if isinstance(stats, LiveStats):
                holder.append(stats)

        async def report_forever() -> None:
            while True:
                if holder:
                    channel.put(holder[0].report(plan.shard))
                await asyncio.sleep(_REPORT_S)

        async with asyncio.TaskGroup() as tg:
            reporter = tg.create_task(report_forever())
            try:
                outcome = await replay_shard(
                    plan, on_start=on_start, stop_signals=(signal.SIGTERM,), gate=gate
                )
            finally:
                reporter.cancel()
        if holder:
            channel.put(holder[0].report(plan.shard))
        return outcome

    # While this process lives the run is not recovered, even if the parent dies first.
    lock = RunLock.share(plan.lock_dir) if plan.lock_dir is not None else None
    try:
        channel.put(run_event_loop(main()))
    except BaseException as exc:  # reported to the parent, which raises it as one line
        leaf = _first_leaf(exc)
        if isinstance(leaf, _NotStarted):
            channel.put(_WorkerFailed(shard=plan.shard, message=str(leaf), aborted=True))
        else:
            channel.put(_WorkerFailed(shard=plan.shard, message=f"{type(leaf).__name__}: {leaf}"))
    finally:
        if lock is not None:
            lock.release(unlink=False)


def _death(proc: SpawnProcess) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"died ({name})"
    return f"died (exit code {code})"


async def run_workers(
    plans: Sequence[ShardPlan],
    *,
    on_start: Callable[[StatsView, int], None] | None = None,
    install_signal_handlers: bool = True,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> list[ShardOutcome]:
    """Start one process per plan, give them one common start once all are ready, and
    wait for all of them."""
    from loadgen.clock import Clock
    from loadgen.live import AggregateStats, WorkerReport
    from loadgen.run.shard import ShardOutcome
    from loadgen.run.sharding import select_shard

    ctx = multiprocessing.get_context("spawn")
    channel = ctx.Queue()
    pipes = [ctx.Pipe(duplex=False) for _ in plans]
    procs: list[SpawnProcess] = [
        ctx.Process(
            target=worker_main,
            args=(pickle.dumps(plan), channel, receive, os.getpid()),
            name=f"loadgen-shard-{plan.shard}",
        )
        for plan, (receive, _) in zip(plans, pipes, strict=True)
    ]
    senders = [send for _, send in pipes]
    aggregate = AggregateStats(Clock().now_ns)
    if on_start is not None:
        from loadgen.run.options import load_requests

        requests, _ = load_requests(plans[0].opts)
        total = sum(len(select_shard(requests, p.shard, p.shards)) for p in plans)
        on_start(aggregate, total)
    for proc in procs:
        proc.start()
    for receive, _ in pipes:
        receive.close()
    clock = Clock()
    ready: set[int] = set()
    started = called_off = False
    ready_by = time.monotonic() + ready_timeout_s

    def call_off() -> None:
        """No start will come: each worker waiting for it fails at once."""
        nonlocal called_off
        called_off = True
        for send in senders:
            send.close()

    def forward() -> None:
        # Before the start too: a worker stopped while it waits still gets the start and
        # ends at once ("interrupted", no request sent), as a single process would.
        for proc in procs:
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)

    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if install_signal_handlers:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, forward)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):
                continue
    outcomes: dict[int, ShardOutcome] = {}
    failures: list[_WorkerFailed] = []
    not_ready: str | None = None
    try:
        while len(outcomes) + len(failures) < len(plans):
            if not started and failures:
                call_off()  # one worker failed before the start: the others stop waiting
            if not started and not failures and time.monotonic() > ready_by:
                missing = ", ".join(str(p.shard) for p in plans if p.shard not in ready)
                not_ready = (
                    f"worker(s) {missing} not ready after {ready_timeout_s:g} s (spawned, "
                    "but the connection to the endpoint or the first prompts never were)"
                )
                call_off()
                forward()
                ready_by = float("inf")
            try:
                msg = await asyncio.to_thread(channel.get, True, _REPORT_S)
            except queue.Empty:
                finished = set(outcomes) | {f.shard for f in failures}
                failures.extend(
                    _WorkerFailed(shard=p.shard, message=_death(proc), died=True)
                    for p, proc in zip(plans, procs, strict=True)
                    if p.shard not in finished
                    and not proc.is_alive()
                    and proc.exitcode not in (None, 0)
                )
                continue
            if isinstance(msg, WorkerReport):
                aggregate.update(msg)
            elif isinstance(msg, _WorkerReady):
                ready.add(msg.shard)
                if len(ready) == len(plans) and not (started or called_off or failures):
                    start_ns = clock.now_ns() + int(START_AHEAD_S * 1e9)
                    for send in senders:
                        send.send(start_ns)
                    started = True
            elif isinstance(msg, ShardOutcome):
                outcomes[msg.shard] = msg
            elif isinstance(msg, _WorkerFailed):
                failures.append(msg)
    finally:
        for proc in procs:
            await asyncio.to_thread(proc.join, 10)
            if proc.is_alive():
                proc.kill()
        for send in senders:
            send.close()
        # Only now: a signal while the workers exit is forwarded (to none), not the default
        # action, which would end this process before it writes run.json.
        for sig in installed:
            loop.remove_signal_handler(sig)
    if not_ready is not None:
        raise LoadgenError(not_ready)
    if failures and all(f.aborted for f in failures):
        raise LoadgenError("the run was called off before its common start (interrupted)")
    failures = [f for f in failures if not f.aborted]
    if failures:
        first = min(failures, key=lambda f: f.shard)
        if first.died:
            raise WorkerDiedError(f"worker {first.shard} {first.message}", shard=first.shard)
        raise LoadgenError(f"worker {first.shard} failed: {first.message}")
    return [outcomes[k] for k in sorted(outcomes)]
