"""Pure sharding: which requests a worker replays, and how to split a budget among workers.

Shard, don't share: worker k of n replays the requests with ``index % n == k``, except that
a multi-turn session stays whole on one worker (chosen by a stable hash of its id), so its
turns keep their order and their prefix-cache behaviour; a sub-agent's session (a row whose
``parent`` is of another session) goes with the session it branched from, so a closed-loop
replay can make it wait for its parent.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from traces.records import TraceRequest


def shard_of(req: TraceRequest, shards: int) -> int:
    """The worker that replays ``req``."""
    if shards == 1:
        return 0
    if req.session_id is not None:
        return zlib.crc32(req.session_id.encode()) % shards
    return req.index % shards


def select_shard(requests: Sequence[TraceRequest], shard: int, shards: int) -> list[TraceRequest]:
    """The requests of worker ``shard`` of ``shards``, in trace order."""
    if shards == 1:
        return list(requests)
    if not any(r.parent is not None for r in requests):
        return [r for r in requests if shard_of(r, shards) == shard]
    # Follow parent links: a row goes where its parent went (parents come first).
    owner: dict[str, int] = {}
    mine: list[TraceRequest] = []
    for r in requests:
        k = owner.get(r.parent) if r.parent is not None else None
        if k is None:
            k = shard_of(r, shards)
        owner[r.request_id] = k
        if k == shard:
            mine.append(r)
    return mine


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` integers differing by at most one, larger ones first."""
    base, extra = divmod(total, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]
