"""The server-metrics analyses on hand-built samples, and the ``server-metrics`` command."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyzers import server_metrics as sm
from analyzers.errors import InvalidRunError
from loadgen.cli.server_metrics import server_metrics
from loadgen.run import scrape
from traces import schema as s

T0 = 1_800_000_000_000_000_000
SEC = 1_000_000_000


def _labels(**kv: str) -> str:
    return json.dumps(dict(sorted(kv.items())), separators=(",", ":"))


def write_samples(run: Path, samples: list[tuple[float, str, str, float]]) -> Path:
    """``(t_s, name, labels_json, value)`` rows into run/server_metrics.parquet."""
    run.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            scrape.TS_NS: [T0 + int(t * SEC) for t, _, _, _ in samples],
            scrape.NAME: [n for _, n, _, _ in samples],
            scrape.LABELS: [lb for _, _, lb, _ in samples],
            scrape.VALUE: [v for _, _, _, v in samples],
        },
        schema=s.SERVER_METRICS_SCHEMA,
    )
    pq.write_table(table, run / s.SERVER_METRICS_FILE)
    return run


def vllm_run(run: Path) -> Path:
    """Two engines over three scrapes; 4 requests queued 1.25 s in all during the run."""
    e0, e1 = _labels(engine="0", model_name="m"), _labels(engine="1", model_name="m")
    rows: list[tuple[float, str, str, float]] = []
    for t, (r0, r1), (w0, w1), (kv0, kv1), (count, total) in (
        (0.0, (0, 0), (0, 0), (0.0, 0.0), (10, 2.0)),
        (1.0, (3, 2), (4, 1), (0.5, 0.3), (12, 2.5)),
        (2.0, (1, 0), (0, 0), (0.1, 0.1), (14, 3.25)),
    ):
        rows += [
            (t, "vllm:num_requests_running", e0, r0),
            (t, "vllm:num_requests_running", e1, r1),
            (t, "vllm:num_requests_waiting", e0, w0),
            (t, "vllm:num_requests_waiting", e1, w1),
            (t, "vllm:kv_cache_usage_perc", e0, kv0),
            (t, "vllm:kv_cache_usage_perc", e1, kv1),
            # The histogram already held 10 requests before the run: deltas count.
            (t, "vllm:request_queue_time_seconds_count", e0, count),
            (t, "vllm:request_queue_time_seconds_sum", e0, total),
            (t, "vllm:request_queue_time_seconds_bucket", _labels(engine="0", le="+Inf"), count),
        ]
    return write_samples(run, rows)


def test_column_names_match_the_writer() -> None:
    assert tuple(s.SERVER_METRICS_SCHEMA.names) == (sm.TS_NS, sm.NAME, sm.LABELS, sm.VALUE)


def test_gauges_sum_requests_over_engines_and_average_usage(tmp_path: Path) -> None:
    lf = sm.scan_server_metrics(vllm_run(tmp_path / "run"))
    running = sm.requests_running(lf)
    waiting = sm.requests_waiting(lf)
    kv = sm.kv_cache_usage(lf)
    assert running is not None
    assert waiting is not None
    assert kv is not None
    assert running.collect().get_column("value").to_list() == [0, 5, 1]
    assert running.collect().get_column(sm.T_S).to_list() == [0.0, 1.0, 2.0]
    assert waiting.collect().get_column("value").to_list() == [0, 5, 0]
    assert kv.collect().get_column("value").to_list() == pytest.approx([0.0, 0.4, 0.1])


def test_queue_histogram_mean_from_deltas(tmp_path: Path) -> None:
    lf = sm.scan_server_metrics(vllm_run(tmp_path / "run"))
    name, count, mean_ms = sm.queue_histogram_mean_ms(lf)
    assert name == "vllm:request_queue_time_seconds"
    assert count == 4
    assert mean_ms == pytest.approx(312.5)
    assert sm.counter_delta(lf, "no:such_metric").collect().item() is None


def test_llamacpp_names_and_missing_series(tmp_path: Path) -> None:
    rows = [
        (t, name, "{}", v)
        for t, processing, deferred, seconds in (
            (0.0, 0, 0, 1.0),
            (0.5, 1, 3, 1.2),
            (1.0, 0, 0, 1.5),
        )
        for name, v in (
            ("llamacpp:requests_processing", processing),
            ("llamacpp:requests_deferred", deferred),
            ("llamacpp:prompt_seconds_total", seconds),
        )
    ]
    run = write_samples(tmp_path / "run", rows)
    summary = sm.summarize_server_metrics(run)
    assert summary.running is not None
    assert summary.running.name == "llamacpp:requests_processing"
    assert summary.waiting is not None
    assert summary.waiting.max == 3
    assert summary.kv_usage is None
    assert summary.queue.histogram is None
    assert summary.prefill is not None
    assert summary.prefill.counter_total_ms == pytest.approx(500.0)
    assert summary.prefill.requests_total_ms is None  # no requests.parquet in this run
    assert summary.scrapes == 3
    assert summary.duration_s == pytest.approx(1.0)
    table = sm.timeline(run, bucket_s=0.5)
    assert table.columns == ["t_s", "running", "waiting", "kv_usage"]
    assert table.get_column("waiting").to_list() == [0, 3, 0]
    assert table.get_column("kv_usage").null_count() == 3


def test_a_run_without_server_metrics_is_an_invalid_run(tmp_path: Path) -> None:
    with pytest.raises(InvalidRunError, match="no server metrics"):
        sm.scan_server_metrics(tmp_path)
    result = CliRunner().invoke(server_metrics, [str(tmp_path)])
    assert result.exit_code == 3
    assert result.output.startswith("error: ")


def test_cli_prints_series_checks_and_timeline(tmp_path: Path) -> None:
    run = vllm_run(tmp_path / "run")
    result = CliRunner().invoke(server_metrics, [str(run), "--bucket", "1"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "27 samples from 3 scrapes over 2.0 s" in out
    assert "running: mean 2.0, max 5.0 (vllm:num_requests_running)" in out
    assert "queue (histogram vllm:request_queue_time_seconds): 312.5 ms mean over 4 requests" in out
    assert "     1.0        5        5     0.400" in out
    help_text = CliRunner().invoke(server_metrics, ["--help"]).output
    assert "Usage: server-metrics [OPTIONS] RUN" in help_text


def test_cli_json_has_the_same_figures_as_the_text(tmp_path: Path) -> None:
    run = vllm_run(tmp_path / "run")
    result = CliRunner().invoke(server_metrics, [str(run), "--bucket", "1", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["samples"], doc["scrapes"], doc["duration_s"]) == (27, 3, 2.0)
    assert doc["running"] == {
        "name": "vllm:num_requests_running", "scrapes": 3, "mean": 2.0, "max": 5.0
    }  # fmt: skip
    assert doc["queue"]["histogram_mean_ms"] == 312.5
    assert {"t_s": 1.0, "running": 5.0, "waiting": 5.0, "kv_usage": 0.4} in doc["timeline"]
