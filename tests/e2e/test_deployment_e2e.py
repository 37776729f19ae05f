"""End to end: the simulator's deployment travels with the run, and ``loadgen decompose
RUN`` with no flags builds the simulator's own budget and time scale from run.json.

A light load (each request alone, spaced by several service times) at time scale 1 and 4:
the prefill predicted with the server's timings hidden is the simulator's truth within the
acceptance tolerance (10% or 5 ms) at p50, p90 and p99, the queue at p50 (its tail holds
this machine's jitter: tests/e2e/test_decompose_accuracy.py takes it out), and the network
term is the loopback's (not the time-scaled 227 ms of issue 20). Disaggregated, the run
carries the KV link to the budget (the transfer term is predicted, not 0).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from click.testing import CliRunner

from analyzers.decompose import DecomposeOptions, request_terms
from analyzers.decompose.columns import term_col
from loadgen.cli.options.budget import BudgetChoice
from loadgen.cli.root import cli
from loadgen.run.session import SessionOptions, run_session
from loadgen.sim.launch import SimProcess
from traces import schema as s
from traces.io import read_run_info, write_trace

pytestmark = pytest.mark.serial  # times a real server or process: run alone

SimFactory = Callable[..., SimProcess]
ROOT = Path(__file__).resolve().parents[2]
MONOLITH = ROOT / "examples" / "deployments" / "vllm-monolith.toml"
DISAGG = ROOT / "examples" / "deployments" / "vllm-disagg.toml"
LENGTHS = (512, 1024, 2048, 3072)


def within(inferred: float, truth: float) -> bool:
    return abs(inferred - truth) <= max(0.10 * abs(truth), 5.0)


def light_run(tmp_path: Path, base_url: str, scale: float, n: int = 6) -> Path:
    # An H100 prefills 3k tokens of an 8B model in about 0.15 s: 0.3 model s apart.
    trace = tmp_path / "t.parquet"
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i:02d}" for i in range(n)],
                "arrival_s": [i * 0.3 * scale for i in range(n)],
                "input_tokens": [LENGTHS[i % len(LENGTHS)] for i in range(n)],
                "output_tokens": [2] * n,
            }
        ),
        trace,
    )
    opts = SessionOptions(
        trace_path=trace, run_dir=tmp_path / "run", base_url=base_url, scrape_metrics=False
    )
    return asyncio.run(run_session(opts, install_signal_handlers=False)).run_dir


def quantiles(column: pl.Series) -> list[float]:
    return [float(column.quantile(q, interpolation="linear") or 0.0) for q in (0.5, 0.9, 0.99)]


@pytest.mark.slow
@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_decompose_with_no_flags_reads_the_simulators_deployment(
    tmp_path: Path, sim: SimFactory, scale: float
) -> None:
    server = sim("--deployment", str(MONOLITH), "--clock-scale", str(scale))
    run_dir = light_run(tmp_path, server.base_url, scale)
    info = read_run_info(run_dir)
    assert info is not None
    assert info.deployment is not None
    spec = info.deployment.spec()
    assert (spec.model, spec.gpu, spec.replicas, spec.time_scale) == (
        "llama-3.1-8b", "h100", 2, scale,
    )  # fmt: skip
    assert set(info.deployment.sources().values()) == {"simulator card"}

    resolved = BudgetChoice().resolve(run_dir)
    budget = resolved.budget
    assert budget is not None
    assert resolved.time_scale == scale
    assert budget.deployment.chunk_tokens == 2048
    assert (budget.replicas, budget.max_num_seqs, budget.first_token_in_prefill) == (2, 256, True)
    assert resolved.provenance is not None
    assert "simulator card" in resolved.provenance

    terms = request_terms(
        run_dir, budget, DecomposeOptions(hide_server_timings=True, time_scale=scale)
    ).frame.sort(s.REQUEST_ID)
    truth = pl.read_parquet(run_dir / s.REQUESTS_FILE).sort(s.REQUEST_ID)
    got = {t: quantiles(terms.get_column(term_col(t))) for t in ("prefill", "queue", "network")}
    want = {
        "prefill": quantiles(truth.get_column(s.SERVER_PREFILL_MS)),
        "queue": quantiles(truth.get_column(s.SERVER_QUEUE_MS)),
    }
    print(f"\nscale {scale}: inferred {got}; truth {want}")
    for inferred, true in zip(got["prefill"], want["prefill"], strict=True):
        assert within(inferred, true), ("prefill", got["prefill"], want["prefill"])
    # The queue is the remainder: its tail also holds this machine's lateness (the
    # simulator writing late, the client stamping late: tens of ms on a busy 2-core box),
    # which is not the budget's to predict; the median is the budget's.
    assert within(got["queue"][0], want["queue"][0]), ("queue", got["queue"], want["queue"])
    assert got["network"][0] < 5.0, got["network"]

    # The command itself, with no budget flags, says what it used and decomposes.
    result = CliRunner().invoke(cli, ["decompose", str(run_dir), "--json"])
    assert result.exit_code == 0, result.output
    assert "deployment from run.json" in result.output
    assert "time_scale=" in result.output
    # A flag still overrides the run's deployment.
    flagged = BudgetChoice().resolve(run_dir, {"scheduler.max_num_seqs": 8})
    assert flagged.budget is not None
    assert flagged.budget.max_num_seqs == 8
    assert flagged.provenance is not None
    assert "flag --max-num-seqs" in flagged.provenance


@pytest.mark.slow
def test_a_disaggregated_run_carries_its_kv_link_to_the_budget(
    tmp_path: Path, sim: SimFactory
) -> None:
    server = sim("--deployment", str(DISAGG), "--clock-scale", "4")
    run_dir = light_run(tmp_path, server.base_url, 4.0, n=4)
    resolved = BudgetChoice().resolve(run_dir)
    budget = resolved.budget
    assert budget is not None
    assert budget.link is not None
    assert budget.link.bandwidth_bytes_per_s == pytest.approx(400e9 / 8)
    assert budget.link.latency_s == pytest.approx(5e-6)
    assert not budget.first_token_in_prefill
    terms = request_terms(
        run_dir, budget, DecomposeOptions(hide_server_timings=True, time_scale=4.0)
    ).frame.sort(s.REQUEST_ID)
    truth = pl.read_parquet(run_dir / s.REQUESTS_FILE).sort(s.REQUEST_ID)
    transfer = quantiles(terms.get_column(term_col("transfer")))
    true_transfer = quantiles(truth.get_column(s.SERVER_TRANSFER_MS))
    assert transfer[0] > 0.0
    for inferred, true in zip(transfer, true_transfer, strict=True):
        assert within(inferred, true), (transfer, true_transfer)


def test_sim_flags_override_the_file_and_the_card_tells_what_runs(sim: SimFactory) -> None:
    import httpx

    server = sim("--deployment", str(MONOLITH), "--replicas", "3", "--no-prefix-cache")
    card = httpx.get(f"{server.base_url}/models", timeout=10).json()["data"][0]
    spec = card["sim_deployment_spec"]
    assert spec["replicas"] == 3  # the flag
    assert spec["scheduler"]["prefix_caching"] is False  # the flag
    assert spec["scheduler"]["max_batched_tokens"] == 2048  # the file
    assert spec["efficiency"]["memory_fraction"] == 0.9  # the file
    assert spec["time_scale"] == 1.0  # neither: the default
