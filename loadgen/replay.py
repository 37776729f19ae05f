"""The replay driver: open loop at absolute due times, or closed loop at a concurrency.

Every request task lives in one ``asyncio.TaskGroup``. Open loop sleeps until each request's
absolute due time (``t0 + offset``), never chaining relative sleeps, and records both due
and sent times so a late generator is visible (no coordinated omission). Closed loop keeps
exactly N requests in flight. ``stop()`` (wired to SIGINT/SIGTERM by the CLI) stops
dispatching, gives in-flight requests a grace period, then cancels them; cancelled
requests are recorded with outcome ``cancelled``. A closed loop's ``max_rate`` is paced on
the run's clock with absolute slots (``loadgen.pacer``). Closed-loop sessions (an open
loop whose turns wait for their parents' replies) are dispatched by ``loadgen.turns``.
With a duration, rows still in flight when dispatching ended are flagged ``drain``. Its values:
the ``LoadShape`` it is given (``loadgen.shape``), the ``ReplayResult`` it returns
(``loadgen.result``); both re-exported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from loadgen.client import PreparedRequest, ReadyRequest, StreamingClient
from loadgen.clock import Clock
from loadgen.history import LiveHistory
from loadgen.inflight import InflightCap
from loadgen.live import LiveStats, LoopLagMonitor, lag_histogram, summarize_us
from loadgen.lookahead import FIRST_REQUESTS, Lookahead
from loadgen.pacer import Pacer
from loadgen.prepare.ahead import AheadBodies
from loadgen.prepare.preparer import Preparer
from loadgen.result import ReplayResult
from loadgen.schedule import due_offsets_ns
from loadgen.sessions import SessionPlan
from loadgen.shape import LoadShape, StartGate
from loadgen.stalls import PROMPT_BUILD, StallWatch
from loadgen.stampdelay import StampDelayProbe
from loadgen.turns import ClosedSessions
from loadgen.wakeup import DeadlineTimer, make_deadline_timer
from traces.health import LagSummary
from traces.records import RunRow, TraceRequest

_POLL_S = 0.05
"""Longest single sleep while waiting for a due time, so a stop is noticed quickly."""
_POLL_NS = 50_000_000
"""Within this of a due time, the wait is one sleep on the wake-up timer (see _sleep_until)."""
_COARSE_MARGIN_NS = 5_000_000
"""A coarse sleep on the loop's timer ends this far before the due time at least."""
_GATED_WARM = 1
"""Open loop under a start gate: connections opened before the shard reports ready (the
server is reached, the connect path warmed); a closed loop opens one per worker."""
_BEHIND_NS = 1_000_000
"""An open loop that wakes this late for a due request is behind: its finished requests'
records wait (``StreamingClient.hold_records``) until it wakes on time again."""

__all__ = ["LoadShape", "ReplayResult", "Replayer", "StartGate"]


