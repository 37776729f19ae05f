"""``results.json``: a run's summary under the keys ``vllm bench serve --save-result``
uses, plus our own analysis, written by the CLI after a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from runbuilders import make_run

from loadgen.cli.results import RESULTS_FILE, write_run_results
from loadgen.cli.root import cli

VLLM_KEYS = (
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
    "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms",
    "median_e2el_ms", "p99_e2el_ms",
)  # fmt: skip


def test_results_json_has_vllm_keys_per_class_and_agrees_with_analyze(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=200, fail_first=10, outcome="http_error",
                   workloads=("text", "code"))  # fmt: skip
    path = write_run_results(run)
    assert path == run / RESULTS_FILE
    doc = json.loads(path.read_text())
    assert doc["kind"] == "results"
    assert set(doc["classes"]) == {"overall", "text", "code"}
    for block in (doc, *doc["classes"].values()):
        missing = [k for k in VLLM_KEYS if k not in block]
        assert not missing, missing
    assert doc["completed"] == 190
    assert doc["failed"] == 10
    assert doc["classes"]["text"]["completed"] + doc["classes"]["code"]["completed"] == 190
    assert doc["total_output_tokens"] == 190 * 20
    assert doc["total_input_tokens"] == 190 * 100
    analysis = CliRunner().invoke(cli, ["analyze", str(run), "--json"])
    assert analysis.exit_code == 0, analysis.output
    ours = json.loads(analysis.stdout)
    # Polars' parallel sums may differ in the last bit between two analyses: approx.
    assert doc["loadgen"]["overall"]["outcomes"] == ours["overall"]["outcomes"]
    overall = ours["overall"]["metrics"]
    assert doc["p99_ttft_ms"] == pytest.approx(overall["ttft_ms"]["p99"], rel=1e-9)
    assert doc["median_itl_ms"] == pytest.approx(overall["itl_ms"]["p50"], rel=1e-9)
    assert doc["mean_e2el_ms"] == pytest.approx(overall["e2e_ms"]["mean"], rel=1e-9)
    assert doc["valid"] == ours["validity"]["valid"]


def test_no_rows_no_results(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert write_run_results(tmp_path / "empty") is None
    assert not (tmp_path / "empty" / RESULTS_FILE).exists()
