"""Closed-loop sessions, pure: which turn each request waits for, when it becomes due, which
requests open a session, and how far a turn's prompt is carried over from its parent.

A replay with ``--sessions closed`` sends a session's first request at its trace time (the
open loop's absolute due time) and every later turn at

    due = max(trace due time, parent's end + think time)

so a turn never goes before the reply it continues, and a slow reply delays the rest of
its session as it would a real user or agent. The row's ``due_ns`` is that time: lateness
past it (a busy generator, the cap on sessions) stays visible, within sessions too.

A turn's parent is the trace's ``parent`` column when it names a request of this replay,
else (a trace without the column) the previous request of the same ``session_id``. A
sub-agent's first turn (``branch`` fork or spawn) waits for the turn it branched from.
``think_s`` (trace column, null: 0) is scaled by the replay's time factor like every gap.

``enter_sessions`` cuts each session's turns before an offset into it (AgentX-style:
replay long trajectories from their middle, at steady state) and moves the rest back so
that the session still starts at its first arrival. Reads no clock; imports only
``traces``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from traces.records import TraceRequest

NONE = -1
"""``SessionPlan.waits_for`` / ``session_of`` of a request without one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionPlan:
    """The session structure of one replay's request list (positions in that list)."""

    waits_for: tuple[int, ...]
    """Position of the turn each request waits for, ``NONE`` for one sent at its trace time."""
    followers: tuple[tuple[int, ...], ...]
    """Positions waiting for each request (its next turn, sub-agents it starts)."""
    think_ns: tuple[int, ...]
    """Think time before each request, scaled by the time factor (ns)."""
    session_of: tuple[int, ...]
    """Dense index of each request's session, ``NONE`` for a request without one."""
    opens: tuple[bool, ...]
    """Whether each request is the first of its session in this replay."""
    session_rows: tuple[int, ...]
    """Requests of each session (by dense index)."""
    context_tokens: tuple[int | None, ...]
    """Tokens each request's prompt carries over from its parent (``context_tokens``)."""

    @property
    def sessions(self) -> int:
        return len(self.session_rows)


def has_sessions(requests: Sequence[TraceRequest]) -> bool:
    """Whether any request belongs to a session or names a parent."""
    return any(r.session_id is not None or r.parent is not None for r in requests)


def shared_tokens(req: TraceRequest, parent: TraceRequest, block_size: int) -> int:
    """Tokens of ``req``'s prompt its ``parent``'s prompt and reply already held: the
    leading prefix blocks the two share, in tokens, at most ``req``'s input."""
    mine, theirs = req.prefix_blocks or (), parent.prefix_blocks or ()
    lo, hi = 0, min(len(mine), len(theirs))
    while lo < hi:  # longest common prefix by bisection: tuple slices compare in C
        mid = (lo + hi + 1) // 2
        if mine[:mid] == theirs[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return min(lo * block_size, req.input_tokens)


def plan_sessions(
    requests: Sequence[TraceRequest], *, time_factor: float, block_size: int
) -> SessionPlan:
    """The session plan of ``requests`` (in replay order: parents before their turns)."""
    by_id = {r.request_id: i for i, r in enumerate(requests)}
    last_of: dict[str, int] = {}
    dense: dict[str, int] = {}
    waits: list[int] = []
    think: list[int] = []
    session_of: list[int] = []
    opens: list[bool] = []
    rows: list[int] = []
    context: list[int | None] = []
    followers: list[list[int]] = [[] for _ in requests]
    scale = time_factor * 1e9
    for i, req in enumerate(requests):
        before = NONE
        if req.parent is not None:
            before = by_id.get(req.parent, NONE)
            if before >= i:
                before = NONE  # not earlier in this replay (validation keeps it from traces)
        elif req.session_id is not None:
            before = last_of.get(req.session_id, NONE)
        sid = req.session_id
        if sid is None:
            session_of.append(NONE)
            opens.append(False)
        else:
            k = dense.get(sid)
            opens.append(k is None)
            if k is None:
                k = dense[sid] = len(rows)
                rows.append(0)
            rows[k] += 1
            session_of.append(k)
            last_of[sid] = i
        waits.append(before)
        think.append(round((req.think_s or 0.0) * scale))
        if before != NONE:
            followers[before].append(i)
            context.append(shared_tokens(req, requests[before], block_size))
        else:
            context.append(None)
    return SessionPlan(
        waits_for=tuple(waits),
        followers=tuple(tuple(f) for f in followers),
        think_ns=tuple(think),
        session_of=tuple(session_of),
        opens=tuple(opens),
        session_rows=tuple(rows),
        context_tokens=tuple(context),
    )


def turn_due(trace_due_ns: int, parent_end_ns: int, think_ns: int) -> int:
    """When a turn is due: its trace time, or its parent's end plus think time if later."""
    after = parent_end_ns + think_ns
    return after if after > trace_due_ns else trace_due_ns


def enter_sessions(requests: Sequence[TraceRequest], offset_s: float) -> list[TraceRequest]:
    """Each session entered ``offset_s`` seconds into it: its turns arriving before its
    first arrival plus the offset are left out, and the rest move back by the time from
    its start to the first turn kept, so the session starts when it did, mid-trajectory
    (its first turn kept still carries the whole history the trace gives it). Requests
    without a session are kept as they are. Returns the kept requests in arrival order
    (ties keep trace order); ``index`` stays the trace row."""
    if offset_s <= 0:
        return list(requests)
    start: dict[str, float] = {}
    shift: dict[str, float] = {}
    kept: list[TraceRequest] = []
    for req in requests:
        sid = req.session_id
        if sid is None:
            kept.append(req)
            continue
        first = start.setdefault(sid, req.arrival_s)
        if req.arrival_s < first + offset_s:
            continue
        back = shift.setdefault(sid, req.arrival_s - first)
        kept.append(dataclasses.replace(req, arrival_s=req.arrival_s - back) if back else req)
    kept.sort(key=lambda r: r.arrival_s)
    return kept
