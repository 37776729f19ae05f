"""Requests prepared and encoded before their due times, in due order: the open loop's and
the closed-session dispatcher's look-ahead.

Preparing a request (its prompt, its body, its encoded head) is most of what the loop does
for it before the write. Done ahead, in the loop's slack, a due request costs only its
spawn and its write; and when the loop falls behind (the host took the CPU away for a
while), the backlog goes out at that cost, not at the full one, so the schedule catches up
sooner. The look-ahead is deep (``AHEAD_REQUESTS``: 50 ms at 5,000 req/s) but bounded in
bytes (``AHEAD_BYTES``: a trace of huge prompts holds a few of them). A request is prepared
only while the earliest one waiting is due more than ``PREP_GUARD_NS`` from now: a short
prompt takes tens of µs to prepare, a long one up to about 2 ms (longer ones are built in a
process of their own, ``loadgen.prepare.ahead``).
"""

from __future__ import annotations

from collections import deque

from loadgen.client import ReadyRequest

AHEAD_REQUESTS = 256
"""Requests prepared before their due times, at most."""
AHEAD_BYTES = 64 << 20
"""Bodies prepared before their due times, at most (bytes); past it, only the next request
is prepared, once none is waiting."""
FIRST_REQUESTS = 16
"""Requests prepared before the run's start (the rest fill in after it, in the slack)."""
PREP_GUARD_NS = 300_000
"""No further request is prepared this close to the earliest prepared due time (building
one costs up to a few hundred µs: prompt, body, encoding)."""


class Lookahead:
    """Prepared requests waiting for their due times: (due ns, trace position, request),
    in due order, with the bytes their bodies hold."""

    __slots__ = ("_bytes", "_items")

    def __init__(self) -> None:
        self._items: deque[tuple[int, int, ReadyRequest]] = deque()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def held_bytes(self) -> int:
        """Bytes of the bodies waiting."""
        return self._bytes

    def room(self, now_ns: int, built: bool = True) -> bool:
        """Whether one more request should be prepared at ``now_ns``: always when none is
        waiting; else while fewer than ``AHEAD_REQUESTS`` wait, holding less than
        ``AHEAD_BYTES``, the earliest is due more than ``PREP_GUARD_NS`` from now, and its
        body is ``built`` already (one built off the loop, ``loadgen.prepare.ahead``, is
        waited for only when none is waiting)."""
        items = self._items
        if not items:
            return True
        return (
            built
            and len(items) < AHEAD_REQUESTS
            and self._bytes < AHEAD_BYTES
            and items[0][0] - now_ns > PREP_GUARD_NS
        )

    def add(self, due_ns: int, position: int, job: ReadyRequest) -> None:
        """Queue ``job`` (request ``position``), due at ``due_ns``: no earlier than the last
        one queued (the callers prepare in due order)."""
        self._items.append((due_ns, position, job))
        self._bytes += len(job.job.body)

    def next_due(self) -> int:
        """The earliest due time waiting (there must be one)."""
        return self._items[0][0]

    def due(self, now_ns: int) -> bool:
        """Whether the earliest request waiting is due at ``now_ns``."""
        items = self._items
        return bool(items) and items[0][0] <= now_ns

    def pop(self) -> tuple[int, int, ReadyRequest]:
        """The earliest request waiting: (due ns, position, request)."""
        item = self._items.popleft()
        self._bytes -= len(item[2].job.body)
        return item
