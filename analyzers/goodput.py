"""Goodput, DistServe-style: the share and rate of requests that completed within their SLOs.

A request is *good* when its outcome is ``ok`` and it meets every SLO that applies to it:
``ttft <= slo_ttft_ms`` and ``tpot <= slo_tpot_ms``. A request's SLOs are its own trace
columns (``slo_ttft_ms``, ``slo_tpot_ms``) where set, else the global targets; a missing SLO
is no constraint, and a request with no token after its first chunk (TPOT undefined) meets
any TPOT SLO. Failed requests are never good. TTFT is measured from the due time by default
(the coordinated-omission-free one), or from send.

Must not import loadgen or httpx.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import polars as pl

from analyzers import exprs as e
from traces import schema as s

GOOD: Final = "good"
HAS_SLO: Final = "has_slo"
TTFT_MISS: Final = "ttft_miss"
TPOT_MISS: Final = "tpot_miss"

TtftBasis = Literal["due", "sent"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SLOTargets:
    """Global SLOs (ms), applied to requests whose trace sets none; None: no global SLO."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    ttft_basis: TtftBasis = "due"


@dataclass(frozen=True, slots=True, kw_only=True)
class Goodput:
    """Goodput of one class (or the run): ``good / requests`` and ``good / duration_s``.

    ``slo_requests`` had at least one SLO; ``ttft_misses``/``tpot_misses`` count ok
    requests over each SLO (a request may miss both); ``failed`` were not ok.
    """

    requests: int
    slo_requests: int
    good: int
    fraction: float
    rate_per_s: float
    ttft_misses: int
    tpot_misses: int
    failed: int


def _slo(column: str, value: float | None) -> pl.Expr:
    return pl.col(column).cast(pl.Float64).fill_null(pl.lit(value, dtype=pl.Float64))


def _ttft(targets: SLOTargets) -> pl.Expr:
    return e.ttft_from_due_ms() if targets.ttft_basis == "due" else e.ttft_ms()


def ttft_miss(targets: SLOTargets) -> pl.Expr:
    """True when an ok request's TTFT exceeds its TTFT SLO (null TTFT counts as a miss)."""
    slo = _slo(s.SLO_TTFT_MS, targets.ttft_ms)
    return (slo.is_not_null() & ~(_ttft(targets) <= slo).fill_null(False)).alias(TTFT_MISS)


def tpot_miss(targets: SLOTargets) -> pl.Expr:
    """True when an ok request's TPOT exceeds its TPOT SLO (undefined TPOT never misses)."""
    slo = _slo(s.SLO_TPOT_MS, targets.tpot_ms)
    return (slo.is_not_null() & (e.tpot_ms() > slo).fill_null(False)).alias(TPOT_MISS)


def has_slo(targets: SLOTargets) -> pl.Expr:
    """True when at least one SLO (own or global) applies to the request."""
    return (
        _slo(s.SLO_TTFT_MS, targets.ttft_ms).is_not_null()
        | _slo(s.SLO_TPOT_MS, targets.tpot_ms).is_not_null()
    ).alias(HAS_SLO)


def is_good(targets: SLOTargets) -> pl.Expr:
    """True for an ok request meeting all its SLOs (the goodput numerator)."""
    return (e.is_ok() & ~ttft_miss(targets) & ~tpot_miss(targets)).alias(GOOD)


def goodput_columns(targets: SLOTargets) -> list[pl.Expr]:
    """Per-request columns ``GOOD``, ``HAS_SLO``, ``TTFT_MISS``, ``TPOT_MISS`` (misses of ok
    requests only)."""
    ok = e.is_ok()
    return [
        is_good(targets),
        has_slo(targets),
        (ok & ttft_miss(targets)).alias(TTFT_MISS),
        (ok & tpot_miss(targets)).alias(TPOT_MISS),
    ]


def goodput_aggs() -> list[pl.Expr]:
    """Aggregations over ``goodput_columns``: counts named after the columns."""
    return [pl.col(c).sum().alias(c) for c in (GOOD, HAS_SLO, TTFT_MISS, TPOT_MISS)]


def goodput_from_counts(
    *,
    requests: int,
    ok: int,
    good: int,
    slo_requests: int,
    ttft_misses: int,
    tpot_misses: int,
    duration_s: float,
) -> Goodput | None:
    """The ``Goodput`` of aggregated counts; None when no SLO applies to any request."""
    if slo_requests == 0:
        return None
    return Goodput(
        requests=requests,
        slo_requests=slo_requests,
        good=good,
        fraction=good / requests if requests else 0.0,
        rate_per_s=good / duration_s if duration_s > 0 else 0.0,
        ttft_misses=ttft_misses,
        tpot_misses=tpot_misses,
        failed=requests - ok,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassGoodput:
    """Goodput of one workload class (``exprs.ALL`` for the whole run)."""

    workload: str
    goodput: Goodput | None


def goodput(
    lf: pl.LazyFrame, targets: SLOTargets, *, by_workload: bool = False
) -> tuple[ClassGoodput, ...]:
    """Goodput of already-selected run rows (see ``frames.select_rows``), the run first.

    The duration is ``max(end_ns) - min(sent_ns)`` of the rows of each class.
    """
    rows = lf.select(
        pl.col(s.WORKLOAD).alias(e.CLASS),
        e.is_ok().alias("_ok"),
        pl.col(s.SENT_NS),
        pl.col(s.END_NS),
        *goodput_columns(targets),
    )
    aggs = [
        pl.len().alias("_n"),
        pl.col("_ok").sum().alias("_ok"),
        ((pl.col(s.END_NS).max() - pl.col(s.SENT_NS).min()) / 1e9).alias("_dur"),
        *goodput_aggs(),
    ]
    queries = [rows.select(pl.lit(e.ALL).alias(e.CLASS), *aggs)]
    if by_workload:
        queries.append(rows.group_by(e.CLASS).agg(aggs).sort(e.CLASS))
    out: list[ClassGoodput] = []
    for frame in pl.collect_all(queries):
        for row in frame.iter_rows(named=True):
            out.append(
                ClassGoodput(
                    workload=str(row[e.CLASS]),
                    goodput=goodput_from_counts(
                        requests=int(row["_n"]),
                        ok=int(row["_ok"] or 0),
                        good=int(row[GOOD] or 0),
                        slo_requests=int(row[HAS_SLO] or 0),
                        ttft_misses=int(row[TTFT_MISS] or 0),
                        tpot_misses=int(row[TPOT_MISS] or 0),
                        duration_s=float(row["_dur"] or 0.0),
                    ),
                )
            )
    return tuple(out)
