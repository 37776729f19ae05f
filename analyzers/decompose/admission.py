"""Admission by slots, read from the run: when each request of a slot engine began its work.

A slot engine (llama.cpp, ``-np`` slots) gives each request one of a fixed number of slots
from its admission to its last token, and admits a waiting request the moment a slot
frees. So every admission is either the request's arrival (a slot was free) or another
request's end, and each end frees one slot for one admission; both are in the run (the
arrival is ``request_written`` plus the request's network, the end its last byte, on the
client's clock, which shifts every server event by the same return trip). Which request
took which freed slot is not in the run: llama.cpp's HTTP threads hand requests over out of
arrival order. The budget's prediction of each request's work (the load replay's prefill
and first token) says about when it began; ``slot_admissions`` takes, for each request in
the order of their first tokens, the free slot whose admission time is nearest that guess,
never before the request arrived nor after its first token, and each slot release once.

The prefill then comes from the run (first token minus admission, less the predicted first
token) and the queue is the rest, instead of the prefill being the replay's prediction,
which cannot follow how the engine actually ordered and batched the burst. Requests without
a first token (errors, cancellations) are left out of the matching: one that held a slot
hides that slot from it. Must not import loadgen or httpx.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Final

import polars as pl

from analyzers.decompose.load import ROW

SLOT_MS: Final = "_slot_ms"
"""Per request: admission to first token on the server, in ms (null where no free slot
could have admitted it)."""
SAME_STEP_NS: Final = 5_000_000
"""Tokens this close before a request's first token came from the step that sampled it
(an engine writes one step's tokens to its streams one after another), not from a step
that ended before its admission."""
_NEVER: Final = -(2**62)
"""The time of the slots free at the start of the run: before every arrival."""


def _root(parent: list[int], k: int) -> int:
    """The root of ``k`` in ``parent`` (a union-find over token indexes), compressing the
    path."""
    root = k
    while parent[root] != root:
        root = parent[root]
    while parent[k] != root:
        parent[k], k = root, parent[k]
    return root


def slot_admissions(requests: pl.DataFrame, *, slots: int, time_scale: float = 1.0) -> pl.DataFrame:
    """``ROW`` and ``SLOT_MS`` for every row of ``requests``.

    ``requests`` carries ``ROW``, ``arrival_ns`` (request written plus its network),
    ``first_ns`` (first token), ``end_ns`` (last byte), ``work_ns`` (the predicted time
    from admission to first token), ``floor_ns`` (the least that time can be: no slot
    release later than the first token less it admitted the request) and ``steps_ns``
    (the arrival of each of its chunks: the ends of the steps that gave it tokens), all
    on the client's clock. ``slots`` is the number of slots of the whole deployment;
    ``time_scale`` divides the result (wall seconds per server second).
    """
    steps = sorted(requests.get_column("steps_ns").explode().drop_nulls().to_list())
    in_order = sorted(requests.get_column("arrival_ns").to_list())
    ordered = requests.sort("first_ns")
    rows = ordered.get_column(ROW).to_list()
    arrivals = ordered.get_column("arrival_ns").to_list()
    firsts = ordered.get_column("first_ns").to_list()
    works = ordered.get_column("work_ns").to_list()
    floors = ordered.get_column("floor_ns").to_list()
    ends = sorted(e for e in ordered.get_column("end_ns").to_list() if e is not None)
    free = [_NEVER] * slots + ends
    m = len(free)
    # Unused slot releases, by index into ``free``: ``up`` finds the first unused at or
    # after an index (m: none), ``down`` the last unused at or before one (stored one up,
    # so 0 means none).
    up = list(range(m + 1))
    down = list(range(m + 1))
    out: list[float | None] = []

    def admitted(arrival: int, release: int, first: int, limit: int) -> int:
        # A slot frees at the end of a step, and the next step takes the waiting request.
        # A request that arrives to a free slot while another's step runs is taken at
        # that step's end (the next token any request got), if that was not the step that
        # sampled its own first token.
        if release >= arrival:
            return release
        at = arrival
        if bisect_left(in_order, at) - bisect_right(ends, at) > 0:  # others in flight
            k = bisect_left(steps, at)
            if k < len(steps) and steps[k] < min(first - SAME_STEP_NS, limit):
                return int(steps[k])
        return at

    for arrival, first, work, floor in zip(arrivals, firsts, works, floors, strict=True):
        # Releases before the first token less the least the prompt could have taken;
        # before the first token at all where that leaves none.
        limit = first - floor
        last = bisect_left(free, limit) - 1
        if last < 0:
            limit = first
            last = bisect_left(free, first) - 1
        if last < 0:
            out.append(None)
            continue
        want = max(first - work, arrival)
        below = _root(down, min(bisect_right(free, want) - 1, last) + 1) - 1
        above = _root(up, min(bisect_right(free, want), last + 1))
        late = admitted(arrival, free[above], first, limit) if above <= last else None
        early = admitted(arrival, free[below], first, limit) if below >= 0 else None
        if late is not None and (early is None or abs(late - want) < abs(want - early)):
            choice, at = above, late
        elif early is not None:
            # Any unused release before the arrival admits it as well: take the earliest,
            # which no later request could use for a later admission.
            earliest = _root(up, 0)
            choice = earliest if free[earliest] <= arrival else below
            at = early
        else:
            out.append(None)
            continue
        up[choice] = choice + 1
        down[choice + 1] = choice
        out.append((first - at) / 1e6 / time_scale)
    return pl.DataFrame({ROW: rows, SLOT_MS: out}, schema={ROW: pl.UInt32, SLOT_MS: pl.Float64})
