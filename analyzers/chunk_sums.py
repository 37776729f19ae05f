"""Sums over the per-chunk lists without one row per chunk where the lists allow it.

``itl_counts`` (how many chunks after a request's first have each gap and token count) and
``window_tokens`` (content tokens arriving per throughput window) equal the same group-bys
over ``frames.chunk_frame``, row for row, but explode at most one list (the gaps, with the
token counts beside them where they are recorded) and only for the requests that need it:

* ITL: a request whose counts are not recorded and whose content tokens divide evenly over
  its chunks has ``n / m`` tokens in every chunk (the even spread of ``chunk_frame``), so
  only its gaps are exploded, beside that one count; recorded counts are exploded with the
  gaps; only an uneven spread takes ``chunk_frame``'s path.
* Windows: a request whose first and last chunk arrive in the same window puts all its
  content tokens there (no explode at all); only requests that straddle a window boundary
  are exploded, through ``chunk_frame``.

Must not import loadgen or httpx.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import polars as pl
import pyarrow.compute as pc

from analyzers import exprs as e
from analyzers.exprs import content_tokens
from analyzers.frames import ARRIVAL_NS, GAP_US, TOKENS_IN_CHUNK, RowSelection, chunk_frame
from traces import schema as s

WINDOW: Final = "_w"
"""Window index of ``window_tokens`` (from ``t0`` in ``window_ns`` steps)."""
WINDOW_TOKENS: Final = "_tokens"
COUNT: Final = "_count"
"""Chunks counted by ``itl_counts``."""


def _known() -> pl.Expr:
    ct = pl.col(s.CHUNK_TOKENS)
    return ct.is_not_null() & (ct.list.len() == pl.col(s.CHUNK_OFFSETS_US).list.len())


def even_spreads(lf: pl.LazyFrame, most: int = 8) -> tuple[int, ...]:
    """The tokens per chunk of the evenly spread requests of ``lf`` (counts not recorded,
    content tokens a multiple of the chunks, two chunks or more), the ``most`` commonest
    (collects a per-request count: run it on rows in memory)."""
    offsets = pl.col(s.CHUNK_OFFSETS_US)
    m = offsets.list.len().cast(pl.Int64)
    n = content_tokens()
    spreads = (
        lf.filter((m > 1) & ~_known() & (n % m == 0))
        .group_by((n // m).alias("_k"))
        .agg(pl.len().alias("_n"))
        .sort(["_n", "_k"], descending=[True, False])
        .head(most)
        .collect()
    )
    return tuple(int(k) for k in spreads["_k"])


def _flat_gap_counts(rows: pl.LazyFrame) -> pl.LazyFrame:
    """(``GAP_US``, ``COUNT``) over the chunks after the first of ``rows`` (each with two
    chunks or more): the offsets are exploded as one column and differenced in a row; the
    differences across a request boundary (a request's first offset minus the previous
    request's last) are counted apart, per request, and taken off. Cheaper than a
    per-request ``list.diff`` and an explode carrying other columns."""
    offsets = pl.col(s.CHUNK_OFFSETS_US)
    flat = rows.select(offsets).map_batches(
        _flat_differences_counted, schema={GAP_US: pl.Int64, COUNT: pl.Int64}
    )
    seams = (
        rows.select(
            (
                offsets.list.first().cast(pl.Int64) - offsets.list.last().cast(pl.Int64).shift(1)
            ).alias(GAP_US)
        )
        .drop_nulls()
        .group_by(GAP_US)
        .agg(pl.len().cast(pl.Int64).alias("_seams"))
    )
    return (
        flat.join(seams, on=GAP_US, how="left")
        .select(GAP_US, (pl.col(COUNT) - pl.col("_seams").fill_null(0)).alias(COUNT))
        .filter(pl.col(COUNT) > 0)
    )


def _flat_differences_counted(frame: pl.DataFrame) -> pl.DataFrame:
    """(``GAP_US``, ``COUNT``): how often each difference of consecutive values occurs in
    ``frame``'s one list column read as one flat column (nulls left out). Differenced by
    Polars in 32 bits where the values' range allows it (exact: every difference then fits),
    counted by Arrow's hash kernel: together a few times cheaper than a Polars group-by on
    64-bit keys, the same counts."""
    flat = frame.to_series(0).explode()
    lo, hi = flat.min(), flat.max()
    if not isinstance(lo, int) or not isinstance(hi, int):
        return pl.DataFrame(schema={GAP_US: pl.Int64, COUNT: pl.Int64})
    narrow = lo >= -(2**31) and hi < 2**31 and hi - lo < 2**31
    counted = pc.value_counts(flat.cast(pl.Int32 if narrow else pl.Int64).diff().to_arrow())
    out = pl.DataFrame(
        {
            GAP_US: pl.Series(counted.field("values")).cast(pl.Int64),
            COUNT: pl.Series(counted.field("counts")).cast(pl.Int64),
        }
    )
    return out.drop_nulls(GAP_US)


def itl_counts(
    lf: pl.LazyFrame, keys: Sequence[str] = (), spreads: Sequence[int] = ()
) -> pl.LazyFrame:
    """How many chunks after a request's first have each (``keys``..., ``GAP_US``,
    ``TOKENS_IN_CHUNK``): ``chunk_frame(lf, keep=keys)`` without its first chunks, grouped
    and counted (``COUNT``), the same counts. ``keys`` are columns of ``lf``; each key
    column makes the group-by dearer: a caller with few classes may rather filter and call
    this once per class. ``spreads`` (without ``keys``; see ``even_spreads``): the evenly
    spread requests with these tokens per chunk take the cheapest path, one per value."""
    offsets = pl.col(s.CHUNK_OFFSETS_US)
    m = offsets.list.len().cast(pl.Int64)
    n = content_tokens()
    kept = [pl.col(k) for k in keys]
    rows = lf.filter(m > 1)
    known = _known()
    even = ~known & (n % m == 0)
    spreads = () if keys else tuple(spreads)
    flat = [
        _flat_gap_counts(rows.filter(even & (n // m == k))).select(
            GAP_US, pl.lit(k, dtype=pl.Int32).alias(TOKENS_IN_CHUNK), COUNT
        )
        for k in spreads
    ]
    gap = offsets.list.diff().alias(GAP_US)
    even_chunks = (
        rows.filter(even & ~(n // m).is_in(list(spreads)))
        .select(*kept, gap, (n // m).alias(TOKENS_IN_CHUNK))
        .explode(GAP_US)
    )
    recorded = pl.col(s.CHUNK_TOKENS).list.eval(
        pl.element().fill_null(1).clip(lower_bound=1).cast(pl.Int64)
    )
    recorded_chunks = (
        rows.filter(known)
        .select(*kept, gap, recorded.alias(TOKENS_IN_CHUNK))
        .explode([GAP_US, TOKENS_IN_CHUNK])
    )
    uneven_chunks = chunk_frame(rows.filter(~known & (n % m != 0)), keep=keys)
    # One integer key per (gap, tokens): a group-by on one Int64 column is the cheapest.
    # tokens <= 2**31 - 1 and -2**31 <= gap < 2**31 (both are Int32 in the run file).
    key = pl.col(TOKENS_IN_CHUNK).cast(pl.Int64) * _SHIFT + (pl.col(GAP_US).cast(pl.Int64) + _HALF)
    parts = [
        part.filter(pl.col(GAP_US).is_not_null())
        .select(*kept, key.alias(_KEY))
        .group_by([*keys, _KEY])
        .agg(pl.len().cast(pl.Int64).alias(COUNT))
        for part in (even_chunks, recorded_chunks, uneven_chunks)
    ]
    keyed = (
        pl.concat(parts, how="vertical")
        .group_by([*keys, _KEY])
        .agg(pl.col(COUNT).sum())
        .select(
            *kept,
            (pl.col(_KEY) % _SHIFT - _HALF).alias(GAP_US),
            (pl.col(_KEY) // _SHIFT).cast(pl.Int32).alias(TOKENS_IN_CHUNK),
            pl.col(COUNT),
        )
    )
    if not flat:
        return keyed
    group = [*keys, GAP_US, TOKENS_IN_CHUNK]
    return pl.concat([keyed, *flat], how="vertical").group_by(group).agg(pl.col(COUNT).sum())


_KEY: Final = "_gap_tokens"
_SHIFT: Final = 2**32
_HALF: Final = 2**31


def window_tokens(lf: pl.LazyFrame, t0: int, window_ns: int) -> pl.LazyFrame:
    """Content tokens arriving per window (``WINDOW``, ``WINDOW_TOKENS``): the sum of
    ``TOKENS_IN_CHUNK`` over ``chunk_frame(lf)`` grouped by ``(ARRIVAL_NS - t0) //
    window_ns``, the same sums."""
    offsets = pl.col(s.CHUNK_OFFSETS_US)
    sent = pl.col(s.SENT_NS)

    def window(offset_us: pl.Expr) -> pl.Expr:
        return (sent + offset_us.cast(pl.Int64) * 1000 - t0) // window_ns

    rows = lf.filter(offsets.list.len() > 0)
    # Offsets need not be sorted: a request whose earliest and latest chunk share a window
    # has every chunk in it.
    first, last = window(offsets.list.min()), window(offsets.list.max())
    inside = (
        rows.filter(first == last)
        .select(first.alias(WINDOW), content_tokens().alias(WINDOW_TOKENS))
        .group_by(WINDOW)
        .agg(pl.col(WINDOW_TOKENS).sum())
    )
    straddling = (
        chunk_frame(rows.filter(first != last))
        .group_by(((pl.col(ARRIVAL_NS) - t0) // window_ns).alias(WINDOW))
        .agg(pl.col(TOKENS_IN_CHUNK).cast(pl.Int64).sum().alias(WINDOW_TOKENS))
    )
    return (
        pl.concat([inside, straddling], how="vertical")
        .group_by(WINDOW)
        .agg(pl.col(WINDOW_TOKENS).cast(pl.Int64).sum())
    )


def itl_keys(by_workload: bool) -> list[str]:
    """The key columns of ``itl_counts_by_class``' frame."""
    return [e.CLASS, GAP_US, TOKENS_IN_CHUNK] if by_workload else [GAP_US, TOKENS_IN_CHUNK]


