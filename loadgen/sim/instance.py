"""One simulated engine instance in real time: the step loop around a pure Scheduler.

:meth:`Instance.run` is the instance's only task. Each step is planned by the scheduler in
model seconds and placed on the wall clock with absolute deadlines: a busy instance's step
``k`` starts where step ``k-1`` ended (``end = start + duration x time_scale``), never "now
plus a sleep", so late wake-ups never accumulate. An idle instance starts its next step at
the arrival that woke it (or at the release that unblocked it), never earlier than its last
step's end. Requests that arrive during a step join at the next step boundary. When a step
ends the loop wakes (a shared :mod:`loadgen.sim.deadline` timer) and hands the
:class:`~analyzers.budget.engine.scheduler.StepResult` with its planned start and end to
``on_step``, which wakes the requests' handlers.

A front end on the engine's core (``frontend_s``, model seconds a request; vLLM's API
server beside a CPU-served engine, parsing and tokenizing): arrivals pass it one at a time
before the engine sees them, and the engine loses ``frontend_share`` of the front end's
busy time (1: its steps stop; 0.5: they run at half speed), so a step's end is its work
placed around the front end's busy spans, and moves later when a request arrives during
the step.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from analyzers.budget.engine.scheduler import Role, Scheduler, SchedulerLimits, SeqSpec, StepResult
from loadgen.sim.deadline import DeadlineTimer
from loadgen.sim.engine import InstanceStats
from loadgen.sim.physics import Physics

StepCallback = Callable[["Instance", StepResult, int, int], None]


class Instance:
    """A replica (``mixed``), a prefill or a decode instance, stepping in real time."""

    def __init__(
        self,
        name: str,
        *,
        role: Role,
        physics: Physics,
        limits: SchedulerLimits,
        time_scale: float,
        timer: DeadlineTimer,
        on_step: StepCallback,
        frontend_s: float = 0.0,
        frontend_share: float = 1.0,
    ) -> None:
        self.name = name
        self.role: Role = role
        self.physics = physics
        self.scheduler = Scheduler(physics.clock, limits, role=role)
        self._scale = time_scale
        self._timer = timer
        self._on_step = on_step
        self._pending: list[tuple[int, SeqSpec]] = []
        self._wake = asyncio.Event()
        self._kick_ns: int | None = None
        self._steps = 0
        self._busy_until_ns = 0
        self._frontend_ns = round(frontend_s * time_scale * 1e9)
        self._frontend_rate = 1.0 - frontend_share
        """The engine's speed while the front end works (0: stopped)."""
        self._frontend_free_ns = 0
        self._frontend_busy: list[tuple[int, int]] = []
        """The front end's busy spans (wall ns) that may still overlap a step, in order."""

    def load(self) -> int:
        """Sequences this instance holds or is about to (the least-loaded router's key)."""
        return len(self._pending) + self.scheduler.num_running + self.scheduler.num_waiting

    def stats(self) -> InstanceStats:
        """A snapshot for ``/metrics``."""
        sched = self.scheduler
        return InstanceStats(
            name=self.name,
            running=sched.num_running,
            waiting=sched.num_waiting + len(self._pending),
            kv_usage=sched.pool.usage(),
            prefix_queries=sched.prefix_queries,
            prefix_hits=sched.prefix_hits,
            preemptions=sched.preemptions,
        )

    def busy_remaining_s(self, now_ns: int) -> float:
        """Model seconds until the step in progress ends (0 when idle)."""
        return max(0, self._busy_until_ns - now_ns) / self._scale / 1e9

    def pending_specs(self) -> list[SeqSpec]:
        """Arrivals not yet handed to the scheduler (they join at the next step)."""
        return [spec for _, spec in self._pending]

    def check(self, spec: SeqSpec) -> None:
        """Raise CapacityError if ``spec`` can never fit here."""
        self.scheduler.check(spec)

    def submit(self, spec: SeqSpec, *, arrival_ns: int) -> int:
        """Queue a sequence that arrived at ``arrival_ns`` (now or earlier); return when
        the engine sees it (after the front end, if any)."""
        if self._frontend_ns:
            begin = max(arrival_ns, self._frontend_free_ns)
            arrival_ns = self._frontend_free_ns = begin + self._frontend_ns
            self._frontend_busy.append((begin, arrival_ns))
        self._pending.append((arrival_ns, spec))
        self._wake.set()
        return arrival_ns

    def _end_after(self, start_ns: int, work_ns: int) -> int:
        """The end of a step of ``work_ns`` begun at ``start_ns``, the engine slowed to
        ``_frontend_rate`` (stopped at 0) over the front end's busy spans (spans over before
        the step are dropped)."""
        spans = self._frontend_busy = [s for s in self._frontend_busy if s[1] > start_ns]
        rate = self._frontend_rate
        at, left = start_ns, float(work_ns)
        for begin, end in spans:
            if begin >= at + left:
                break
            if begin > at:
                left -= begin - at
                at = begin
            if rate > 0 and (end - at) * rate >= left:
                return round(at + left / rate)
            left -= (end - at) * rate
            at = end
        return round(at + left)

    def abort(self, seq_id: int, *, at_ns: int) -> None:
        """Drop a sequence wherever it is; its blocks are free from ``at_ns``."""
        before = len(self._pending)
        self._pending = [(t, s) for t, s in self._pending if s.seq_id != seq_id]
        if len(self._pending) == before:
            self.scheduler.abort(seq_id)
            self._kick(at_ns)

    def release(self, seq_id: int, *, at_ns: int) -> None:
        """Free a prefilled sequence's blocks once its KV cache has left, at ``at_ns``."""
        self.scheduler.release(seq_id)
        self._kick(at_ns)

    def _kick(self, at_ns: int) -> None:
        self._kick_ns = at_ns if self._kick_ns is None else min(self._kick_ns, at_ns)
        self._wake.set()

    def _idle_start(self, floor_ns: int) -> int | None:
        times = [t for t, _ in self._pending]
        if self._kick_ns is not None and self.scheduler.has_work():
            times.append(self._kick_ns)
        self._kick_ns = None
        return max(floor_ns, min(times)) if times else None

    def _admit_until(self, start_ns: int) -> None:
        if not self._pending:
            return
        keep: list[tuple[int, SeqSpec]] = []
        for arrival, spec in self._pending:
            if arrival <= start_ns:
                self.scheduler.add(spec)
            else:
                keep.append((arrival, spec))
        self._pending = keep

    async def run(self) -> None:
        """Step forever (until cancelled), each step at its absolute wall-clock slot."""
        busy_until: int | None = None  # end of the previous step while the batch is busy
        floor_ns = 0
        while True:
            self._wake.clear()
            start = busy_until if busy_until is not None else self._idle_start(floor_ns)
            if start is None:
                await self._wake.wait()
                continue
            self._admit_until(start)
            result = self.scheduler.step()
            if result is None:  # nothing runnable: idle, or blocked on KV memory
                busy_until = None
                floor_ns = start
                if not any(t > start for t, _ in self._pending):
                    await self._wake.wait()
                continue
            work = round(result.duration_s * self._scale * 1e9)
            end = self._end_after(start, work) if self._frontend_ns else start + work
            self._busy_until_ns = end
            self._steps += 1
            await self._timer.sleep_until(end)
            while self._frontend_ns and (later := self._end_after(start, work)) > end:
                end = self._busy_until_ns = later  # a request came in during the step
                await self._timer.sleep_until(end)
            self._on_step(self, result, start, end)
            busy_until = end
            floor_ns = end
