"""Chunked prefill in the tail (issue 22, item 5): the chunk size's effect on decode ITL
and TTFT p99 from the virtual-time engine, the closed form beside it, the
recommendation for a TTFT/ITL pair (``loadgen plan chunk``), the plain plan's lines for
its ``--chunk-tokens`` and ``decompose``'s line for the deployment's chunk size."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzers.budget.catalog import load_catalog
from analyzers.budget.chunking import (
    ChunkRow,
    ChunkRun,
    EngineSetup,
    chunk_run,
    poisson_arrivals,
    quantile,
    recommend,
)
from analyzers.budget.chunksteps import closed_form
from analyzers.budget.engine.scheduler import SchedulerLimits
from analyzers.budget.engine.step import SequenceWork, step_time_s
from analyzers.budget.kv import kv_capacity_tokens
from analyzers.budget.specs import Deployment
from loadgen.cli.root import cli

CAT = load_catalog(None)
MODEL = CAT.model("llama-3.1-8b")
DEPLOY = Deployment(hardware=CAT.gpu("h100"))


def _timer(work: Sequence[SequenceWork]) -> float:
    return step_time_s(MODEL, DEPLOY, work)


SETUP = EngineSetup(
    timer=_timer,
    limits=SchedulerLimits(num_blocks=kv_capacity_tokens(MODEL, DEPLOY) // 16),
)
# 60 requests of 4,000 + 32 tokens at 3 req/s: a long prompt lands on a running batch.
ARRIVALS = poisson_arrivals(60, 3.0, 4000, 32, seed=2)


def test_small_chunks_shorten_the_decode_tail_and_lengthen_the_prompts() -> None:
    small = chunk_run(ARRIVALS, SETUP, 256)
    whole = chunk_run(ARRIVALS, SETUP, None)
    assert small.itl_p99_s < whole.itl_p99_s / 3  # a 256-token chunk, not a 4,000 prompt
    assert small.ttft_p50_s > whole.ttft_p50_s  # 16 steps per prompt instead of one
    assert small.capacity_tokens_per_s < whole.capacity_tokens_per_s  # weights read 16x
    assert small.served == whole.served == len(ARRIVALS)
    again = chunk_run(ARRIVALS, SETUP, 256)
    assert again == small  # virtual time: the same inputs give the same figures


def test_the_closed_form_counts_the_steps_and_the_mixed_step() -> None:
    k, t_dec, t_mix, share = closed_form(
        _timer, 1024, prompt_tokens=4000, output_tokens=32, batch=8, rate=2.0
    )
    assert k == 4
    assert t_mix > t_dec > 0
    assert share == pytest.approx(8 / (8 + (1 - 8 * t_mix) / t_dec))  # 8 mixed steps/s
    k1, _, whole, _ = closed_form(
        _timer, None, prompt_tokens=4000, output_tokens=32, batch=8, rate=2.0
    )
    assert k1 == 1
    assert whole > t_mix


def test_quantile_interpolates_between_order_statistics() -> None:
    assert quantile([], 0.99) == 0.0
    assert quantile([1.0, 2.0, 3.0], 0.5) == 2.0
    assert quantile([0.0, 10.0], 0.99) == pytest.approx(9.9)


def _row(
    chunk: int | None, ttft: float, itl: float, cap: float, targets: tuple[float, float]
) -> ChunkRow:
    run = ChunkRun(
        chunk_tokens=chunk,
        served=10,
        ttft_p50_s=ttft,
        ttft_p99_s=ttft,
        itl_p50_s=itl,
        itl_p99_s=itl,
        itl_max_s=itl,
        mean_batch=4.0,
        capacity_tokens_per_s=cap,
    )
    return ChunkRow(
        run=run,
        steps_per_prompt=1,
        decode_step_s=itl,
        mixed_step_s=itl,
        mixed_share=0.5,
        itl_p99_closed_s=itl,
        ttft_floor_s=ttft,
        meets_ttft=ttft <= targets[0],
        meets_itl=itl <= targets[1],
    )


@pytest.mark.parametrize(
    ("targets", "label", "words"),
    [
        ((0.5, 0.05), "1024", "recommended chunk size: 1024"),  # highest capacity of both
        ((0.5, 0.01), "", "the ITL target binds"),
        ((0.1, 0.05), "", "the TTFT target binds"),
        ((0.1, 0.01), "", "both bind"),
        ((0.35, 0.025), "", "pull apart: ITL is met by 256, TTFT by 2048"),
    ],
)
def test_recommend_the_highest_capacity_meeting_both_or_say_what_binds(
    targets: tuple[float, float], label: str, words: str
) -> None:
    rows = [
        _row(256, 0.40, 0.020, 1000.0, targets),
        _row(1024, 0.36, 0.030, 1900.0, targets),
        _row(2048, 0.30, 0.060, 1700.0, targets),
    ]
    got, verdict = recommend(rows, *targets)
    assert got == label
    assert words in verdict
    assert recommend(rows, None, 0.05) == ("", recommend(rows, None, None)[1])


def test_plan_chunk_prints_the_table_and_recommends() -> None:
    args = ["plan", "chunk", "--model", "llama-3.1-8b", "--gpu", "h100", "--rate", "3",
            "--requests", "40", "--output-tokens", "32", "--chunk-sizes", "256,1024,none",
            "--max-batched-tokens", "512"]  # fmt: skip
    done = CliRunner().invoke(cli, [*args, "--ttft-p99-ms", "2000", "--itl-p99-ms", "60", "--json"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    labels = [row["label"] for row in doc["rows"]]
    assert labels == ["256", "512", "1024", "unchunked"]  # the deployment's 512 added
    assert doc["recommended"] in labels
    assert doc["verdict"].startswith(f"recommended chunk size: {doc['recommended']}")
    assert doc["deployment_line"].startswith("chunked prefill at 512 tokens per step")
    assert all(line["chain"].startswith("k = ceil(4,000 / ") for line in doc["lines"])
    text = CliRunner().invoke(cli, [*args, "--ttft-p99-ms", "1", "--itl-p99-ms", "60"])
    assert text.exit_code == 0, text.output
    assert "steps/prompt" in text.output
    assert "No chunk size meets TTFT p99 <= 1.0 ms" in text.output
    assert "the TTFT target binds" in text.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--chunk-sizes", "256,x"], "not a token count"),
        (["--topology", "disagg"], "monolith"),
    ],
)
def test_plan_chunk_refuses_what_it_cannot_plan(args: list[str], message: str) -> None:
    done = CliRunner().invoke(
        cli, ["plan", "chunk", "--model", "llama-3.1-8b", "--rate", "1", "--requests", "10", *args]
    )
    assert done.exit_code == 2
    assert message in done.output


def test_plain_plan_prints_the_chunk_steps() -> None:
    base = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--json"]
    chunked = json.loads(CliRunner().invoke(cli, [*base, "--chunk-tokens", "1024"]).output)
    keys = {p["key"]: p for p in chunked["prediction"]}
    assert keys["chunk_ttft_s"]["chain"].startswith("ceil(4000 / 1024) = 4 steps")
    assert keys["chunk_itl_s"]["value"] > 0
    plain = json.loads(CliRunner().invoke(cli, base).output)
    assert "chunk_itl_s" not in {p["key"] for p in plain["prediction"]}


def test_decompose_says_what_the_deployments_chunk_size_does(tmp_path: Path) -> None:
    trace, run = tmp_path / "t.parquet", tmp_path / "run"
    runner = CliRunner()
    synth = ["trace", "synth", "--requests", "20", "--rate", "6", "-o", str(trace)]
    assert runner.invoke(cli, synth).exit_code == 0
    sim = ["simulate", str(trace), "--model", "llama-3.1-8b", "--max-batched-tokens", "512"]
    assert runner.invoke(cli, [*sim, "-o", str(run)]).exit_code == 0
    done = runner.invoke(cli, ["decompose", str(run), "--json"])
    assert done.exit_code == 0, done.output
    line = json.loads(done.stdout)["chunking"]
    assert line.startswith("chunked prefill at 512 tokens per step: ITL p99 ")
    assert "unchunked" in line
    assert "schedule replay of 20 requests" in line
    # The replay is the engine that produced the run: its chunked p99s are the run's own.
    found = re.search(r"ITL p99 ([\d.]+) ms .* TTFT p99 ([\d.]+) ms vs", line)
    assert found is not None
    measured = json.loads(runner.invoke(cli, ["analyze", str(run), "--json"]).stdout)
    metrics = measured["overall"]["metrics"]
    assert float(found[1]) == pytest.approx(metrics["itl_ms"]["p99"], rel=0.02, abs=0.1)
    assert float(found[2]) == pytest.approx(metrics["ttft_ms"]["p99"], rel=0.02, abs=0.1)
    text = runner.invoke(cli, ["decompose", str(run)])
    assert "chunked prefill at 512 tokens per step" in text.stdout
    batch_one = runner.invoke(cli, ["decompose", str(run), "--batch-1", "--json"])
    assert json.loads(batch_one.stdout)["chunking"] is None