class Replayer:
    """Drives one replay of ``requests`` through ``client``."""

    def __init__(
        self,
        *,
        requests: Sequence[TraceRequest],
        shape: LoadShape,
        client: StreamingClient,
        preparer: Preparer,
        sink: Callable[[RunRow], None],
        stats: LiveStats,
        clock: Clock,
        ordinals: Sequence[int] | None = None,
        origin_s: float | None = None,
        timer: DeadlineTimer | None = None,
        plan: SessionPlan | None = None,
        stalls: StallWatch | None = None,
        ahead: AheadBodies | None = None,
    ) -> None:
        """``ordinals`` are the requests' places in the whole trace (warm-up counts from
        them; default: their order here); ``origin_s`` is the arrival time that maps to the
        start (default: the first request's), so shards share one time axis. ``timer``:
        what wakes the dispatcher at due times (default: ``loadgen.wakeup``'s most precise;
        the bench injects others to compare). ``plan``: the requests' sessions
        (``loadgen.sessions``), needed by ``closed_sessions`` and for ``context_tokens``.
        ``stalls``: where the loop's stalls and the timed blocking spots go (the shard
        shares it with its recorder). ``ahead``: the bodies built off the loop
        (``loadgen.prepare.ahead``, started by the caller), None to build each here."""
        self._ahead = ahead
        self._plan = plan
        self._history: LiveHistory | None = None
        self._warm_end: int | None = None
        self._dispatch_end: int | None = None
        self._tg: asyncio.TaskGroup | None = None
        self._timer = timer if timer is not None else make_deadline_timer()
        self._stalls = stalls if stalls is not None else StallWatch()
        self._requests = requests
        self._ordinals = list(ordinals) if ordinals is not None else list(range(len(requests)))
        self._origin_s = origin_s
        self._shape = shape
        self._client = client
        self._preparer = preparer
        self._sink = sink
        self._stats = stats
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()
        self._failed: BaseException | None = None
        """What an open loop's request task raised (none is expected: ``execute`` records
        every failure as a row); the run raises it once its requests are drained."""
        self._stopping = False
        self._stop_reason = "completed"
        self._dispatched = 0
        cap = shape.max_inflight if shape.concurrency is None else None
        self._cap = InflightCap(cap, clock.now_ns) if cap is not None else None
        """Open loop with ``max_inflight``: its slots and the cap's share of lateness."""

    def stop(self, reason: str = "interrupted") -> None:
        """Stop dispatching; a second call cancels in-flight requests at once."""
        if self._stopping:
            for task in list(self._tasks):
                task.cancel()
            return
        self._stopping = True
        self._stop_reason = reason

    def _record(self, row: RunRow) -> None:
        end = self._dispatch_end
        if end is not None and row.end_ns is not None and row.end_ns > end:
            row = row._replace(drain=True)  # in flight when dispatching ended
        self._sink(row)
        self._stats.on_record(row)

    # -- what ``loadgen.turns.ClosedSessions`` drives (its ``Dispatch``)
    @property
    def stopping(self) -> bool:
        return self._stopping

    def end_by_duration(self) -> None:
        self._stop_reason = "duration"

    async def sleep_until(self, due_ns: int) -> bool:
        return await self._sleep_until(due_ns)

    async def ready(self, position: int, due_ns: int, reply: str | None = None) -> ReadyRequest:
        """Prepare and encode request ``position`` of this replay, due at ``due_ns``
        (``reply``: its parent's reply, for a live history)."""
        return self._client.ready(await self._prepare(position, due_ns, reply))

    def prepared(self, position: int) -> bool:
        """Whether request ``position`` can be prepared without waiting for its body."""
        return self._ahead is None or self._ahead.ready(position)

    async def send(self, job: ReadyRequest, due_ns: int) -> str | None:
        self._dispatched += 1
        self._stats.on_dispatch()
        return await self._client.execute(job, due_ns, self._record)

    def track(self, coro: Coroutine[Any, Any, None]) -> None:
        assert self._tg is not None
        task = self._tg.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _prepare(
        self, position: int, due_ns: int, reply: str | None = None, *, warm: bool | None = None
    ) -> PreparedRequest:
        """Request ``position`` prepared (``Preparer.prepare_async``), timed for the stall
        log; ``warm`` overrides the warm-up flag its due time gives (before the start, when
        the warm-up's end is not known yet)."""
        plan, warm_end, history = self._plan, self._warm_end, self._history
        req = self._requests[position]
        if history is not None:
            req = history.request(self._requests, position, reply)
        if warm is None:
            warm = warm_end is not None and due_ns < warm_end
        ahead = self._ahead
        body = await ahead.take(position) if ahead is not None and ahead.covers(position) else None
        began = time.perf_counter_ns()
        prepared = await self._preparer.prepare_async(
            req,
            self._ordinals[position],
            warmup=warm,
            context_tokens=plan.context_tokens[position] if plan is not None else None,
            keep_reply=history is not None and history.keeps_reply(position),
            body=body,
        )
        self._stalls.mark(PROMPT_BUILD, began, time.perf_counter_ns())
        return prepared

    async def run(
        self, start_ns: int | None = None, *, gate: StartGate | None = None
    ) -> ReplayResult:
        """Replay everything; ``start_ns`` is a common start time (epoch ns) to wait for;
        ``gate``, when given, is awaited once everything is ready and returns it instead.

        A closed loop first opens one connection per worker (the warm pool), so that its
        first wave writes at the start instead of connecting all at once; an open loop
        prepares its first ``FIRST_REQUESTS`` requests before the start (``loadgen.lookahead``)."""
        self._timer.open()
        try:
            return await self._run(start_ns, gate)
        finally:
            self._timer.close()

    async def _run(self, start_ns: int | None, gate: StartGate | None) -> ReplayResult:
        warm: LagSummary | None = None
        closed = self._shape.concurrency is not None
        connections = (
            min(self._shape.concurrency or 0, len(self._requests))
            if closed
            else (min(_GATED_WARM, len(self._requests)) if gate is not None else 0)
        )
        if connections:
            hist = lag_histogram()
            for ns in await self._client.warm(connections):
                hist.record_value(max(1, ns // 1000))
            warm = summarize_us(hist)
        sessions = self._shape.closed_sessions
        # Due times from the start (open loop, sessions), computed before it: a list of
        # every request's offset takes milliseconds at tens of thousands of requests.
        offsets = [] if closed else self._due_offsets()
        early = [] if closed or sessions else await self._prepare_first(offsets)
        if gate is not None:
            start_ns = await gate()
        if self._ahead is not None:
            self._ahead.count_from_now()
        probe: StampDelayProbe | None = None
        with contextlib.suppress(OSError):  # no socket to spare (descriptors at their limit)
            started = StampDelayProbe()
            started.start()  # before the start: its thread costs the first request nothing
            probe = started
        start = start_ns if start_ns is not None else self._clock.now_ns()
        if self._shape.warmup_s is not None:
            self._warm_end = start + int(self._shape.warmup_s * 1e9)
        self._dispatch_end = self._deadline(start)
        self._stalls.watch_gc()
        try:
            if start_ns is not None:
                await self._sleep_until(start_ns)
            monitor = LoopLagMonitor(stalls=self._stalls)
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                monitor_task = tg.create_task(monitor.run())
                try:
                    if self._shape.concurrency is not None:
                        await self._closed_loop(tg, start, self._shape.concurrency)
                    elif self._shape.closed_sessions:
                        await self._closed_sessions(start, offsets)
                    else:
                        try:
                            await self._open_loop(start, offsets, early)
                        finally:
                            self._client.hold_records(False)
                    await self._drain()
                    if self._failed is not None:
                        raise self._failed  # in the group, as a task's own error would be
                finally:
                    monitor_task.cancel()
        finally:
            self._stalls.unwatch_gc()
            if probe is not None:
                probe.stop()
            self._client.flush()  # records the client deferred (``defer_records``)
        cap = self._cap
        return ReplayResult(
            dispatched=self._dispatched,
            stop_reason=self._stop_reason,
            start_ns=start,
            end_ns=self._clock.now_ns(),
            loop_lag=summarize_us(monitor.lag_us),
            schedule_lag=summarize_us(self._stats.schedule_lag_us),
            cpu_utilisation=monitor.cpu_utilisation(),
            cpu_s=monitor.cpu_seconds(),
            stamp_delay=probe.summary() if probe is not None else None,
            held=cap.held() if cap is not None else None,
            dispatch_lag=cap.dispatch_lag() if cap is not None else None,
            warm_connect=warm,
            warmup_end_ns=self._warm_end,
            dispatch_end_ns=self._dispatch_end,
            stalls=self._stalls.log(self._clock.to_mono_ns(start)),
        )

    async def _drain(self) -> None:
        """Wait for in-flight requests; after a stop, only for the grace period."""
        if self._stopping and self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self._shape.grace_s)
            for task in list(self._tasks):
                task.cancel()
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    def _deadline(self, start: int) -> int | None:
        d = self._shape.duration_s
        return None if d is None else start + int(d * 1e9)

    async def _sleep_until(self, due_ns: int) -> bool:
        """Sleep until the absolute ``due_ns``; False if a stop came first.

        Far from it, the loop's own timer in steps of at most ``_POLL_S`` (a stop is
        noticed within one); the last stretch on the wake-up timer (``loadgen.wakeup``: a
        timerfd at the absolute time, registered with the loop), which wakes the loop within
        tens of microseconds of it without spinning. Open-loop due times and ``max_rate``
        slots alike: at thousands of wake-ups a second, one timerfd serves every waiter.
        """
        now_ns = self._clock.now_ns
        while True:
            if self._stopping:
                return False
            remaining = due_ns - now_ns()
            if remaining <= 0:
                return True
            if remaining > _POLL_NS:
                # The loop's timers may wake a millisecond late: stop short of the due time.
                await asyncio.sleep(min((remaining - _COARSE_MARGIN_NS) / 1e9, _POLL_S))
            else:
                await self._timer.sleep_until(self._clock.to_mono_ns(due_ns))

    async def _one(
        self, job: ReadyRequest, due_ns: int, slot: InflightCap | None, held_ns: int
    ) -> None:
        sink = self._record if slot is None else slot.sink(self._record, held_ns)
        try:
            await self._client.execute(job, due_ns, sink)
        finally:
            if slot is not None:
                slot.release()

    def _spawn(
        self,
        job: ReadyRequest,
        due_ns: int,
        slot: InflightCap | None,
        held_ns: int = 0,
    ) -> None:
        # The loop's own task, not the group's: the group's create_task costs a few µs of
        # Python a request (its bookkeeping beside ours); _spawned_done does its part.
        task = asyncio.get_running_loop().create_task(self._one(job, due_ns, slot, held_ns))
        self._tasks.add(task)
        task.add_done_callback(self._spawned_done)
        self._dispatched += 1
        self._stats.on_dispatch()

    def _spawned_done(self, task: asyncio.Task[None]) -> None:
        """A request task ended: forgotten; one that raised stops the dispatch, and the run
        raises the first such error once in-flight requests are drained."""
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and self._failed is None:
            self._failed = error
            self._stopping = True

    def _due_offsets(self) -> list[int]:
        """Every request's due time from the start, ns."""
        return due_offsets_ns(
            [r.arrival_s for r in self._requests], self._shape.time_factor, self._origin_s
        )

    async def _closed_sessions(self, start: int, offsets: Sequence[int]) -> None:
        plan = self._plan
        if plan is None:
            raise ValueError("closed sessions need the requests' session plan")
        if self._shape.live_history:
            self._history = LiveHistory(self._preparer.prompts, plan)
        await ClosedSessions(
            self,
            plan,
            start,
            offsets,
            now_ns=self._clock.now_ns,
            deadline_ns=self._deadline(start),
            max_sessions=self._shape.max_sessions,
        ).run()

    async def _prepare_first(self, offsets: Sequence[int]) -> list[ReadyRequest]:
        """The open loop's first requests, prepared before the start (up to
        ``FIRST_REQUESTS``); their warm-up flags come from their ``offsets``, as the start is
        not known yet."""
        first = min(FIRST_REQUESTS, len(self._requests))
        warm_ns = None if self._shape.warmup_s is None else int(self._shape.warmup_s * 1e9)
        return [
            self._client.ready(
                await self._prepare(k, 0, warm=warm_ns is not None and offsets[k] < warm_ns)
            )
            for k in range(first)
        ]

    async def _open_loop(
        self,
        start: int,
        offsets: Sequence[int],
        early: Sequence[ReadyRequest] = (),
    ) -> None:
        """Send every request at its due time. Requests are prepared ahead, in the
        loop's slack (``loadgen.lookahead``; with bodies built off the loop, only one whose
        body is built), so that at a due time everything due goes out at once and one yield
        lets the new tasks write their requests before anything else is prepared; behind
        schedule, the backlog goes out without being prepared first. ``early``: the first
        requests, prepared before the start; ``offsets``: every request's due time from the
        start."""
        deadline = self._deadline(start)
        slot = self._cap
        now_ns = self._clock.now_ns
        requests = self._requests
        ahead = Lookahead()
        for k, job in enumerate(early):
            ahead.add(start + offsets[k], k, job)
        following = len(early)
        while True:
            while following < len(requests) and ahead.room(now_ns(), self.prepared(following)):
                due = start + offsets[following]
                ahead.add(due, following, self._client.ready(await self._prepare(following, due)))
                following += 1
            if not ahead:
                return
            if not await self._sleep_until(ahead.next_due()):
                return
            # Behind schedule: the records wait until it has caught up (loadgen.deferred).
            self._client.hold_records(now_ns() - ahead.next_due() > _BEHIND_NS)
            while ahead.due(now_ns()):
                due, _, job = ahead.pop()
                if deadline is not None and due >= deadline:
                    self._stop_reason = "duration"
                    return
                held_ns = await slot.acquire(due) if slot is not None else 0
                if self._stopping:
                    if slot is not None:
                        slot.release()
                    return
                self._spawn(job, due, slot, held_ns)
            await asyncio.sleep(0)

    async def _closed_loop(self, tg: asyncio.TaskGroup, start: int, concurrency: int) -> None:
        deadline = self._deadline(start)
        max_rate = self._shape.max_rate
        pacer = (
            Pacer(rate_per_s=max_rate, origin_ns=start + self._shape.max_rate_phase_ns)
            if max_rate
            else None
        )
        pending = iter(range(len(self._requests)))
        now_ns = self._clock.now_ns

        async def worker() -> None:
            for ordinal in pending:
                if self._stopping:
                    return
                if deadline is not None and now_ns() >= deadline:
                    self._stop_reason = "duration"
                    return
                prepared = await self._prepare(ordinal, now_ns())
                job = self._client.ready(prepared)  # encoded before its slot, not after
                if pacer is None:
                    due = now_ns()
                else:
                    # Each worker takes its own slot and sleeps until it: no shared gate.
                    due = pacer.claim(now_ns())
                    if deadline is not None and due >= deadline:
                        self._stop_reason = "duration"
                        return
                    if not await self._sleep_until(due):
                        return
                self._dispatched += 1
                self._stats.on_dispatch()
                await self._client.execute(job, due, self._record)

        for _ in range(min(concurrency, len(self._requests))):
            task = tg.create_task(worker())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            # One worker per pass of the loop: it prepares and writes its request, then the
            # loop reads what has arrived (the earlier workers' first tokens) before the
            # next one starts, so no first-wave stamp waits for the whole wave's dispatch.
            await asyncio.sleep(0)
