"""End to end: the Responses API and embeddings replayed against the simulator, a real
server on loopback port 0 (issue 24, item 5): rows, token counts from usage, per-token
stamps, a malformed event as one row's error, and what the analyzers make of each.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from analyzers.metrics import analyze
from loadgen.cli.results import write_run_results
from loadgen.cli.root import cli
from loadgen.run.session import SessionOptions, SessionResult, run_session
from loadgen.sim.launch import SimProcess
from reports.html.run import classes_table
from traces import schema as s
from traces.io import write_trace

SimFactory = Callable[..., SimProcess]


def _trace(path: Path, n: int, *, input_tokens: int, output_tokens: int) -> Path:
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [i / 100 for i in range(n)],
                "input_tokens": [input_tokens] * n,
                "output_tokens": [output_tokens] * n,
                "api": ["chat"] * n,  # --api overrides every row
            }
        ),
        path,
    )
    return path


def _replay(opts: SessionOptions) -> SessionResult:
    return asyncio.run(run_session(opts, install_signal_handlers=False))


def _rows(run_dir: Path) -> list[dict[str, object]]:
    return pq.read_table(run_dir / s.REQUESTS_FILE).to_pylist()  # type: ignore[no-any-return]


def test_responses_rows_tokens_and_stamps(tmp_path: Path, sim: SimFactory) -> None:
    n, tokens = 12, 6
    # One stream in about three gets an event that is not JSON (the seed fixes which).
    server = sim("--ttft-ms", "10", "--itl-ms", "2", "--malformed-rate", "0.3", "--seed", "3")
    trace = _trace(tmp_path / "t.parquet", n, input_tokens=20, output_tokens=tokens)
    opts = SessionOptions(
        trace_path=trace,
        run_dir=tmp_path / "run",
        base_url=server.base_url,
        api=s.API_RESPONSES,
        run_id="apis",
        scrape_metrics=False,
    )
    rows = _rows(_replay(opts).run_dir)
    assert len(rows) == n
    assert {row["api"] for row in rows} == {s.API_RESPONSES}
    ok = [row for row in rows if row["outcome"] == s.OUTCOME_OK]
    bad = [row for row in rows if row["outcome"] != s.OUTCOME_OK]
    assert ok
    assert bad
    for row in ok:
        offsets = row["chunk_offsets_us"]
        assert isinstance(offsets, list)
        assert len(offsets) == row["completion_tokens"] == tokens  # a stamp per token
        assert offsets == sorted(offsets)
        assert row["prompt_tokens"] == 20  # usage.input_tokens of response.completed
        assert row["cached_tokens"] == 0
        assert row["finish_reason"] == "completed"
        assert row["first_token_ns"] is not None
        assert row["server_ttft_ms"] is not None  # the truth rides on response.completed
    for row in bad:
        assert row["outcome"] == s.OUTCOME_PROTOCOL_ERROR
        assert "malformed chunk" in str(row["error"])
    analysis = analyze(tmp_path / "run")
    assert analysis.overall.metric("ttft_ms").count == len(ok)
    assert analysis.overall.metric("tpot_ms").count == len(ok)
    assert analysis.overall.embeddings == 0
    # Content tokens received, by every row (a malformed stream's deltas count too).
    received = 0
    for row in rows:
        offsets = row["chunk_offsets_us"]
        assert isinstance(offsets, list)
        received += len(offsets)
    assert analysis.overall.output_tokens == received >= len(ok) * tokens


def test_embeddings_rows_items_and_summaries(tmp_path: Path, sim: SimFactory) -> None:
    n = 10
    server = sim("--ttft-ms", "5", "--prefill-us-per-token", "50")
    trace = _trace(tmp_path / "t.parquet", n, input_tokens=30, output_tokens=4)
    run_dir = tmp_path / "run"
    opts = SessionOptions(
        trace_path=trace,
        run_dir=run_dir,
        base_url=server.base_url,
        api=s.API_EMBEDDINGS,
        embed_batch=3,
        scrape_metrics=False,
    )
    rows = _rows(_replay(opts).run_dir)
    assert len(rows) == n
    for row in rows:
        assert (row["outcome"], row["error"]) == (s.OUTCOME_OK, None)
        assert row["items"] == 3  # the prompt cut into three inputs, one embedding each
        assert row["prompt_tokens"] == 30
        assert row["completion_tokens"] is None
        assert row["first_token_ns"] is None
        assert row["chunk_offsets_us"] == []
        assert row["server_prefill_ms"] is not None
    analysis = analyze(run_dir)
    overall = analysis.overall
    # Prompt tokens land in the window of each reply's end (there is no first token).
    assert sum(w.total_tokens_per_s for w in analysis.windows) > 0
    assert sum(w.output_tokens_per_s for w in analysis.windows) == 0
    assert overall.embeddings_only
    assert overall.metric("ttft_ms").count == overall.metric("tpot_ms").count == 0
    assert overall.metric("itl_ms").count == 0
    assert overall.metric("e2e_ms").count == n
    assert overall.items == 3 * n
    assert overall.items_per_s > 0
    assert overall.input_tokens_per_s > 0
    results = write_run_results(run_dir)
    assert results is not None
    doc = json.loads(results.read_text())
    assert "mean_ttft_ms" not in doc
    assert "output_throughput" not in doc
    assert doc["item_throughput"] == overall.items_per_s
    assert doc["mean_e2el_ms"] is not None

    runner = CliRunner()
    shown = runner.invoke(cli, ["analyze", str(run_dir)])
    assert shown.exit_code == 0, shown.output
    assert "items/s" in shown.output
    assert "TTFT" not in shown.output
    slo = tmp_path / "slo.toml"
    slo.write_text('[[slo]]\nmetric = "ttft_ms"\npercentile = 50\nmax = 100\n')
    gated = runner.invoke(cli, ["gate", str(run_dir), "--slo", str(slo)])
    assert "embeddings stream no tokens" in gated.output
    decomposed = runner.invoke(cli, ["decompose", str(run_dir)])
    assert "embeddings requests stream no token" in decomposed.output
    table = classes_table(analysis)  # the HTML report's
    assert "items/s" in table
    assert "input tok/s" in table


def test_simulate_refuses_embeddings_rows(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    write_trace(
        pa.table(
            {
                "request_id": ["a", "b"],
                "arrival_s": [0.0, 0.1],
                "input_tokens": [8, 8],
                "output_tokens": [1, 1],
                "api": ["chat", "embeddings"],
            }
        ),
        trace,
    )
    args = ["simulate", str(trace), "--model", "llama-3.1-8b", "-o", str(tmp_path / "run")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "1 rows are embeddings requests" in result.output
