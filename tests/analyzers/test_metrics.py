"""Metrics on small hand-built run files with known answers."""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal
from runbuilders import make_run

from analyzers import exprs as e
from analyzers.analysis import Analysis, AnalysisOptions
from analyzers.chunk_sums import itl_weights
from analyzers.errors import InvalidRunError
from analyzers.frames import (
    GAP_US,
    TOKENS_IN_CHUNK,
    RowSelection,
    chunk_frame,
    scan_run,
    select_rows,
    token_frame,
)
from analyzers.metrics import _itl_aggs, analyze, summarize
from analyzers.throughput import auto_window_s
from traces import schema as s
from traces.records import RequestRecord, records_to_batch

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def rec(i: int, **kw: Any) -> RequestRecord:
    """An ok request due at ``i`` seconds, sent on time, 3 one-token chunks 10 ms apart."""
    due = T0 + i * 1_000 * MS
    base: dict[str, Any] = {
        "run_id": "r",
        "trace_index": i,
        "request_id": f"q{i}",
        "x_request_id": f"r-q{i}",
        "workload": "text",
        "api": "chat",
        "input_tokens": 100,
        "output_tokens": 3,
        "due_ns": due,
        "sent_ns": due,
        "request_written_ns": due + 1 * MS,
        "first_byte_ns": due + 5 * MS,
        "first_token_ns": due + 20 * MS,
        "end_ns": due + 40 * MS,
        "chunk_offsets_us": [20_000, 30_000, 40_000],
        "chunk_tokens": [1, 1, 1],
        "prompt_tokens": 100,
        "completion_tokens": 3,
        "cached_tokens": 0,
        "outcome": s.OUTCOME_OK,
    }
    base.update(kw)
    return RequestRecord(**base)


def write_run(path: Path, records: list[RequestRecord]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_batches([records_to_batch(records)]), path / s.REQUESTS_FILE)
    return path


def one(a: Analysis, key: str, p: float | None = None) -> float | None:
    stats = a.overall.metric(key)
    return stats.mean if p is None else stats.value(p)


def test_token_frame_repeats_each_chunk_k_times(tmp_path: Path) -> None:
    r = rec(0, chunk_offsets_us=[1000, 3000, 7000], chunk_tokens=[1, 2, 4], completion_tokens=7)
    run = write_run(tmp_path / "run", [r])
    got = token_frame(scan_run(run)).collect()
    sent = T0
    expected = pl.DataFrame(
        {
            s.REQUEST_ID: ["q0"] * 7,
            "token_index": list(range(7)),
            "arrival_ns": [sent + 1_000_000] + [sent + 3_000_000] * 2 + [sent + 7_000_000] * 4,
            "chunk_index": [0, 1, 1, 2, 2, 2, 2],
            "tokens_in_chunk": [1, 2, 2, 4, 4, 4, 4],
        },
        schema={
            s.REQUEST_ID: pl.String,
            "token_index": pl.Int32,
            "arrival_ns": pl.Int64,
            "chunk_index": pl.Int32,
            "tokens_in_chunk": pl.Int32,
        },
    )
    assert_frame_equal(got, expected)


def test_unknown_chunk_tokens_spread_usage_evenly(tmp_path: Path) -> None:
    r = rec(0, chunk_offsets_us=[1000, 2000], chunk_tokens=None, completion_tokens=5)
    run = write_run(tmp_path / "run", [r])
    chunks = chunk_frame(scan_run(run)).collect()
    assert chunks.get_column("tokens_in_chunk").to_list() == [2, 3]
    assert chunks.get_column("gap_us").to_list() == [None, 1000]
    tokens = token_frame(scan_run(run)).collect()
    assert tokens.get_column("token_index").to_list() == [0, 1, 2, 3, 4]
    assert tokens.get_column("chunk_index").to_list() == [0, 0, 1, 1, 1]


def test_requests_without_chunks_yield_no_token_rows(tmp_path: Path) -> None:
    r = rec(0, outcome=s.OUTCOME_HTTP_ERROR, chunk_offsets_us=[], chunk_tokens=None)
    run = write_run(tmp_path / "run", [r, rec(1)])
    assert token_frame(scan_run(run)).collect().height == 3


