"""Lazy Polars frames of run files: one run directory, a Parquet file, or a glob of shards.

``scan_run`` checks the schema on entry (``InvalidRunError`` naming the missing columns) and
fills the optional run columns an older or hand-built file lacks with typed nulls, so that
every expression downstream can name any column of ``RUN_SCHEMA``. ``select_rows`` applies
warm-up exclusion, start/end trimming and a steady-state window. ``chunk_frame`` and
``token_frame`` explode ``chunk_offsets_us`` into one row per content chunk or per token.
Nothing here collects; ``run_info`` and ``run_health`` read ``run.json`` files.

Must not import loadgen or httpx.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import polars as pl

from analyzers.errors import InvalidRunError
from analyzers.validity import CapHold
from traces import schema as s
from traces.errors import NewerRunInfoError, TraceError
from traces.io import (
    is_journal,
    read_journal,
    read_run_info,
    row_group_rows,
    run_request_files,
)
from traces.runinfo import RunInfo, Stall

REQUIRED_COLUMNS: Final = (
    s.REQUEST_ID,
    s.DUE_NS,
    s.SENT_NS,
    s.FIRST_TOKEN_NS,
    s.END_NS,
    s.OUTCOME,
    s.CHUNK_OFFSETS_US,
)
"""Columns without which a file is not a run; every other run column is filled when absent."""

DEFAULT_WORKLOAD: Final = "text"

# Columns of the exploded frames (derived, so named here rather than in traces.schema).
CHUNK_INDEX: Final = "chunk_index"
"""0-based index of a content chunk within its request."""
TOKEN_INDEX: Final = "token_index"
"""0-based index of a content token within its request."""
ARRIVAL_NS: Final = "arrival_ns"
"""Epoch ns at which the chunk (and every token in it) arrived: ``sent_ns + offset_us x 1000``."""
TOKENS_IN_CHUNK: Final = "tokens_in_chunk"
"""Tokens carried by the chunk (>= 1); see ``exprs.content_tokens`` for how it is known."""
GAP_US: Final = "gap_us"
"""µs since the previous content chunk of the request; null for the first chunk."""
FIRST_TOKEN_INDEX: Final = "chunk_first_token_index"
"""Token index of the chunk's first token."""
ROW: Final = "_row"
"""Row number of the request in the scanned frame (the explode key)."""


@functools.cache
def run_polars_schema() -> pl.Schema:
    """``RUN_SCHEMA`` as a Polars schema."""
    frame = pl.from_arrow(s.RUN_SCHEMA.empty_table())
    assert isinstance(frame, pl.DataFrame)
    return frame.schema


def run_files(run: Path | str) -> list[Path]:
    """The Parquet files of a run directory, a Parquet file, or a glob of either."""
    text = str(run)
    files: list[Path] = []
    if any(ch in text for ch in "*?["):
        root = Path("/") if Path(text).is_absolute() else Path()
        pattern = text.lstrip("/") if Path(text).is_absolute() else text
        for match in sorted(root.glob(pattern)):
            files.extend(run_request_files(match) if match.is_dir() else [match])
    else:
        path = Path(text)
        if path.is_dir():
            files = run_request_files(path)
        elif path.exists():
            files = [path]
    return files


def scan_run(run: Path | str) -> pl.LazyFrame:
    """Scan the request rows of a run lazily, schema checked, optional columns filled.

    Raises ``InvalidRunError`` when nothing matches, a file is not Parquet, or a required
    column (``REQUIRED_COLUMNS``) is missing; the message names the missing columns.
    """
    files = run_files(run)
    if not files:
        raise InvalidRunError(
            f"{run}: no run rows found (expected a run directory with {s.REQUESTS_FILE})"
        )
    try:
        parquet = [str(f) for f in files if not is_journal(f)]
        frames = [pl.scan_parquet(parquet)] if parquet else []
        # A run still going (or killed) has a journal: read it whole, it is small.
        frames += [pl.DataFrame(read_journal(f)).lazy() for f in files if is_journal(f)]
        lf = frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical_relaxed")
        names = set(lf.collect_schema().names())
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InvalidRunError(f"{run}: not a readable run file ({exc})") from exc
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise InvalidRunError(f"{run}: not a run file: missing column(s) {', '.join(missing)}")
    fill: list[pl.Expr] = []
    for name, dtype in run_polars_schema().items():
        if name in names:
            continue
        default: Any = None
        if name == s.WORKLOAD:
            default = DEFAULT_WORKLOAD
        elif name == s.WARMUP:
            default = False
        fill.append(pl.lit(default, dtype=dtype).alias(name))
    return lf.with_columns(fill) if fill else lf


