"""Chunk queries summed slice by slice (``analyzers.frames.summed_in_slices``) equal the
same query over the whole run, and ``analyze`` and the report's series give the same
figures either way."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from runbuilders import make_run

from analyzers import frames
from analyzers.analysis import AnalysisOptions
from analyzers.frames import (
    ARRIVAL_NS,
    GAP_US,
    TOKENS_IN_CHUNK,
    RowSelection,
    chunk_frame,
    scan_run,
    select_rows,
    summed_in_slices,
)
from analyzers.goodput import SLOTargets
from analyzers.metrics import analyze, analyze_pass
from analyzers.timeseries import SeriesOptions, run_series
from traces.schema import REQUEST_ID


def _gap_counts(lf: pl.LazyFrame) -> pl.LazyFrame:
    return (
        chunk_frame(lf)
        .filter(pl.col(GAP_US).is_not_null())
        .group_by([GAP_US, TOKENS_IN_CHUNK])
        .agg(pl.len().alias("_count"), pl.col(ARRIVAL_NS).sum().alias("_arrivals"))
    )


def _per_request(lf: pl.LazyFrame) -> pl.LazyFrame:
    return chunk_frame(lf).group_by(REQUEST_ID).agg(pl.len().alias("_n"))


def test_slices_sum_to_the_whole(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=300, workloads=("a", "b"))
    keys = [GAP_US, TOKENS_IN_CHUNK]
    sliced = summed_in_slices(
        run, RowSelection(), [(_gap_counts, keys), (_per_request, [REQUEST_ID])], slice_rows=7
    )
    assert sliced is not None
    selected = select_rows(scan_run(run), RowSelection())
    assert_frame_equal(
        sliced[0].collect().sort(keys),
        _gap_counts(selected)
        .collect()
        .with_columns(pl.col("_count", "_arrivals").cast(pl.Int64))
        .sort(keys),
    )
    assert_frame_equal(
        sliced[1].collect().sort(REQUEST_ID),
        _per_request(selected).collect().with_columns(pl.col("_n").cast(pl.Int64)).sort(REQUEST_ID),
    )


def test_a_selection_by_due_time_is_not_sliced(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=60)
    trimmed = RowSelection(trim_start_s=1.0)
    queries = [(_gap_counts, [GAP_US, TOKENS_IN_CHUNK])]
    assert summed_in_slices(run, trimmed, queries, slice_rows=7) is None
    # Fewer rows than a slice: one slice, the same counts.
    one = summed_in_slices(run, RowSelection(), queries, slice_rows=60)
    assert one is not None
    assert_frame_equal(
        one[0].collect().sort(queries[0][1]),
        _gap_counts(scan_run(run))
        .collect()
        .with_columns(pl.col("_count", "_arrivals").cast(pl.Int64))
        .sort(queries[0][1]),
    )


@pytest.mark.parametrize("by_workload", [True, False])
def test_analyze_is_the_same_sliced_or_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by_workload: bool
) -> None:
    run = make_run(tmp_path / "run", n=240, workloads=("a", "b", "c"), fail_first=5)
    options = AnalysisOptions(by_workload=by_workload)
    # A selection by due time is never sliced; from the first due time on, it keeps every row.
    whole = analyze(
        run, AnalysisOptions(by_workload=by_workload, selection=RowSelection(start_s=0))
    )
    monkeypatch.setattr(frames, "SLICE_ROWS", 11)
    monkeypatch.setattr(
        frames.summed_in_slices, "__kwdefaults__", {"slice_rows": 11, "columns": None}
    )
    sliced = analyze(run, options)
    # The same figures; a mean summed slice by slice may differ from the whole's in the
    # last bit (the order of a floating-point sum), nothing more.
    assert _same(sliced.overall, whole.overall)
    assert _same(sliced.classes, whole.classes)
    assert _same(sliced.windows, whole.windows)


def _same(a: object, b: object) -> bool:
    """Equal, floats to 1e-12 relative, through dataclasses, sequences and mappings."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        if type(a) is not type(b):
            return False
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_same_tells_a_real_difference() -> None:
    assert _same((1.0, {"x": [2.0]}), (1.0 + 1e-15, {"x": [2.0]}))
    assert not _same((1.0, {"x": [2.0]}), (1.0, {"x": [2.0001]}))
    assert not _same(1, 2)


@pytest.mark.parametrize("by_workload", [True, False])
def test_report_series_are_the_same_sliced_or_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by_workload: bool
) -> None:
    run = make_run(tmp_path / "run", n=240, workloads=("a", "b", "c"), fail_first=5)
    options = SeriesOptions(by_workload=by_workload)
    whole = run_series(run, options)
    monkeypatch.setattr(
        frames.summed_in_slices, "__kwdefaults__", {"slice_rows": 40, "columns": None}
    )
    sliced = run_series(run, options)
    assert sliced.itl
    assert sum(sum(h.weights) for h in sliced.itl) > 0
    assert _same(sliced, whole)


@pytest.mark.parametrize("slice_rows", [40, 1000])
def test_series_from_analyze_pass_are_the_series_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slice_rows: int
) -> None:
    run = make_run(tmp_path / "run", n=240, workloads=("a", "b"), fail_first=5)
    monkeypatch.setattr(
        frames.summed_in_slices, "__kwdefaults__", {"slice_rows": slice_rows, "columns": None}
    )
    analysis, read = analyze_pass(run, AnalysisOptions(slo=SLOTargets(ttft_ms=150.0)))
    assert _same(analysis, analyze(run, AnalysisOptions(slo=SLOTargets(ttft_ms=150.0))))
    assert _same(run_series(run, SeriesOptions(), reuse=read), run_series(run, SeriesOptions()))
    # Another selection is read again, not taken from the pass.
    other = SeriesOptions(selection=RowSelection(trim_start_s=2.0))
    assert _same(run_series(run, other, reuse=read), run_series(run, other))
    assert not _same(run_series(run, other), run_series(run, SeriesOptions()))


def test_slices_follow_the_row_groups(tmp_path: Path) -> None:
    """A slice never ends inside a Parquet row group it could hold whole (the group would
    be decoded twice); bigger groups are cut in equal parts; the rows of a journal (not
    Parquet) come last."""
    file = tmp_path / "rows.parquet"
    pl.DataFrame({"x": range(200)}).write_parquet(file, row_group_size=50)
    assert frames.slice_bounds([file], 200, 120) == [(0, 100), (100, 100)]
    assert frames.slice_bounds([file], 200, 50) == [(0, 50), (50, 50), (100, 50), (150, 50)]
    assert frames.slice_bounds([file], 200, 30)[:3] == [(0, 25), (25, 25), (50, 25)]
    journal = tmp_path / "journal.arrows"
    assert frames.slice_bounds([file, journal], 230, 120) == [(0, 100), (100, 100), (200, 30)]
    assert frames.slice_bounds([], 0, 10) == [(0, 1)]
