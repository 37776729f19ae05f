"""``analyzers.chunk_sums``' shortcuts give the same counts and sums as the same group-bys
over ``frames.chunk_frame`` (one row per chunk), on rows that take every path: even and
uneven spreads, recorded counts (with null and zero entries), one chunk, none, unsorted
offsets, requests inside one window and across several."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from analyzers.chunk_sums import (
    COUNT,
    WINDOW,
    WINDOW_TOKENS,
    even_spreads,
    itl_counts,
    itl_counts_by_class,
    itl_keys,
    window_tokens,
)
from analyzers.frames import ARRIVAL_NS, GAP_US, TOKENS_IN_CHUNK, chunk_frame
from traces import schema as s

T0 = 1_000_000_000_000


def _rows(path: Path, n: int = 400, seed: int = 1) -> pl.LazyFrame:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        m = rng.choice([0, 1, 2, 5, 20, 20, 20])
        offsets = [rng.randrange(0, 3_000) * 1_000 + rng.randrange(1_000) for _ in range(m)]
        if rng.random() < 0.9:
            offsets.sort()
        kind = rng.choice(["even", "uneven", "recorded", "short", "usage-less"])
        tokens: list[int | None] | None = None
        completion: int | None = m * rng.choice([1, 2, 4])
        if kind == "uneven":
            completion = m * 3 + rng.randrange(1, 3)
        elif kind == "recorded":
            tokens = [rng.choice([None, 0, 1, 1, 3, 7]) for _ in range(m)]
        elif kind == "short":
            tokens = [1] * max(m - 1, 0)  # does not cover every chunk: not used
        elif kind == "usage-less":
            completion = None
        rows.append(
            {
                s.WORKLOAD: rng.choice(["a", "b"]),
                s.SENT_NS: T0 + i * 37_000_000 if rng.random() < 0.98 else None,
                s.CHUNK_OFFSETS_US: offsets,
                s.CHUNK_TOKENS: tokens,
                s.COMPLETION_TOKENS: completion,
                s.REASONING_TOKENS: rng.choice([None, 0, 2]) if completion else None,
                s.REQUEST_ID: f"q{i}",
            }
        )
    frame = pl.DataFrame(
        rows,
        schema={
            s.WORKLOAD: pl.String,
            s.SENT_NS: pl.Int64,
            s.CHUNK_OFFSETS_US: pl.List(pl.Int32),
            s.CHUNK_TOKENS: pl.List(pl.Int16),
            s.COMPLETION_TOKENS: pl.Int32,
            s.REASONING_TOKENS: pl.Int32,
            s.REQUEST_ID: pl.String,
        },
    )
    file = path / "rows.parquet"
    frame.write_parquet(file)
    return pl.scan_parquet(file)


@pytest.mark.parametrize(
    ("keys", "spreads"), [([], False), ([], True), ([s.WORKLOAD], False), ([s.WORKLOAD], True)]
)
def test_itl_counts_equal_the_exploded_chunks(
    tmp_path: Path, keys: list[str], spreads: bool
) -> None:
    lf = _rows(tmp_path)
    group = [*keys, GAP_US, TOKENS_IN_CHUNK]
    expected = (
        chunk_frame(lf, keep=keys)
        .filter(pl.col(GAP_US).is_not_null())
        .group_by(group)
        .agg(pl.len().cast(pl.Int64).alias(COUNT))
        .with_columns(pl.col(TOKENS_IN_CHUNK).cast(pl.Int32))
        .collect()
        .sort(group)
    )
    taken = even_spreads(lf, most=2) if spreads else ()
    assert len(taken) == (2 if spreads else 0)
    got = itl_counts(lf, keys, taken).collect().sort(group)
    assert expected.height > 100
    assert_frame_equal(got, expected)


@pytest.mark.parametrize("window_ns", [1, 50_000_000, 1_000_000_000, 10_000_000_000])
def test_window_tokens_equal_the_exploded_chunks(tmp_path: Path, window_ns: int) -> None:
    lf = _rows(tmp_path)
    t0 = T0 + 5_000_000
    expected = (
        chunk_frame(lf)
        .group_by(((pl.col(ARRIVAL_NS) - t0) // window_ns).alias(WINDOW))
        .agg(pl.col(TOKENS_IN_CHUNK).cast(pl.Int64).sum().alias(WINDOW_TOKENS))
        .drop_nulls(WINDOW)
        .collect()
        .sort(WINDOW)
    )
    got = window_tokens(lf, t0, window_ns).drop_nulls(WINDOW).collect().sort(WINDOW)
    assert expected.height > 1
    assert_frame_equal(got, expected)


def test_itl_counts_by_class_of_no_rows_is_empty_not_an_error(tmp_path: Path) -> None:
    """A live run analysed before its first row (no workload classes yet) used to fail
    with "cannot concat empty list": it must give an empty frame with the keys."""
    none = _rows(tmp_path).head(0).with_columns(pl.lit(s.OUTCOME_OK).alias(s.OUTCOME))
    got = itl_counts_by_class(none, True, ()).collect()
    assert got.height == 0
    assert set(itl_keys(True)) <= set(got.columns)


def test_itl_counts_are_exact_when_differences_overflow_32_bits() -> None:
    """Offsets (Int32) far apart differ by more than an Int32 holds: the flat count of the
    even spreads differences them in 64 bits, exactly (not wrapped)."""
    offsets = [[-2_000_000_000, 2_000_000_000, 5], [0, 10, 20], [7, 8, 9, 2_100_000_000]]
    lf = pl.LazyFrame(
        {
            s.SENT_NS: [T0, T0 + 1, T0 + 2],
            s.CHUNK_OFFSETS_US: offsets,
            s.CHUNK_TOKENS: [None, None, None],
            s.COMPLETION_TOKENS: [3, 3, 4],
            s.REASONING_TOKENS: [0, 0, 0],
            s.REQUEST_ID: ["a", "b", "c"],
        },
        schema_overrides={
            s.CHUNK_OFFSETS_US: pl.List(pl.Int32),
            s.CHUNK_TOKENS: pl.List(pl.Int16),
            s.COMPLETION_TOKENS: pl.Int32,
            s.REASONING_TOKENS: pl.Int32,
        },
    )
    assert even_spreads(lf) == (1,)
    got = itl_counts(lf, spreads=(1,)).collect().sort(GAP_US)
    exact = sorted(b - a for o in offsets for a, b in itertools.pairwise(o))
    counted = {g: exact.count(g) for g in exact}
    assert got[GAP_US].to_list() == sorted(counted)
    assert got[COUNT].to_list() == [counted[g] for g in sorted(counted)]
    assert set(got[TOKENS_IN_CHUNK].to_list()) == {1}
