"""Expected cached tokens (the trace's prefix blocks) beside the reported ones: the ideal
cache's arithmetic, its agreement with the offline simulator's prefix cache request by
request, the analyze/report output, and the gate's cache objectives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from click.testing import CliRunner

from analyzers.analysis import AnalysisOptions
from analyzers.cache import EXPECTED_CACHED, CacheOptions, IdealPrefixCache, cache_expectation
from analyzers.errors import SLOError
from analyzers.metrics import analyze
from analyzers.slo.parse import parse_rule, parse_rules, scale_slos
from loadgen.cli.root import cli
from reports.html.run import analysis_tables
from reports.jsondoc import analysis_json
from tests.analyzers.test_metrics import rec, write_run
from traces import schema as s
from traces.io import write_trace


def invoke(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, (args, result.output)
    # One space for every run of blanks: where the console wraps a long path depends on
    # the path's length, which is the test's temporary directory's.
    return " ".join(result.output.split())


def test_ideal_cache_hits_whole_kv_blocks_of_the_shared_prefix() -> None:
    cache = IdealPrefixCache(trace_block=4, kv_block=2)
    assert cache.expected([1, 2, 3], 10, 10) == 0  # nothing added yet
    cache.add([1, 2, 3], 10)  # block 3 covers its first 2 tokens only
    assert cache.shared([1, 2, 3, 4], 14) == 10  # 4 + 4 + the 2 tokens block 3 had
    assert cache.expected([1, 2, 5], 12, 12) == 8  # diverges at the third block
    assert cache.expected([9, 2, 3], 12, 12) == 0  # a prefix, not a set of blocks
    assert cache.expected([1, 2, 3], 10, 10) == 8  # a full hit keeps the last token: 9 -> 8
    assert cache.expected([1, 2, 3, 4], 14, 14) == 10
    odd = IdealPrefixCache(trace_block=4, kv_block=3)
    odd.add([1, 2, 3], 10)
    assert odd.expected([1, 2, 3, 4], 14, 14) == 9  # 10 shared tokens: three blocks of 3
    cache.add([1, 2, 3, 4], 14)  # block 3 now seen whole
    assert cache.shared([1, 2, 3, 7], 16) == 12
    with pytest.raises(ValueError, match="block sizes"):
        IdealPrefixCache(trace_block=0, kv_block=16)


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Sessions whose turns never overlap (think time >> service time), simulated offline
    with a KV block (48) that does not divide the trace's block (512)."""
    tmp = tmp_path_factory.mktemp("cache")
    trace = tmp / "sessions.parquet"
    invoke(
        "trace", "synth", "--requests", "40", "--rate", "0.2", "--sessions",
        "--turns-mean", "4", "--think-mean", "20", "--input-mean", "1500",
        "--output-fixed", "8", "--seed", "5", "-o", str(trace),
    )  # fmt: skip
    run = tmp / "run"
    invoke(
        "simulate", str(trace), "--model", "llama-3.1-8b", "--kv-block-size", "48",
        "-o", str(run),
    )  # fmt: skip
    return trace, run


def test_expectation_equals_the_simulator_request_by_request(sim_run: tuple[Path, Path]) -> None:
    trace, run = sim_run
    frame, basis = cache_expectation(run, CacheOptions())
    assert basis.available
    assert (basis.trace_block_size, basis.kv_block_size) == (512, 48)
    assert basis.kv_block_source.startswith("run.json deployment")
    assert frame is not None
    rows = pl.read_parquet(run / s.REQUESTS_FILE).join(frame, on=s.TRACE_INDEX)
    assert rows.height == 40
    assert rows[s.CACHED_TOKENS].sum() > 0
    assert rows[s.CACHED_TOKENS].cast(pl.Int64).to_list() == rows[EXPECTED_CACHED].to_list()
    # A KV block the run did not use gives other hits: the expectation follows the option.
    other, _ = cache_expectation(run, CacheOptions(trace=str(trace), kv_block_size=512))
    assert other is not None
    assert other[EXPECTED_CACHED].sum() != frame[EXPECTED_CACHED].sum()


def test_analyze_report_and_json_show_expected_beside_reported(
    sim_run: tuple[Path, Path],
) -> None:
    _, run = sim_run
    a = analyze(run, AnalysisOptions(cache=CacheOptions()))
    x = a.overall.fidelity.expected
    assert x is not None
    assert x.requests == 40
    assert x.fidelity == 1.0
    assert x.expected_share == pytest.approx(a.overall.fidelity.cached_share)
    assert [d.turn for d in a.cache_by_turn][:2] == [1, 2]
    assert a.cache_by_turn[0].expected is not None
    assert a.cache_by_turn[0].expected.expected_tokens == 0  # a first turn shares nothing
    assert all(
        d.expected is not None and d.expected.fidelity in (None, 1.0) for d in a.cache_by_turn
    )
    doc = analysis_json(a)
    assert doc["cache_basis"]["kv_block_size"] == 48
    assert doc["overall"]["prompt_fidelity"]["cache_expected"]["fidelity"] == 1.0
    assert doc["cache_by_turn"][1]["expected"]["expected_tokens"] > 0
    results = json.loads((run / "results.json").read_text())
    assert results["loadgen"]["cache_basis"]["available"]
    text = invoke("analyze", str(run))
    assert "reported / expected 100.0%" in text
    assert "KV block 48 tokens (run.json deployment" in text
    html = analysis_tables(a)
    assert "expected share" in html
    from reports.charts.cache import cache_depth_chart

    chart = cache_depth_chart(a)
    assert chart.svg.startswith("<svg")
    assert "48 tokens" in chart.caption