_SPLIT_CLASSES: Final = 16
"""Up to this many classes, ITL counts are taken one class at a time (a group-by on
integers alone is much cheaper than one that also keys on a string)."""


def workloads(lf: pl.LazyFrame) -> tuple[str, ...]:
    """The workload classes of ``lf``'s rows, sorted (reads the workload column)."""
    column = lf.select(pl.col(s.WORKLOAD).cast(pl.String).unique()).collect().to_series()
    return tuple(sorted(column.drop_nulls().to_list()))


def itl_counts_by_class(
    lf: pl.LazyFrame, by_workload: bool, classes: tuple[str, ...] | None = None
) -> pl.LazyFrame:
    """How many ok requests' chunks after the first have each (``CLASS``,) gap and tokens.
    ``classes``: the run's workloads, to count one class at a time (None: one group-by)."""
    # Counting equal (gap, tokens) pairs keeps the percentiles exact at a fraction of the rows.
    rows = lf.filter(e.is_ok())
    if not by_workload:
        return itl_counts(rows, spreads=even_spreads(rows))
    rows = rows.with_columns(pl.col(s.WORKLOAD).cast(pl.String).alias(e.CLASS))
    if not classes or len(classes) > _SPLIT_CLASSES:  # no rows yet (a live run): no classes
        return itl_counts(rows, [e.CLASS])
    per_class = []
    for c in classes:
        of_class = rows.filter(pl.col(e.CLASS) == c)
        per_class.append(
            itl_counts(of_class, spreads=even_spreads(of_class)).select(
                pl.lit(c, dtype=pl.String).alias(e.CLASS), pl.all()
            )
        )
    return pl.concat(per_class, how="vertical")