def test_latencies_with_multi_token_chunks(tmp_path: Path) -> None:
    # Sent 2 ms late; first content chunk at 10 ms; chunks of 1, 1 and 2 tokens.
    r = rec(
        0,
        sent_ns=T0 + 2 * MS,
        request_written_ns=T0 + 3 * MS,
        first_byte_ns=T0 + 4 * MS,
        first_token_ns=T0 + 12 * MS,
        end_ns=T0 + 25 * MS,
        chunk_offsets_us=[10_000, 12_000, 20_000],
        chunk_tokens=[1, 1, 2],
        completion_tokens=4,
    )
    a = analyze(write_run(tmp_path / "run", [r]))
    assert one(a, e.TTFT_MS, 50) == pytest.approx(10.0)
    assert one(a, e.TTFT_FROM_DUE_MS, 50) == pytest.approx(12.0)
    assert one(a, e.TTFB_MS, 50) == pytest.approx(2.0)
    assert one(a, e.E2E_MS, 50) == pytest.approx(23.0)
    assert one(a, e.SCHEDULE_LAG_MS, 50) == pytest.approx(2.0)
    # TPOT = (20 - 10) ms / (4 - 1) tokens; ITL samples: 2 ms (1 token), 4 ms twice (2 tokens).
    assert one(a, e.TPOT_MS, 50) == pytest.approx(10 / 3)
    itl = a.overall.metric(e.ITL_MS)
    assert itl.count == 3
    assert itl.mean == pytest.approx(10 / 3)
    assert itl.value(50) == pytest.approx(4.0)
    assert itl.max == pytest.approx(4.0)
    assert a.overall.output_tokens == 4


def test_tpot_does_not_count_a_multi_token_first_chunk_as_decoded(tmp_path: Path) -> None:
    r = rec(0, chunk_offsets_us=[20_000, 30_000, 40_000], chunk_tokens=[2, 2, 2])
    a = analyze(write_run(tmp_path / "run", [r]))
    # 4 tokens arrived after the first chunk, over 20 ms.
    assert one(a, e.TPOT_MS, 50) == pytest.approx(5.0)
    assert one(a, e.ITL_MS, 50) == pytest.approx(5.0)
    assert a.overall.metric(e.ITL_MS).count == 4


def test_role_only_first_chunk_counts_for_ttfb_not_ttft(tmp_path: Path) -> None:
    # The role chunk arrived at 5 ms (first byte); the first content chunk at 20 ms.
    a = analyze(write_run(tmp_path / "run", [rec(0)]))
    assert one(a, e.TTFB_MS, 50) == pytest.approx(5.0)
    assert one(a, e.TTFT_MS, 50) == pytest.approx(20.0)


def test_reasoning_tokens(tmp_path: Path) -> None:
    r = rec(
        0,
        first_reasoning_ns=T0 + 8 * MS,
        reasoning_offsets_us=[8_000, 12_000, 16_000],
        reasoning_tokens=3,
        completion_tokens=7,
        chunk_offsets_us=[20_000, 40_000],
        chunk_tokens=None,
    )
    a = analyze(write_run(tmp_path / "run", [r]))
    assert one(a, e.TTFR_MS, 50) == pytest.approx(8.0)
    assert a.overall.output_tokens == 4  # content tokens: 7 completion - 3 reasoning
    assert one(a, e.TPOT_MS, 50) == pytest.approx(20 / 2)  # 2 tokens per chunk, spread


def test_failed_and_cancelled_are_counted_not_timed(tmp_path: Path) -> None:
    records = [
        rec(0),
        rec(1, outcome=s.OUTCOME_HTTP_ERROR, http_status=500, first_token_ns=None,
            chunk_offsets_us=[], chunk_tokens=None, prompt_tokens=None, completion_tokens=None,
            end_ns=T0 + 1_000 * MS + 3 * MS),
        rec(2, outcome=s.OUTCOME_CANCELLED, first_token_ns=T0 + 2_000 * MS + 900 * MS,
            chunk_offsets_us=[900_000], chunk_tokens=[1], completion_tokens=None),
    ]  # fmt: skip
    a = analyze(write_run(tmp_path / "run", records))
    assert a.overall.requests == 3
    assert a.overall.ok == 1
    assert {o.outcome: o.count for o in a.overall.outcomes} == {
        s.OUTCOME_OK: 1,
        s.OUTCOME_HTTP_ERROR: 1,
        s.OUTCOME_CANCELLED: 1,
    }
    assert a.overall.error_rate == pytest.approx(2 / 3)
    assert a.overall.metric(e.TTFT_MS).count == 1
    assert one(a, e.TTFT_MS, 99) == pytest.approx(20.0)  # the cancelled 900 ms is not timed
    assert a.overall.metric(e.SCHEDULE_LAG_MS).count == 3
    assert a.overall.output_tokens == 4  # 3 + the cancelled request's 1 received token


def test_warmup_rows_are_excluded_unless_asked(tmp_path: Path) -> None:
    records = [rec(0, warmup=True, first_token_ns=T0 + 500 * MS), rec(1), rec(2)]
    run = write_run(tmp_path / "run", records)
    a = analyze(run)
    assert a.overall.requests == 2
    assert a.overall.metric(e.TTFT_MS).max == pytest.approx(20.0)
    kept = analyze(run, AnalysisOptions(selection=RowSelection(exclude_warmup=False)))
    assert kept.overall.requests == 3
    assert kept.overall.metric(e.TTFT_MS).max == pytest.approx(500.0)


