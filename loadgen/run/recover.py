"""Crash recovery: a run directory whose replay died (kill -9, a dead worker) made whole
enough to analyse, and honest about what it lost.

``recover_run`` merges every journal left behind (the run's own and each ``shard-k/``'s)
into ``requests.parquet`` (``loadgen.run.recorder.merge_parts``, which never replaces a
journal with fewer rows), counts the requests the run sent and never recorded, and
rewrites ``run.json`` with status ``incomplete`` and an ``Incomplete`` section saying why.
It claims the run's lock first (``loadgen.run.runlock``): a run a replay process is still
writing is refused (``RunLiveError``), never recovered under its feet.

What was sent comes from the dispatch record beside each journal (``loadgen.dispatched``):
every request's trace index, written as its bytes went to the wire, so the lost requests
are exactly the recorded ones without a row (or one per process too many, when the process
died between a record and its write). A run of an earlier build has no such record; then
the count is inferred from the schedule: the replay dispatches each shard's requests in
schedule order, so every request of a shard up to the last one recorded was sent; in an
open loop, so was every request due before the journal's last write. Requests sent after
that last write are unknowable there, so that lost count is a lower bound (``exact`` False)
and ``scheduled - rows`` bounds it from above.

Imports ``loadgen.run`` and ``traces`` only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from loadgen.dispatched import read_dispatched
from loadgen.errors import RunDirError
from loadgen.run.recorder import merge_parts
from loadgen.run.runlock import RunLock
from loadgen.run.sharding import select_shard
from loadgen.schedule import due_offsets_ns
from traces import schema as s
from traces.errors import TraceError
from traces.io import read_run_info, read_trace, write_run_info
from traces.records import TraceRequest
from traces.runinfo import INCOMPLETE, Incomplete, RunInfo

__all__ = ["Recovery", "ShardRecovery", "recover_run"]

DIED_CAUSE = "the replay process died (killed?) before it finished"


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardRecovery:
    """One directory's rows: ``merged`` when a journal was turned into requests.parquet now."""

    directory: Path
    shard: int
    rows: int
    dispatched: int
    lost: int
    merged: bool
    exact: bool
    """``dispatched`` and ``lost`` come from the dispatch record (or from a shard that
    closed normally: nothing lost), not from the schedule."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovery:
    """What ``recover_run`` found and wrote."""

    run_dir: Path
    info: RunInfo
    shards: tuple[ShardRecovery, ...]
    changed: bool
    """False when the run was complete (or already recovered) and nothing was written."""
    note: str | None = None
    """Why the lost count rests on the rows alone (the trace could not be read)."""


def _shard_dirs(run_dir: Path, workers: int) -> list[tuple[int, Path]]:
    if workers <= 1:
        return [(0, run_dir)]
    return [(k, run_dir / f"shard-{k}") for k in range(workers)]


def _journal_written_ns(directory: Path) -> int | None:
    journal = directory / s.PARTS_DIR / s.JOURNAL_FILE
    try:
        return journal.stat().st_mtime_ns
    except OSError:
        return None


def _rows_of(directory: Path) -> tuple[int, set[int], int | None, int | None]:
    """Rows in ``requests.parquet``, their trace indices, the highest of them and its
    due_ns (what the schedule inference starts from)."""
    path = directory / s.REQUESTS_FILE
    if not path.exists():
        return 0, set(), None, None
    table = pq.read_table(path, columns=[s.TRACE_INDEX, s.DUE_NS])
    if table.num_rows == 0:
        return 0, set(), None, None
    index = table.column(s.TRACE_INDEX)
    top = pc.max(index).as_py()
    where = pc.index(index, top).as_py()
    indices = set(index.to_pylist())
    return table.num_rows, indices, top, table.column(s.DUE_NS)[where].as_py()


def _dispatched(
    mine: list[TraceRequest],
    offsets: dict[int, int],
    *,
    top_index: int | None,
    top_due_ns: int | None,
    written_ns: int | None,
    open_loop: bool,
) -> int:
    """Requests of one shard certainly sent: up to the last recorded, and (open loop) due
    before the journal's last write."""
    if top_index is None:
        return 0
    cutoff = top_index
    if open_loop and top_due_ns is not None and written_ns is not None and mine:
        start_ns = top_due_ns - offsets[top_index]
        due_before = [r.index for r in mine if start_ns + offsets[r.index] <= written_ns]
        if due_before:
            cutoff = max(cutoff, due_before[-1])
    return sum(1 for r in mine if r.index <= cutoff)


def _schedule(info: RunInfo) -> tuple[list[TraceRequest] | None, str | None]:
    try:
        requests = read_trace(Path(info.config.trace_path))
    except TraceError as exc:
        return None, f"the trace could not be read ({exc}); lost counted from row indices"
    if info.config.max_requests is not None:
        requests = requests[: info.config.max_requests]
    return requests, None