@dataclass(frozen=True, slots=True, kw_only=True)
class RowSelection:
    """Which requests an analysis keeps, by their due time (seconds from the run's first due).

    ``trim_start_s``/``trim_end_s`` drop requests due within that long of the first/last due
    time (warm-up and cool-down); ``start_s``/``end_s`` keep only a steady-state window
    ``[start_s, end_s)``. ``exclude_warmup`` drops rows flagged ``warmup``. Trimming is
    measured on all rows, warm-up ones included.
    """

    exclude_warmup: bool = True
    trim_start_s: float = 0.0
    trim_end_s: float = 0.0
    start_s: float | None = None
    end_s: float | None = None


def select_rows(lf: pl.LazyFrame, selection: RowSelection) -> pl.LazyFrame:
    """Apply a ``RowSelection`` lazily (one pass; bounds are window expressions)."""
    due = pl.col(s.DUE_NS)
    first, last = due.min(), due.max()
    keep: list[pl.Expr] = []
    if selection.trim_start_s > 0:
        keep.append(due >= first + int(selection.trim_start_s * 1e9))
    if selection.trim_end_s > 0:
        keep.append(due <= last - int(selection.trim_end_s * 1e9))
    if selection.start_s is not None:
        keep.append(due >= first + int(selection.start_s * 1e9))
    if selection.end_s is not None:
        keep.append(due < first + int(selection.end_s * 1e9))
    if keep:
        lf = lf.filter(pl.all_horizontal(keep))
    if selection.exclude_warmup:
        lf = lf.filter(~pl.col(s.WARMUP).fill_null(False))
    return lf


SLICE_ROWS: Final = 65_536
"""Most requests per slice of ``summed_in_slices`` (the recorder's Parquet row group): their
chunks exploded stay a few hundred MiB."""
SLICE_WORKERS: Final = 4
"""Slices of ``summed_in_slices`` in flight at once (at most Polars' thread count)."""


def summed_in_slices(
    run: Path | str,
    selection: RowSelection,
    queries: Sequence[tuple[Callable[[pl.LazyFrame], pl.LazyFrame], Sequence[str] | None]],
    *,
    slice_rows: int = SLICE_ROWS,
    columns: Sequence[str] | None = None,
) -> list[pl.LazyFrame] | None:
    """Each ``(query, keys)`` over the selected rows of ``run``, computed ``slice_rows``
    requests at a time: each slice is read once, every query runs on it, and the slices'
    results are put together: with ``keys`` (a group-by on ``keys`` whose other columns are
    sums or counts), summed per key; with ``keys`` None (a per-request query, one row per
    request), concatenated in row order. The same frames as
    ``query(select_rows(scan_run(run), selection))`` without ever holding more than one
    slice's chunks (a run of fewer rows is one slice, read once). None where that cannot
    be done slice by slice (a selection that trims or windows by the run's first and last
    due time): then the caller runs the queries whole. ``columns``: the only
    run columns the queries read (None: all)."""
    if (
        selection.trim_start_s > 0
        or selection.trim_end_s > 0
        or selection.start_s is not None
        or selection.end_s is not None
    ):
        return None
    scan = scan_run(run)
    rows = int(scan.select(pl.len()).collect().item())
    bounds = slice_bounds(run_files(run), rows, slice_rows)

    def one_slice(bound: tuple[int, int]) -> list[pl.DataFrame]:
        # Read once: every query of the slice works on the rows in memory.
        part = select_rows(scan.slice(bound[0], bound[1]), selection)
        part = (part.select(columns) if columns is not None else part).collect().lazy()
        return pl.collect_all([query(part) for query, _ in queries])

    parts: list[list[pl.DataFrame]] = [[] for _ in queries]
    # A slice decodes on one core: a few at a time keep the others busy (Polars releases
    # the GIL while it collects); results come back in slice order.
    workers = max(1, min(SLICE_WORKERS, pl.thread_pool_size()))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for frames in pool.map(one_slice, bounds):
            for i, frame in enumerate(frames):
                parts[i].append(frame)
    out = []
    for (_, keys), frames in zip(queries, parts, strict=True):
        whole = pl.concat(frames, how="vertical").lazy()
        if keys is None:
            out.append(whole)
            continue
        summed = [c for c in frames[0].columns if c not in keys]
        out.append(whole.group_by(list(keys)).agg(pl.col(c).cast(pl.Int64).sum() for c in summed))
    return out


