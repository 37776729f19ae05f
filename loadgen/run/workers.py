"""Several replay processes from one common start time: the parent's side and the entry
point of each worker.

Each worker is a spawned process with its own event loop, clock anchor, HTTP client and
recorder, replaying its shard into ``run_dir/shard-k/``; nothing mutable is shared. Workers
report counters and a mergeable HdrHistogram four times a second for the live view, and
their outcome at the end. SIGINT and SIGTERM reach the parent, which forwards SIGTERM to the
workers (they ignore SIGINT, so a terminal's Ctrl-C is counted once).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.context import SpawnProcess
from typing import Any

from loadgen.clock import Clock
from loadgen.errors import LoadgenError, WorkerDiedError
from loadgen.live import AggregateStats, LiveStats, StatsView, WorkerReport
from loadgen.run.runlock import RunLock
from loadgen.run.shard import ShardOutcome, ShardPlan, replay_shard
from loadgen.run.sharding import select_shard

_REPORT_S = 0.25


@dataclass(frozen=True, slots=True, kw_only=True)
class _WorkerFailed:
    shard: int
    message: str
    died: bool = False
    """The process ended without reporting (a signal, a crash), not by an exception."""


def _run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def worker_main(plan: ShardPlan, channel: Any) -> None:
    """Entry point of one worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

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
                    plan, on_start=on_start, stop_signals=(signal.SIGTERM,)
                )
            finally:
                reporter.cancel()
        if holder:
            channel.put(holder[0].report(plan.shard))
        return outcome

    # While this process lives the run is not recovered, even if the parent dies first.
    lock = RunLock.share(plan.lock_dir) if plan.lock_dir is not None else None
    try:
        channel.put(_run(main()))
    except BaseException as exc:  # reported to the parent, which raises it as one line
        channel.put(_WorkerFailed(shard=plan.shard, message=f"{type(exc).__name__}: {exc}"))
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
) -> list[ShardOutcome]:
    """Start one process per plan and wait for all of them."""
    ctx = multiprocessing.get_context("spawn")
    channel = ctx.Queue()
    procs: list[SpawnProcess] = [
        ctx.Process(target=worker_main, args=(plan, channel), name=f"loadgen-shard-{plan.shard}")
        for plan in plans
    ]
    aggregate = AggregateStats(Clock().now_ns)
    if on_start is not None:
        from loadgen.run.options import load_requests

        requests, _ = load_requests(plans[0].opts)
        total = sum(len(select_shard(requests, p.shard, p.shards)) for p in plans)
        on_start(aggregate, total)
    for proc in procs:
        proc.start()

    def forward() -> None:
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
    try:
        while len(outcomes) + len(failures) < len(plans):
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
            elif isinstance(msg, ShardOutcome):
                outcomes[msg.shard] = msg
            elif isinstance(msg, _WorkerFailed):
                failures.append(msg)
    finally:
        for proc in procs:
            await asyncio.to_thread(proc.join, 10)
            if proc.is_alive():
                proc.kill()
        # Only now: a signal while the workers exit is forwarded (to none), not the default
        # action, which would end this process before it writes run.json.
        for sig in installed:
            loop.remove_signal_handler(sig)
    if failures:
        first = min(failures, key=lambda f: f.shard)
        if first.died:
            raise WorkerDiedError(f"worker {first.shard} {first.message}", shard=first.shard)
        raise LoadgenError(f"worker {first.shard} failed: {first.message}")
    return [outcomes[k] for k in sorted(outcomes)]
