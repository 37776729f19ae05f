"""Summary statistics of a workload trace (``loadgen trace info``), computed with pyarrow.compute.

Definitions (all over the rows of a validated trace, in file order):

* ``duration_s`` = last ``arrival_s`` - first ``arrival_s``.
* ``mean_rate_rps`` = (rows - 1) / duration_s, i.e. 1 / mean inter-arrival gap; None when the
  duration is 0.
* ``interarrival_cv`` = population standard deviation / mean of the gaps between consecutive
  arrivals (1 for Poisson, above 1 for bursty traffic); None with fewer than 2 gaps or a zero
  mean gap.
* length percentiles use linear interpolation between order statistics (numpy's default).
* ``prefix_reuse_ratio`` = fraction of prefix block occurrences whose id appeared earlier in
  the trace: (blocks - distinct blocks) / blocks. With Mooncake's chained hashes this is the
  fraction of prompt blocks an ideal, unbounded prefix cache would hit.
* ``image_tokens_sum`` sums the ``image_tokens`` column where it is set (None when never set);
  ``expected_prompt_tokens`` = sum of ``input_tokens`` + ``image_tokens_sum``.

This module imports pyarrow and ``traces.schema`` only (no polars).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from traces import schema as s

QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthStats:
    """Distribution of a token-length column, in tokens."""

    mean: float
    p50: float
    p90: float
    p99: float
    max: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassStats:
    """Request count and length distributions of one workload class (or of all rows)."""

    workload: str
    requests: int
    input_tokens: LengthStats
    output_tokens: LengthStats


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceStats:
    """What ``loadgen trace info`` reports; see the module docstring for each definition."""

    rows: int
    duration_s: float
    mean_rate_rps: float | None
    interarrival_cv: float | None
    overall: ClassStats
    classes: tuple[ClassStats, ...]
    prefix_blocks: int
    prefix_reuse_ratio: float | None
    images: int
    image_tokens_sum: int | None
    expected_prompt_tokens: int
    sessions: int


def length_stats(values: pa.Array | pa.ChunkedArray) -> LengthStats:
    """Mean, p50/p90/p99 (linear interpolation) and max of a non-empty integer column."""
    q = pc.quantile(values, q=list(QUANTILES), interpolation="linear").to_pylist()
    return LengthStats(
        mean=float(pc.mean(values).as_py()),
        p50=float(q[0]),
        p90=float(q[1]),
        p99=float(q[2]),
        max=int(pc.max(values).as_py()),
    )


def _class_stats(table: pa.Table, workload: str) -> ClassStats:
    return ClassStats(
        workload=workload,
        requests=table.num_rows,
        input_tokens=length_stats(table.column(s.INPUT_TOKENS)),
        output_tokens=length_stats(table.column(s.OUTPUT_TOKENS)),
    )


def interarrival_cv(arrival: pa.Array | pa.ChunkedArray) -> float | None:
    """Coefficient of variation of the gaps between consecutive arrivals (see module doc)."""
    values = pa.chunked_array([arrival]) if isinstance(arrival, pa.Array) else arrival
    flat = values.combine_chunks()
    n = len(flat)
    if n < 3:
        return None
    gaps = pc.subtract(flat.slice(1), flat.slice(0, n - 1))
    mean = pc.mean(gaps).as_py()
    if not mean:
        return None
    return float(pc.stddev(gaps, ddof=0).as_py()) / float(mean)


def prefix_reuse(blocks: pa.ChunkedArray) -> tuple[int, float | None]:
    """(block occurrences, fraction that repeat an earlier id) of a ``prefix_blocks`` column."""
    flat = pc.list_flatten(blocks)
    total = len(flat)
    if total == 0:
        return 0, None
    distinct = int(pc.count_distinct(flat).as_py())
    return total, (total - distinct) / total


def trace_stats(table: pa.Table) -> TraceStats:
    """Compute ``TraceStats`` of a trace table already conformed to ``TRACE_SCHEMA``."""
    arrival = table.column(s.ARRIVAL_S)
    n = table.num_rows
    duration = float(pc.max(arrival).as_py() - pc.min(arrival).as_py()) if n else 0.0
    workloads = pc.cast(table.column(s.WORKLOAD), pa.string())
    classes = []
    for name in sorted(v for v in pc.unique(workloads).to_pylist() if v is not None):
        classes.append(_class_stats(table.filter(pc.equal(workloads, name)), name))
    blocks, reuse = prefix_reuse(table.column(s.PREFIX_BLOCKS))
    images = int(pc.sum(pc.fill_null(pc.list_value_length(table.column(s.IMAGES)), 0)).as_py() or 0)
    image_tokens = table.column(s.IMAGE_TOKENS)
    image_sum = None if image_tokens.null_count == n else int(pc.sum(image_tokens).as_py() or 0)
    input_sum = int(pc.sum(pc.cast(table.column(s.INPUT_TOKENS), pa.int64())).as_py() or 0)
    sessions = int(pc.count_distinct(table.column(s.SESSION_ID), mode="only_valid").as_py())
    return TraceStats(
        rows=n,
        duration_s=duration,
        mean_rate_rps=(n - 1) / duration if duration > 0 else None,
        interarrival_cv=interarrival_cv(arrival),
        overall=_class_stats(table, "all"),
        classes=tuple(classes),
        prefix_blocks=blocks,
        prefix_reuse_ratio=reuse,
        images=images,
        image_tokens_sum=image_sum,
        expected_prompt_tokens=input_sum + (image_sum or 0),
        sessions=sessions,
    )