def slice_bounds(files: Sequence[Path], rows: int, slice_rows: int) -> list[tuple[int, int]]:
    """``(start, length)`` of the slices ``summed_in_slices`` reads, in row order, over the
    ``rows`` rows of ``files`` (as ``scan_run`` orders them: Parquet files, then journals):
    one slice per Parquet row group where a group holds at most ``slice_rows`` rows, small
    consecutive groups merged up to ``slice_rows``, larger ones (and the journals' rows) cut
    into equal parts of at most ``slice_rows``. A row group is compressed and decoded
    whole: a slice that ends inside one makes the next slice decode it again."""
    groups: list[int] = []
    for f in files:
        if not is_journal(f):
            groups.extend(row_group_rows(f))
    if sum(groups) < rows:  # the journals' rows come last
        groups.append(rows - sum(groups))
    bounds: list[tuple[int, int]] = []
    start = 0
    for size in groups:
        if bounds and bounds[-1][1] + size <= slice_rows:
            bounds[-1] = (bounds[-1][0], bounds[-1][1] + size)
        else:
            parts = -(-size // max(1, slice_rows))
            bounds.extend(
                (start + size * k // parts, size * (k + 1) // parts - size * k // parts)
                for k in range(parts)
            )
        start += size
    return [b for b in bounds if b[1] > 0] or [(0, 1)]


def _known_chunk_tokens() -> pl.Expr:
    """True where ``chunk_tokens`` gives a count for every content chunk."""
    ct = pl.col(s.CHUNK_TOKENS)
    return ct.is_not_null() & (ct.list.len() == pl.col(s.CHUNK_OFFSETS_US).list.len())


def chunk_frame(lf: pl.LazyFrame, *, keep: Sequence[str] = ()) -> pl.LazyFrame:
    """One row per content chunk: ``REQUEST_ID``, ``keep`` columns, ``CHUNK_INDEX``,
    ``ARRIVAL_NS``, ``TOKENS_IN_CHUNK``, ``FIRST_TOKEN_INDEX``, ``GAP_US``.

    Tokens per chunk are ``chunk_tokens`` where recorded (a null or zero entry counts as one
    token); otherwise the request's content tokens (``exprs.content_tokens``) are spread as
    evenly as integers allow over its ``m`` chunks: chunk ``i`` carries
    ``floor((i+1) n / m) - floor(i n / m)``, so the counts sum to ``n``. Requests without
    content chunks yield no rows. Requests with recorded counts come first.
    """
    # Imported here: exprs imports this module's column names.
    from analyzers.exprs import content_tokens

    offsets = pl.col(s.CHUNK_OFFSETS_US)
    m = offsets.list.len()
    common = [
        pl.col(s.REQUEST_ID),
        *(pl.col(c) for c in keep),
        pl.col(s.SENT_NS),
        offsets.alias("_off"),
        offsets.list.diff().alias(GAP_US),
        pl.int_ranges(0, m, dtype=pl.Int64).alias(CHUNK_INDEX),
    ]
    rows = lf.filter(m > 0)
    known = _known_chunk_tokens()
    counts = pl.col(s.CHUNK_TOKENS).list.eval(
        pl.element().fill_null(1).clip(lower_bound=1).cast(pl.Int64)
    )
    recorded = (
        rows.filter(known)
        .select(*common, counts.alias("_k"), counts.list.eval(pl.element().cum_sum()).alias("_c"))
        .explode(["_off", GAP_US, CHUNK_INDEX, "_k", "_c"])
        .with_columns((pl.col("_c") - pl.col("_k")).alias("_start"))
    )
    i, n, mm = pl.col(CHUNK_INDEX), pl.col("_n"), pl.col("_m")
    spread = (
        rows.filter(~known)
        .select(*common, content_tokens().alias("_n"), m.cast(pl.Int64).alias("_m"))
        .explode(["_off", GAP_US, CHUNK_INDEX])
        .with_columns(
            (((i + 1) * n) // mm - (i * n) // mm).alias("_k"), ((i * n) // mm).alias("_start")
        )
    )
    out = [
        pl.col(s.REQUEST_ID),
        *(pl.col(c) for c in keep),
        i.cast(pl.Int32),
        (pl.col(s.SENT_NS) + pl.col("_off").cast(pl.Int64) * 1000).alias(ARRIVAL_NS),
        pl.col("_k").cast(pl.Int32).alias(TOKENS_IN_CHUNK),
        pl.col("_start").cast(pl.Int32).alias(FIRST_TOKEN_INDEX),
        pl.col(GAP_US).cast(pl.Int64),
    ]
    return pl.concat([recorded.select(out), spread.select(out)], how="vertical")


def token_frame(lf: pl.LazyFrame, *, keep: Sequence[str] = ()) -> pl.LazyFrame:
    """One row per content token: ``REQUEST_ID``, ``keep``, ``TOKEN_INDEX``, ``ARRIVAL_NS``,
    ``CHUNK_INDEX``, ``TOKENS_IN_CHUNK``.

    A chunk of ``k`` tokens yields ``k`` rows sharing its arrival; token indices run from 0
    without gaps within a request.
    """
    chunks = chunk_frame(lf, keep=keep)
    return (
        chunks.with_columns(pl.int_ranges(0, pl.col(TOKENS_IN_CHUNK), dtype=pl.Int32).alias("_j"))
        .explode("_j")
        .select(
            pl.col(s.REQUEST_ID),
            *(pl.col(c) for c in keep),
            (pl.col(FIRST_TOKEN_INDEX) + pl.col("_j")).alias(TOKEN_INDEX),
            pl.col(ARRIVAL_NS),
            pl.col(CHUNK_INDEX),
            pl.col(TOKENS_IN_CHUNK),
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunHealth:
    """The generator's health as ``run.json`` recorded it (the worst over the run
    directories read); None where no ``run.json`` with a ``health`` section was found."""

    runs: int
    schedule_lag_p99_ms: float | None
    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None = None
    """The longest event-loop stall: every arrival stamped during it was late by up to it."""
    cpu_utilisation: float | None
    client_bound: bool | None
    stamp_delay_p99_ms: float | None = None
    """How long arrived bytes waited for the event loop to stamp them (None: not recorded,
    a run.json before version 4)."""
    stamp_delay_max_ms: float | None = None
    cap: CapHold | None = None
    """What a ``--max-inflight`` cap held back (None: no cap)."""
    stalls: tuple[Stall, ...] = ()
    """The event-loop stalls ``run.json``'s stall logs list (none: none over 20 ms, or a
    run.json before version 5)."""


def run_info(directory: Path) -> RunInfo | None:
    """The ``run.json`` of a run directory (None without one).

    A ``run.json`` written by a newer llm-loadgen is refused as bad input
    (``NewerRunInfoError``, exit 2); one that cannot be read makes the run invalid
    (``InvalidRunError``, exit 3), as an unreadable row file does.
    """
    try:
        return read_run_info(directory)
    except NewerRunInfoError:
        raise
    except TraceError as exc:
        raise InvalidRunError(str(exc)) from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedScale:
    """The server's time scale (wall seconds per model second) a run recorded, and where
    its preflight read it (``run.json`` ``deployment``)."""

    time_scale: float
    source: str


def recorded_time_scale(run: Path | str) -> RecordedScale | None:
    """The time scale in the run's ``run.json`` deployment (a simulator publishes it), or
    None when the run recorded none."""
    info = run_info(Path(str(run)))
    if info is None or info.deployment is None:
        return None
    for fact in info.deployment.facts:
        if fact.key == "time_scale" and isinstance(fact.value, int | float) and fact.value > 0:
            return RecordedScale(time_scale=float(fact.value), source=fact.source)
    return None


def run_dirs(run: Path | str) -> list[Path]:
    """The directories holding a run's files (a run directory, or its shards')."""
    dirs: list[Path] = []
    for f in run_files(run):
        d = f.parent.parent if f.parent.name == s.PARTS_DIR else f.parent
        if d not in dirs:
            dirs.append(d)
    return dirs


def run_health(run: Path | str) -> RunHealth:
    """Read the ``health`` section of every ``run.json`` next to the run's files."""
    healths = [
        info.health
        for info in (run_info(d) for d in run_dirs(run))
        if info is not None and info.health is not None
    ]
    if not healths:
        return RunHealth(
            runs=0,
            schedule_lag_p99_ms=None,
            loop_lag_p99_ms=None,
            loop_lag_max_ms=None,
            cpu_utilisation=None,
            client_bound=None,
        )
    stamps = [h.stamp_delay_ms for h in healths if h.stamp_delay_ms is not None]
    caps = [h.backpressure for h in healths if h.backpressure is not None]
    stalls = tuple(st for h in healths if h.stalls is not None for st in h.stalls.stalls)
    return RunHealth(
        runs=len(healths),
        schedule_lag_p99_ms=max(h.schedule_lag_ms.p99_ms for h in healths),
        loop_lag_p99_ms=max(h.loop_lag_ms.p99_ms for h in healths),
        loop_lag_max_ms=max(h.loop_lag_ms.max_ms for h in healths),
        cpu_utilisation=max(h.cpu_utilisation for h in healths),
        client_bound=any(h.client_bound for h in healths),
        stamp_delay_p99_ms=max(d.p99_ms for d in stamps) if stamps else None,
        stamp_delay_max_ms=max(d.max_ms for d in stamps) if stamps else None,
        stalls=stalls,
        cap=CapHold(
            max_inflight=max(c.max_inflight for c in caps),
            held=sum(c.held for c in caps),
            hold_p99_ms=max(c.hold_ms.p99_ms for c in caps),
            dispatch_lag_p99_ms=max(c.dispatch_lag_ms.p99_ms for c in caps),
        )
        if caps
        else None,
    )