def test_trim_start_end_and_window(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [rec(i) for i in range(10)])
    lf = scan_run(run)

    def kept(sel: RowSelection) -> list[str]:
        return select_rows(lf, sel).collect().get_column(s.REQUEST_ID).to_list()

    assert kept(RowSelection(trim_start_s=2, trim_end_s=3)) == [f"q{i}" for i in range(2, 7)]
    assert kept(RowSelection(start_s=4, end_s=6)) == ["q4", "q5"]


def test_exact_percentiles_per_class_and_overall(tmp_path: Path) -> None:
    records = [
        rec(i, workload="a" if i % 2 else "b", first_token_ns=T0 + i * 1_000 * MS + (i + 1) * MS)
        for i in range(100)
    ]
    options = AnalysisOptions(percentiles=(50.0, 90.0, 99.0, 99.9))
    a = analyze(write_run(tmp_path / "run", records), options)
    # TTFT values 1..100 ms: linear interpolation between order statistics.
    assert one(a, e.TTFT_MS, 50) == pytest.approx(50.5)
    assert one(a, e.TTFT_MS, 99) == pytest.approx(99.01)
    assert one(a, e.TTFT_MS, 99.9) == pytest.approx(99.901)
    by = {c.workload: c for c in a.classes}
    assert sorted(by) == ["a", "b"]
    assert by["a"].metric(e.TTFT_MS).value(50) == pytest.approx(51.0)  # 2, 4, ..., 100
    assert by["b"].metric(e.TTFT_MS).value(50) == pytest.approx(50.0)  # 1, 3, ..., 99
    assert a.validity.too_small  # 100 requests: p99.9 needs 1000
    expected = pl.Series([float(v) for v in range(1, 101)]).quantile(0.9, "linear")
    assert one(a, e.TTFT_MS, 90) == pytest.approx(expected)


def test_throughput_and_windows(tmp_path: Path) -> None:
    # Four requests one second apart, 3 tokens each, ending 40 ms after due.
    a = analyze(write_run(tmp_path / "run", [rec(i) for i in range(4)]))
    c = a.overall
    assert c.duration_s == pytest.approx(3.04)
    assert c.requests_per_s == pytest.approx(4 / 3.04)
    assert c.output_tokens_per_s == pytest.approx(12 / 3.04)
    assert c.total_tokens_per_s == pytest.approx((12 + 400) / 3.04)
    assert a.window_s == auto_window_s(3.04) == 0.2
    tokens = [w.output_tokens for w in a.windows]
    assert sum(tokens) == 12
    assert tokens[0] == 3
    assert tokens[5] == 3
    assert [w.arrivals for w in a.windows if w.arrivals] == [1, 1, 1, 1]


def test_prompt_fidelity_and_unfaithful_flag(tmp_path: Path) -> None:
    records = [rec(i, prompt_tokens=110, cached_tokens=55) for i in range(3)]
    a = analyze(write_run(tmp_path / "run", records))
    f = a.overall.fidelity
    assert f.requested_tokens_mean == pytest.approx(100)
    assert f.reported_tokens_mean == pytest.approx(110)
    assert f.ratio_median == pytest.approx(1.1)
    assert f.abs_error_median == pytest.approx(0.1)
    assert f.cached_fraction_mean == pytest.approx(0.5)
    assert a.validity.unfaithful
    fine = analyze(write_run(tmp_path / "ok", [rec(i, prompt_tokens=102) for i in range(3)]))
    assert not fine.validity.unfaithful


def test_summarize_is_the_whole_run(tmp_path: Path) -> None:
    records = [rec(0, workload="a"), rec(1, workload="b")]
    summary = summarize(write_run(tmp_path / "run", records))
    assert summary.classes == ()
    assert summary.overall.requests == 2
    assert [p.percentile for p in summary.overall.metrics[0].percentiles] == [50.0, 90.0, 99.0]


def test_missing_columns_are_named(tmp_path: Path) -> None:
    table = pa.Table.from_batches([records_to_batch([rec(0)])]).drop_columns([s.OUTCOME, s.DUE_NS])
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    with pytest.raises(InvalidRunError, match="missing column\\(s\\) due_ns, outcome"):
        scan_run(path)


def test_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(InvalidRunError, match="no run rows"):
        scan_run(tmp_path / "nothing")


def test_optional_columns_are_filled(tmp_path: Path) -> None:
    keep = [*s.TRACE_REQUIRED[:1], s.DUE_NS, s.SENT_NS, s.FIRST_TOKEN_NS, s.END_NS, s.OUTCOME]
    table = pa.Table.from_batches([records_to_batch([rec(0)])]).select([*keep, s.CHUNK_OFFSETS_US])
    path = tmp_path / "slim.parquet"
    pq.write_table(table, path)
    lf = scan_run(path)
    assert set(lf.collect_schema().names()) == set(s.RUN_SCHEMA.names)
    a = analyze(path)
    assert a.overall.metric(e.TTFT_MS).value(50) == pytest.approx(20.0)
    assert a.classes[0].workload == "text"