def test_trace_out_of_reach_or_wrong(sim_run: tuple[Path, Path], tmp_path: Path) -> None:
    trace, run = sim_run
    moved = tmp_path / "elsewhere" / "moved"
    shutil.copytree(run, moved)
    hidden = trace.with_name("hidden.parquet")
    trace.rename(hidden)
    try:
        out = invoke("analyze", str(moved))
        assert "expected cached tokens: none (trace" in out
        assert "give --trace" in out
        out = invoke("gate", str(moved), "--slo", "cache_fidelity>=0.9", code=1)
        assert "NO DATA" in out
        assert "reported / expected 100.0%" in invoke("analyze", str(moved), "--trace", str(hidden))
    finally:
        hidden.rename(trace)
    other = tmp_path / "other.parquet"
    write_trace(
        pa.table({"request_id": ["q0"], "arrival_s": [0.0], "input_tokens": [9],
                  "output_tokens": [1]}),
        other,
    )  # fmt: skip
    out = invoke("analyze", str(run), "--trace", str(other), code=2)
    assert "is not the trace" in out


def _hand_run(tmp_path: Path, cached: list[int | None]) -> tuple[Path, Path]:
    """Two requests sharing one 512-token block id, no run.json (so --trace is needed)."""
    trace = tmp_path / "t.parquet"
    write_trace(
        pa.table(
            {
                "request_id": ["q0", "q1"],
                "arrival_s": [0.0, 1.0],
                "input_tokens": [600, 600],
                "output_tokens": [3, 3],
                "prefix_blocks": [[7, 1], [7, 2]],
            }
        ),
        trace,
    )
    records = [
        rec(i, prompt_tokens=600, input_tokens=600, cached_tokens=c) for i, c in enumerate(cached)
    ]
    return trace, write_run(tmp_path / "run", records)


def test_gate_checks_the_cache_hit_ratio_and_fidelity(tmp_path: Path) -> None:
    trace, run = _hand_run(tmp_path, [0, 256])  # expected: 0 then 512 (one trace block)
    out = invoke(
        "gate", str(run), "--trace", str(trace), "--slo", "cache_hit_ratio>=0.2",
        "--slo", "cache_fidelity>=0.6", code=1,
    )  # fmt: skip
    assert "cache_hit_ratio >= 20%" in out
    assert "PASS" in out  # 256 / 1,200 = 21.3%
    assert "cache_fidelity >= 60%: 50% breaks" in out  # 256 / 512
    out = invoke("gate", str(run), "--slo", "cache_fidelity>=0.5", code=1)
    assert "no run.json names the trace" in out
    stranger = tmp_path / "stranger.parquet"
    write_trace(
        pa.table({"request_id": ["x0", "x1"], "arrival_s": [0.0, 1.0],
                  "input_tokens": [600, 600], "output_tokens": [3, 3]}),
        stranger,
    )  # fmt: skip
    assert "not the trace" in invoke("analyze", str(run), "--trace", str(stranger), code=2)


def test_gate_has_no_data_when_the_server_reports_no_cached_tokens(tmp_path: Path) -> None:
    trace, run = _hand_run(tmp_path, [None, None])
    for rule in ("cache_hit_ratio>=0.5", "cache_fidelity>=0.5"):
        out = invoke("gate", str(run), "--trace", str(trace), "--slo", rule, code=1)
        assert "NO DATA" in out
        assert "the server reported no cached tokens" in out


def test_a_trace_without_prefix_blocks_allows_no_hits(tmp_path: Path) -> None:
    trace = tmp_path / "plain.parquet"
    write_trace(
        pa.table({"request_id": ["q0", "q1"], "arrival_s": [0.0, 1.0],
                  "input_tokens": [600, 600], "output_tokens": [3, 3]}),
        trace,
    )  # fmt: skip
    run = write_run(tmp_path / "run", [rec(0, cached_tokens=0), rec(1, cached_tokens=32)])
    a = analyze(run, AnalysisOptions(cache=CacheOptions(trace=str(trace))))
    x = a.overall.fidelity.expected
    assert x is not None
    assert (x.requests, x.expected_tokens, x.cached_tokens, x.fidelity) == (2, 0, 32, None)
    out = invoke("gate", str(run), "--trace", str(trace), "--slo", "cache_fidelity>=0.5", code=1)
    assert "allow no cached tokens" in out


def test_cache_rules_parse_and_keep_their_scale() -> None:
    assert parse_rule("cache_hit_ratio>=80%").threshold == 0.8
    assert parse_rule("cache_fidelity>=1.1").threshold == pytest.approx(1.1)
    with pytest.raises(SLOError, match="fraction"):
        parse_rule("cache_hit_ratio>=1.5")
    with pytest.raises(SLOError, match="no percentile"):
        parse_rule("cache_fidelity.p99>=0.9")
    scaled = scale_slos(parse_rules(["cache_hit_ratio>=0.5", "cache_fidelity>=0.9"]), 10.0)
    assert [o.threshold for o in scaled.objectives] == [0.5, 0.9]