def recover_run(run_dir: Path, *, cause: str | None = None, held: bool = False) -> Recovery:
    """Merge the journals of ``run_dir`` and mark it ``incomplete`` with ``cause`` (default:
    the process died). A run already complete, or already recovered, is left as it is.
    ``held``: the caller holds the run's lock already (the session, after a worker died).

    Raises ``RunDirError`` without a ``run.json``, ``RunLiveError`` while a replay process
    still holds the run, ``RecorderError`` when a journal cannot be merged (it stays where
    it is)."""
    run_dir = Path(run_dir)
    if read_run_info(run_dir) is None:
        raise RunDirError(f"{run_dir}: no {s.RUN_JSON}: not a run directory")
    lock = None if held else RunLock.claim(run_dir, doing="wait for it to end, or stop it")
    try:
        return _recover(run_dir, cause)
    finally:
        if lock is not None:
            lock.release(unlink=True)


def _recover(run_dir: Path, cause: str | None) -> Recovery:
    info = read_run_info(run_dir)  # again: another recovery may have finished meanwhile
    if info is None:
        raise RunDirError(f"{run_dir}: no {s.RUN_JSON}: not a run directory")
    dirs = _shard_dirs(run_dir, info.load.workers)
    pending = [d for _, d in dirs if (d / s.PARTS_DIR).exists()]
    if not pending and (info.complete or info.incomplete is not None):
        same = tuple(
            ShardRecovery(
                directory=d,
                shard=k,
                rows=_rows_of(d)[0],
                dispatched=0,
                lost=0,
                merged=False,
                exact=True,
            )
            for k, d in dirs
        )
        return Recovery(run_dir=run_dir, info=info, shards=same, changed=False)
    schedule: tuple[list[TraceRequest] | None, str | None] | None = None
    shards: list[ShardRecovery] = []
    for k, directory in dirs:
        parts = directory / s.PARTS_DIR
        record = parts / s.DISPATCH_FILE
        sent = set(read_dispatched(record)) if record.exists() else None
        written_ns = _journal_written_ns(directory)
        merged = False
        if parts.exists():
            merge_parts(directory)
            merged = True
        rows, indices, top_index, top_due_ns = _rows_of(directory)
        if sent is not None:
            shards.append(
                ShardRecovery(
                    directory=directory,
                    shard=k,
                    rows=rows,
                    dispatched=len(sent),
                    lost=len(sent - indices),
                    merged=merged,
                    exact=True,
                )
            )
            continue
        if not merged:  # the shard closed normally (or never started): every row is there
            shards.append(
                ShardRecovery(
                    directory=directory,
                    shard=k,
                    rows=rows,
                    dispatched=rows,
                    lost=0,
                    merged=False,
                    exact=True,
                )
            )
            continue
        if schedule is None:
            schedule = _schedule(info)
        dispatched = _inferred(
            info, k, schedule[0], top_index=top_index, top_due_ns=top_due_ns, written_ns=written_ns
        )
        dispatched = max(dispatched, rows)
        shards.append(
            ShardRecovery(
                directory=directory,
                shard=k,
                rows=rows,
                dispatched=dispatched,
                lost=dispatched - rows,
                merged=merged,
                exact=False,
            )
        )
    rows = sum(x.rows for x in shards)
    incomplete = Incomplete(
        cause=cause or _default_cause(info),
        scheduled=info.load.requests,
        rows=rows,
        dispatched=sum(x.dispatched for x in shards),
        lost=sum(x.lost for x in shards),
        exact=all(x.exact for x in shards),
    )
    recovered = replace(info, status=INCOMPLETE, incomplete=incomplete)
    write_run_info(run_dir, recovered)
    note = schedule[1] if schedule is not None else None
    return Recovery(run_dir=run_dir, info=recovered, shards=tuple(shards), changed=True, note=note)


def _inferred(
    info: RunInfo,
    k: int,
    requests: list[TraceRequest] | None,
    *,
    top_index: int | None,
    top_due_ns: int | None,
    written_ns: int | None,
) -> int:
    """Requests shard ``k`` certainly sent, from the schedule (a run without a dispatch
    record): a lower bound."""
    if requests is not None:
        mine = select_shard(requests, k, info.load.workers)
        origin = requests[0].arrival_s if requests else None
        offsets = dict(
            zip(
                (r.index for r in mine),
                due_offsets_ns([r.arrival_s for r in mine], info.load.time_factor, origin),
                strict=True,
            )
        )
    else:  # no trace: this shard's indices up to the last recorded, sessions aside
        n = max(1, info.load.workers)
        top = -1 if top_index is None else top_index
        mine = [_placeholder(i) for i in range(k, top + 1, n)]
        offsets = {}
    return _dispatched(
        mine,
        offsets,
        top_index=top_index,
        top_due_ns=top_due_ns,
        written_ns=written_ns,
        open_loop=info.load.mode == "open" and requests is not None,
    )


def _default_cause(info: RunInfo) -> str:
    if info.status == "running":
        return DIED_CAUSE
    return f"left as {info.status!r} with rows not merged"


def _placeholder(index: int) -> TraceRequest:
    return TraceRequest(
        index=index, request_id=str(index), arrival_s=0.0, input_tokens=0, output_tokens=0
    )