def test_glob_of_shards_and_parts(tmp_path: Path) -> None:
    write_run(tmp_path / "w0", [rec(0), rec(2)])
    parts = tmp_path / "w1" / s.PARTS_DIR
    parts.mkdir(parents=True)
    pq.write_table(
        pa.Table.from_batches([records_to_batch([rec(1)])]), parts / "part-00000.parquet"
    )
    a = analyze(str(tmp_path / "w*"))
    assert a.overall.requests == 3


def test_a_run_of_failures_has_no_latencies(tmp_path: Path) -> None:
    failed = rec(0, outcome=s.OUTCOME_CONNECT_ERROR, chunk_offsets_us=[], chunk_tokens=None,
                 first_token_ns=None, sent_ns=None, end_ns=None)  # fmt: skip
    a = analyze(write_run(tmp_path / "run", [failed]))
    assert a.overall.error_rate == 1.0
    for m in a.overall.metrics:
        assert m.count == 0
        assert m.mean is None
        assert all(pv.value is None for pv in m.percentiles)


def test_cached_share_is_token_weighted_per_turn_depth(tmp_path: Path) -> None:
    # Two sessions of three turns: short early turns fully cached, long late turns barely.
    # The mean of per-request fractions overstates the reuse the server delivered.
    shapes = [(100, 90), (1_000, 100), (10_000, 200)]  # (prompt, cached) per turn depth
    records = []
    for sess in range(2):
        for depth, (prompt, cached) in enumerate(shapes):
            i = sess * 3 + depth
            records.append(
                rec(
                    i,
                    session_id=f"s{sess}",
                    prompt_tokens=prompt,
                    input_tokens=prompt,
                    cached_tokens=cached,
                )
            )
    records.append(rec(6, prompt_tokens=500, input_tokens=500, cached_tokens=500))  # no session
    a = analyze(write_run(tmp_path / "run", records))
    f = a.overall.fidelity
    total_prompt = 2 * (100 + 1_000 + 10_000) + 500
    total_cached = 2 * (90 + 100 + 200) + 500
    assert f.cached_share == pytest.approx(total_cached / total_prompt)  # 11.7%
    fractions = [c / p for p, c in shapes] * 2 + [1.0]
    assert f.cached_fraction_mean == pytest.approx(sum(fractions) / len(fractions))  # 45.7%
    assert [(d.turn, d.requests, d.prompt_tokens, d.cached_tokens) for d in a.cache_by_turn] == [
        (1, 2, 200, 180),
        (2, 2, 2_000, 200),
        (3, 2, 20_000, 400),
    ]
    assert [d.share for d in a.cache_by_turn] == pytest.approx([0.9, 0.1, 0.02])
    assert analyze(write_run(tmp_path / "plain", [rec(0)])).cache_by_turn == ()


def test_itl_mean_is_exact_whatever_order_the_group_by_yields() -> None:
    # The distinct (gap, tokens) counts come out of a group-by in an order that varies
    # from run to run; a float sum of gap/tokens x weight in that order changed the
    # last digit of a rerun's mean. The mean is the correctly rounded total gap over the
    # tokens, the same for any order of the rows.
    rng = random.Random(3)
    rows = [
        (rng.randint(1_000, 300_000), rng.choice([1, 3, 7]), rng.randint(1, 50))
        for _ in range(5000)
    ]
    counted = pl.DataFrame(
        {
            GAP_US: [g for g, _, _ in rows],
            TOKENS_IN_CHUNK: [k for _, k, _ in rows],
            "_count": [c for _, _, c in rows],
        },
        schema={GAP_US: pl.Int32, TOKENS_IN_CHUNK: pl.Int32, "_count": pl.UInt32},
    )
    exact = float(Fraction(sum(g * c for g, _, c in rows), 1000 * sum(k * c for _, k, c in rows)))
    means = set()
    for seed in range(8):
        shuffled = counted.sample(fraction=1.0, shuffle=True, seed=seed).lazy()
        means.add(
            itl_weights(shuffled, False).select(_itl_aggs(())).collect()[f"{e.ITL_MS}__mean"].item()
        )
    assert means == {exact}


def test_a_run_without_rows_is_analysed_not_refused(tmp_path: Path) -> None:
    """A live run read before its first row: the overall percentiles of no request are
    null beside zero counts (they were computed by a group-by, which has no row for no
    requests, and the horizontal concat with the one row of sums failed)."""
    run = make_run(tmp_path / "run", n=0)
    result = analyze(run)
    assert result.overall.requests == 0
