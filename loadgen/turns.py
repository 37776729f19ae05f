"""The closed-session dispatcher (``--sessions closed``): session openers at their trace times
under a cap on sessions in progress, every later turn when its parent has ended plus think
time (``loadgen.sessions``).

Openers and requests without a parent go out as in the open loop, prepared ahead
(``loadgen.lookahead``; with bodies built off the loop, only those already built) and sent
at their absolute due times. A turn's task, once its response has ended, computes each
follower's due time (``turn_due``), prepares it at once (the think time and the trace time
are the look-ahead) and starts a task that sleeps until it is due: no turn is ever sent
before its parent's end plus think time, and the row's ``due_ns`` is that time, so a late
dispatch is visible as in the open loop. With ``max_sessions``, an opener that finds every
session slot taken waits for one (its due time stays its trace time: the wait is lateness);
a slot is freed when the last request of its session ends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from loadgen.client import ReadyRequest
from loadgen.lookahead import Lookahead
from loadgen.sessions import NONE, SessionPlan, turn_due


class Dispatch(Protocol):
    """What the dispatcher needs of the replay (``loadgen.replay.Replayer``)."""

    @property
    def stopping(self) -> bool: ...

    def end_by_duration(self) -> None: ...

    async def sleep_until(self, due_ns: int) -> bool: ...

    async def ready(self, position: int, due_ns: int, reply: str | None = None) -> ReadyRequest: ...

    def prepared(self, position: int) -> bool: ...

    async def send(self, job: ReadyRequest, due_ns: int) -> str | None: ...

    def track(self, coro: Coroutine[Any, Any, None]) -> None: ...


class ClosedSessions:
    """Dispatches one replay's requests as closed-loop sessions."""

    def __init__(
        self,
        replay: Dispatch,
        plan: SessionPlan,
        start_ns: int,
        offsets_ns: Sequence[int],
        *,
        now_ns: Callable[[], int],
        deadline_ns: int | None,
        max_sessions: int | None,
    ) -> None:
        """``start_ns + offsets_ns[i]``: request ``i``'s open-loop due time (epoch ns)."""
        self._replay = replay
        self._plan = plan
        self._start = start_ns
        self._offsets = offsets_ns
        self._now_ns = now_ns
        self._deadline = deadline_ns
        self._slots = asyncio.Semaphore(max_sessions) if max_sessions is not None else None
        self._left = list(plan.session_rows)

    def _due(self, pos: int) -> int:
        """Request ``pos``'s open-loop due time (epoch ns)."""
        return self._start + self._offsets[pos]

    async def run(self) -> None:
        """Send the requests that wait for no turn, in trace order; their turns follow from
        their tasks. Returns when the last of these is sent (the caller drains the rest)."""
        plan, replay, now_ns = self._plan, self._replay, self._now_ns
        roots = [i for i, before in enumerate(plan.waits_for) if before == NONE]
        ahead = Lookahead()
        following = 0
        while True:
            while following < len(roots) and ahead.room(
                now_ns(), replay.prepared(roots[following])
            ):
                pos = roots[following]
                due = self._due(pos)
                ahead.add(due, pos, await replay.ready(pos, due))
                following += 1
            if not ahead:
                return
            if not await replay.sleep_until(ahead.next_due()):
                return
            while ahead.due(now_ns()):
                due, pos, job = ahead.pop()
                if self._deadline is not None and due >= self._deadline:
                    replay.end_by_duration()
                    return
                if self._slots is not None and plan.opens[pos]:
                    await self._slots.acquire()
                if replay.stopping:
                    return
                replay.track(self._turn(pos, job, due))
            await asyncio.sleep(0)

    async def _turn(self, pos: int, job: ReadyRequest, due: int) -> None:
        """Send one request; when it has ended, schedule the turns that wait for it."""
        replay, plan = self._replay, self._plan
        try:
            reply = await replay.send(job, due)
        finally:
            self._ended(pos)
        end = self._now_ns()
        if replay.stopping:
            return
        for nxt in plan.followers[pos]:
            at = turn_due(self._due(nxt), end, plan.think_ns[nxt])
            if self._deadline is not None and at >= self._deadline:
                replay.end_by_duration()
                continue
            replay.track(self._follow(nxt, at, reply))

    async def _follow(self, pos: int, due: int, reply: str | None) -> None:
        replay = self._replay
        job = await replay.ready(pos, due, reply)  # during the think time, before it is due
        if not await replay.sleep_until(due) or replay.stopping:
            return
        if self._slots is not None and self._plan.opens[pos]:
            await self._slots.acquire()  # a sub-agent opens a session of its own
        await self._turn(pos, job, due)

    def _ended(self, pos: int) -> None:
        """Count a request of its session done; the session's slot is free after its last."""
        k = self._plan.session_of[pos]
        if k == NONE:
            return
        self._left[k] -= 1
        if self._left[k] == 0 and self._slots is not None:
            self._slots.release()