def itl_weights(counted: pl.LazyFrame, by_workload: bool) -> pl.LazyFrame:
    """Distinct (``CLASS``, gap, tokens) from ``itl_counts_by_class``, with ``ITL_MS`` =
    gap / tokens, ``_w`` the tokens they stand for (count x tokens) and ``_gw`` their
    summed gaps, µs (count x gap: an integer, so a mean's numerator is exact whatever
    order the group-by yields its rows in); ``CLASS`` is ``exprs.ALL`` without
    ``by_workload``."""
    count = pl.col(COUNT).cast(pl.Int64)
    return counted.select(
        pl.col(e.CLASS) if by_workload else pl.lit(e.ALL).alias(e.CLASS),
        e.itl_ms(),
        (count * pl.col(TOKENS_IN_CHUNK).cast(pl.Int64)).alias("_w"),
        (count * pl.col(GAP_US).cast(pl.Int64)).alias("_gw"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestPass:
    """What ``metrics.analyze_pass`` read from a run, for another analysis of the same rows
    (the report's series) to reuse instead of reading the run again: the per-request rows
    (``metrics.request_frame``) and the ITL counts (``itl_counts_by_class``), in memory
    where the run was read slice by slice, else lazy over the run."""

    run: str
    selection: RowSelection
    by_workload: bool
    requests: pl.LazyFrame
    itl_counts: pl.LazyFrame
