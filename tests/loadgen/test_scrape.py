"""Prometheus scraping during a run: the scraper against the simulator's /metrics, its
failure modes, and the session and CLI wiring (one worker and several)."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from loadgen.cli.root import cli
from loadgen.clock import Clock
from loadgen.run.scrape import (
    ScrapeConfig,
    alongside,
    metrics_url_for,
    parse_exposition,
    same_origin,
)
from loadgen.run.session import SessionOptions, run_session
from loadgen.sim.launch import start_sim
from traces import schema as s
from traces.io import read_run_info, write_trace
from traces.schema import SERVER_METRICS_SCHEMA

pytestmark = pytest.mark.serial

LLAMACPP_METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 16
# HELP llamacpp:prompt_seconds_total Total time spent processing prompts
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 0.010007
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""
"""Recorded from llama.cpp's server (xllamacpp 2026.10.11549), trimmed to four families."""

VLLM_HISTOGRAM = """\
# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="m"} 3.0
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} 4.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 1.25
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_metrics_url_beside_the_api() -> None:
    assert metrics_url_for("http://h:8000/v1") == "http://h:8000/metrics"
    assert metrics_url_for("http://h:8000/v1/") == "http://h:8000/metrics"
    assert metrics_url_for("https://h/proxy/v1") == "https://h/proxy/metrics"
    assert metrics_url_for("http://h:8000") == "http://h:8000/metrics"
    assert same_origin("http://h:1/v1", "http://h:1/metrics")
    assert not same_origin("http://h:1/v1", "http://h:2/metrics")


def test_parse_exposition_keeps_sample_names_and_sorted_labels() -> None:
    rows = parse_exposition(LLAMACPP_METRICS + VLLM_HISTOGRAM)
    by_name = {(name, labels): value for name, labels, value in rows}
    assert by_name[("llamacpp:prompt_tokens_total", "{}")] == 16
    assert by_name[("llamacpp:requests_deferred", "{}")] == 0
    key = '{"engine":"0","model_name":"m"}'
    assert by_name[("vllm:request_queue_time_seconds_sum", key)] == 1.25
    assert by_name[("vllm:request_queue_time_seconds_count", key)] == 4
    buckets = [json.loads(lb)["le"] for n, lb, _ in rows if n.endswith("_bucket")]
    assert buckets == ["0.3", "+Inf"]
    with pytest.raises(ValueError, match="could not convert"):
        parse_exposition("this is { not prometheus\n")


def test_scraper_samples_on_a_fixed_grid_into_parquet(tmp_path: Path) -> None:
    clock = Clock()
    out = tmp_path / s.SERVER_METRICS_FILE
    with start_sim(["--ttft-ms", "5"]) as sim:
        config = ScrapeConfig(url=f"{sim.root_url}/metrics", out_path=out, interval_s=0.1)
        before = clock.now_ns()
        result, report = asyncio.run(
            alongside(lambda: asyncio.sleep(0.55, "done"), config, clock.now_ns)
        )
        after = clock.now_ns()
    assert result == "done"
    assert report is not None
    assert report.enabled
    assert report.errors == 0
    # One before the work, about one per interval during it, one after.
    assert 6 <= report.scrapes <= 9
    table = pq.read_table(out)
    assert table.schema.equals(SERVER_METRICS_SCHEMA)
    assert report.samples == table.num_rows
    stamps = sorted(set(table.column("ts_ns").to_pylist()))
    assert len(stamps) == report.scrapes
    assert before <= stamps[0]
    assert stamps[-1] <= after
    # Inner gaps: the first and last scrapes sit just before and after the work.
    gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(stamps[1:-1])]
    assert all(60 < g < 140 for g in gaps), gaps
    assert "vllm:num_requests_running" in set(table.column("name").to_pylist())


def test_missing_default_endpoint_turns_scraping_off(tmp_path: Path) -> None:
    out = tmp_path / s.SERVER_METRICS_FILE
    config = ScrapeConfig(url=f"http://127.0.0.1:{_free_port()}/metrics", out_path=out)
    result, report = asyncio.run(alongside(lambda: asyncio.sleep(0, 7), config, Clock().now_ns))
    assert result == 7
    assert report is not None
    assert not report.enabled
    assert report.reason is not None
    assert "ConnectError" in report.reason
    assert not out.exists()


def test_required_endpoint_failures_are_counted_not_raised(tmp_path: Path) -> None:
    out = tmp_path / s.SERVER_METRICS_FILE
    with start_sim([]) as sim:
        config = ScrapeConfig(
            url=f"{sim.root_url}/nothing-here", out_path=out, interval_s=0.05, required=True
        )
        _, report = asyncio.run(alongside(lambda: asyncio.sleep(0.2), config, Clock().now_ns))
    assert report is not None
    assert report.enabled
    assert report.scrapes == 0
    assert report.errors >= 3
    assert report.last_error == "HTTP 404"
    assert pq.read_table(out).num_rows == 0


def test_replay_errors_pass_through_unwrapped(tmp_path: Path) -> None:
    async def boom() -> None:
        raise KeyError("replay failed")

    with start_sim([]) as sim:
        config = ScrapeConfig(url=f"{sim.root_url}/metrics", out_path=tmp_path / "m.parquet")
        with pytest.raises(KeyError, match="replay failed"):
            asyncio.run(alongside(boom, config, Clock().now_ns))
    assert pq.read_table(tmp_path / "m.parquet").num_rows > 0


def _trace(path: Path, n: int) -> Path:
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [i / 20 for i in range(n)],
                "input_tokens": [32] * n,
                "output_tokens": [8] * n,
            }
        ),
        path,
    )
    return path


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_session_scrapes_the_endpoint_by_default(tmp_path: Path, workers: int) -> None:
    trace = _trace(tmp_path / "t.parquet", 12)
    with start_sim(["--ttft-ms", "20", "--itl-ms", "10"]) as sim:
        opts = SessionOptions(
            trace_path=trace,
            run_dir=tmp_path / "run",
            base_url=sim.base_url,
            workers=workers,
            scrape_interval_s=0.1,
        )
        started = time.monotonic()
        asyncio.run(run_session(opts, install_signal_handlers=False))
        assert time.monotonic() - started < 15
    info = read_run_info(tmp_path / "run")
    assert info is not None
    scraped = info.server_metrics
    assert scraped is not None
    assert scraped.enabled
    assert scraped.url == f"{sim.root_url}/metrics"
    assert scraped.interval_s == 0.1
    assert scraped.samples > 0
    table = pq.read_table(tmp_path / "run" / s.SERVER_METRICS_FILE)
    assert table.num_rows == scraped.samples
    running = [
        v
        for n, v in zip(
            table.column("name").to_pylist(), table.column("value").to_pylist(), strict=True
        )
        if n == "vllm:num_requests_running"
    ]
    assert max(running) >= 1  # the scrapes overlapped the replay
    assert running[0] == 0  # the first one is a baseline before any request


def test_no_scrape_metrics_writes_nothing(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet", 2)
    with start_sim([]) as sim:
        result = CliRunner().invoke(
            cli,
            [
                "replay",
                str(trace),
                "--base-url",
                sim.base_url,
                "-o",
                str(tmp_path / "run"),
                "--no-progress",
                "--no-scrape-metrics",
            ],
        )
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "run" / s.SERVER_METRICS_FILE).exists()
    assert "server_metrics" not in json.loads((tmp_path / "run" / s.RUN_JSON).read_text())
    info = read_run_info(tmp_path / "run")
    assert info is not None
    assert info.server_metrics is None


def test_scrape_options_are_validated(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet", 1)
    runner = CliRunner()
    bad_url = runner.invoke(
        cli, ["replay", str(trace), "--scrape-metrics", "ftp://x/metrics", "--no-progress"]
    )
    assert bad_url.exit_code == 2
    assert "expected an http(s) URL" in bad_url.output
    bad_interval = runner.invoke(cli, ["replay", str(trace), "--scrape-interval", "0"])
    assert bad_interval.exit_code == 2
    help_text = runner.invoke(cli, ["replay", "--help"]).output
    for option in ("--scrape-metrics", "--no-scrape-metrics", "--scrape-interval"):
        assert option in help_text
