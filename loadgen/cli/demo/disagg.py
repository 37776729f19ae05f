"""``loadgen demo-compare``: does prefill/decode disaggregation pay off for this traffic?

End to end on the engine simulator: the same two H100s run llama-3.1-8b once as a
monolith (two 1-GPU replicas) and once disaggregated (one prefill and one decode GPU,
400 Gbit/s link). One long-prompt/long-output trace (prompts ~4,000 tokens, outputs ~256)
is swept at the same offered loads against both (one simulator process each), then:
the comparison at the predicted break-even load, both goodput curves, the knees, the
measured crossover, and the budget model's predicted break-even
(``analyzers.budget.disagg_break_even``) next to it.

The simulators run at ``--clock-scale`` 0.25 (four times faster than real time) to keep
the demo under three minutes; every load and latency printed is on the model's clock
(``server_time_scale`` in sweep.json). Loads are in requests per model second.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.text import Text

from loadgen.cli.options.alias import deprecated_alias
from loadgen.run.session import SessionOptions

if TYPE_CHECKING:
    from analyzers.compare.verdict import ComparisonVerdict

MODEL = "llama-3.1-8b"
GPU = "h100"
LINK_GBPS = 400.0
PROMPT_TOKENS = 4000
OUTPUT_TOKENS = 256
SLO_TTFT_MS = 1000.0
SLO_TPOT_MS = 15.0
TIME_SCALE = 0.25


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """How big the demo is: loads (requests per model second) and requests per step."""

    rates: tuple[float, ...]
    requests: int
    cooldown_s: float
    time_scale: float = TIME_SCALE


FULL = Plan(rates=(2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0), requests=100, cooldown_s=1.0)
QUICK = Plan(rates=(3.0, 5.0, 7.0), requests=40, cooldown_s=0.5, time_scale=0.5)
"""Half real time, not a quarter: on a busy 2-core machine the client (5-10% of a core)
is descheduled, not overworked, and at 0.25 the two processes' denser work left the p99
schedule lag of a step near 26 ms on average against 9 ms at 0.5 (12 steps each)."""


def sim_args(topology: str, time_scale: float = TIME_SCALE) -> tuple[str, ...]:
    """The simulator for one layout of the same two GPUs."""
    common = (
        "--model", MODEL, "--gpu", GPU, "--clock-scale", f"{time_scale:g}",
        "--no-prefix-cache", "--seed", "1",
    )  # fmt: skip
    if topology == "monolith":
        return (*common, "--topology", "monolith", "--gpus", "1", "--replicas", "2")
    return (
        *common, "--topology", "disagg", "--prefill-instances", "1", "--prefill-gpus", "1",
        "--decode-instances", "1", "--decode-gpus", "1", "--link-gbps", f"{LINK_GBPS:g}",
    )  # fmt: skip


def write_trace(path: Path, requests: int, seed: int) -> None:
    """Long prompts and long outputs (lognormal, sigma 0.25), Poisson arrivals."""
    from traces.synth.arrivals import ArrivalSpec
    from traces.synth.lengths import LogNormal
    from traces.synth.trace import ClassShare, SynthConfig, WorkloadClass, write_synth

    long_mix = WorkloadClass(
        name="long",
        input=LogNormal(mean=PROMPT_TOKENS, sigma=0.25),
        output=LogNormal(mean=OUTPUT_TOKENS, sigma=0.25),
    )
    config = SynthConfig(
        requests=requests,
        arrival=ArrivalSpec(kind="poisson", rate=1.0),
        classes=(long_mix,),
        mix=(ClassShare(name="long", weight=1.0),),
        seed=seed,
    )
    write_synth(config, path)


def predicted_break_even() -> tuple[float, float, float]:
    """The budget model's (monolith max rate, disaggregated max rate, break-even)."""
    from analyzers.budget import LinkSpec, catalog, disagg_break_even
    from analyzers.budget.specs import Deployment

    be = disagg_break_even(
        catalog.model(MODEL),
        Deployment(hardware=catalog.gpu(GPU)),
        replicas=2,
        prompt_tokens=PROMPT_TOKENS,
        output_tokens=OUTPUT_TOKENS,
        slo_ttft_s=SLO_TTFT_MS / 1000,
        slo_tpot_s=SLO_TPOT_MS / 1000,
        link=LinkSpec(name="demo", bandwidth_bytes_per_s=LINK_GBPS * 1e9 / 8, latency_s=0.0),
    )
    mono, dis = be.monolith_max_rate_per_s, be.disagg_max_rate_per_s
    return mono, dis, be.break_even_rate_per_s or float("nan")


def _sweep(trace: Path, out: Path, base_url: str, plan: Plan) -> None:
    from loadgen.run.sweep import LoadStep, SweepOptions, run_sweep

    # The simulator runs time_scale wall seconds per model second: a model rate r is
    # r / time_scale requests per wall second.
    scale = plan.time_scale
    steps = tuple(LoadStep(label=f"{r:g}/s", rate=r / scale) for r in plan.rates)
    options = SweepOptions(
        session=SessionOptions(
            trace_path=trace,
            run_dir=out,
            base_url=base_url,
            request_timeout_s=120.0,
            scrape_metrics=False,
        ),
        steps=steps,
        cooldown_s=plan.cooldown_s,
        server_time_scale=scale,
        labels={"name": out.name},
    )
    asyncio.run(run_sweep(options, install_signal_handlers=False))


def verdict_line(verdict: ComparisonVerdict, predicted: float, plan: Plan) -> str:
    """The demo's last word, one line: the measured crossover against the prediction, or
    the verdict as is (withheld, with its reason; a winner over the whole range)."""
    if verdict.kind == "crossover" and verdict.load is not None:
        gap = verdict.load - predicted
        return (
            f"crossover: measured {verdict.load:.2f} req/s ({verdict.winner} wins above), "
            f"predicted {predicted:.2f} req/s ({gap:+.2f} req/s, {gap / predicted:+.0%}); "
            f"step spacing {plan.rates[1] - plan.rates[0]:g} req/s"
        )
    return f"verdict: {verdict.text} (predicted break-even {predicted:.2f} req/s)"


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """``payload`` as indented JSON."""
    import orjson

    path.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))


@click.command("demo-compare")
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where to put the trace and both sweeps [default: runs/demo-compare-<time>].",
)
@click.option("--quick", is_flag=True, help="Three loads, 40 requests each (about a minute).")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the trace.")
@click.option(
    "--clock-scale",
    "time_scale",
    type=click.FloatRange(min=0.05, max=10),
    default=None,
    help=f"Simulator wall seconds per model second [default: {TIME_SCALE:g}, "
    f"{QUICK.time_scale:g} with --quick]; larger is slower and leaves the client more "
    "time per request on a small machine.",
)
@deprecated_alias(
    "--time-scale", "--clock-scale", "time_scale", type_=click.FloatRange(min=0.05, max=10)
)
def demo_compare(out: Path | None, quick: bool, seed: int, time_scale: float | None) -> None:
    """Monolith vs disaggregated serving of the same GPUs, swept on the simulator.

    Prints both load curves, the comparison at the predicted break-even load, the
    measured crossover and the budget model's prediction. Under three minutes.
    """
    from analyzers.compare.crossover import compare_sweeps
    from analyzers.compare.runs import CompareOptions, compare_runs
    from analyzers.compare.sweep import SweepOptions
    from analyzers.goodput import SLOTargets
    from analyzers.slo.parse import SLOSet, scale_slos
    from loadgen.sim.launch import start_sim
    from reports.compare import comparison_renderables, sweep_comparison_renderables

    console = Console(soft_wrap=False, width=140)
    plan = QUICK if quick else FULL
    if time_scale is not None:
        plan = replace(plan, time_scale=time_scale)
    scale = plan.time_scale
    started = time.monotonic()
    base = out or Path("runs") / f"demo-compare-{time.strftime('%Y%m%d-%H%M%S')}"
    base.mkdir(parents=True, exist_ok=True)
    trace = base / "trace.parquet"
    write_trace(trace, plan.requests, seed)
    mono_max, dis_max, predicted = predicted_break_even()
    console.print(
        f"{MODEL} on 2 x {GPU}: monolith (2 replicas) vs disaggregated (1 prefill + 1 decode, "
        f"{LINK_GBPS:g} Gbit/s); prompts ~{PROMPT_TOKENS}, outputs ~{OUTPUT_TOKENS} tokens; "
        f"SLO TTFT <= {SLO_TTFT_MS:g} ms, TPOT <= {SLO_TPOT_MS:g} ms"
    )
    console.print(
        f"budget model: monolith meets the SLO up to {mono_max:.2f} req/s, disaggregated up "
        f"to {dis_max:.2f} req/s -> predicted break-even {predicted:.2f} req/s"
    )
    sweeps = {}
    for topology in ("monolith", "disagg"):
        with start_sim(sim_args(topology, scale)) as sim:
            console.print(
                f"sweeping {topology} at {', '.join(f'{r:g}' for r in plan.rates)} req/s "
                f"({plan.requests} requests each, simulator time scale {scale:g}) ..."
            )
            sweeps[topology] = base / topology
            _sweep(trace, sweeps[topology], sim.base_url, plan)
    targets = SLOTargets(ttft_ms=SLO_TTFT_MS, tpot_ms=SLO_TPOT_MS)
    result = compare_sweeps(
        sweeps["monolith"], sweeps["disagg"], SweepOptions(slos=SLOSet(goodput=targets))
    )
    for item in sweep_comparison_renderables(result):
        console.print(item, soft_wrap=isinstance(item, Text))
    # The two runs at the load nearest the predicted break-even, compared in detail.
    nearest = min(range(len(plan.rates)), key=lambda i: abs(plan.rates[i] - predicted))
    comparison = compare_runs(
        [sweeps["monolith"] / f"step-{nearest}", sweeps["disagg"] / f"step-{nearest}"],
        CompareOptions(
            percentiles=(50.0, 99.0),
            by_workload=False,
            goodput=targets,
            time_scale=scale,
            labels=("monolith", "disagg"),
            resamples=500,
        ),
    )
    console.print(f"\nAt {plan.rates[nearest]:g} req/s (nearest step to the predicted break-even):")
    for item in comparison_renderables(comparison):
        console.print(item, soft_wrap=isinstance(item, Text))
    from reports.html.report import write_report
    from reports.html.run import ReportOptions
    from reports.jsondoc import comparison_json, sweep_comparison_json

    console.print(f"\n{verdict_line(result.verdict, predicted, plan)}", soft_wrap=True)
    write_json(
        base / "verdict.json",
        {"sweeps": sweep_comparison_json(result), "at_break_even": comparison_json(comparison)},
    )
    # The page shows the comparisons printed above (one verdict, not a second computation);
    # its run sections are on the client's clock, so their goodput targets are scaled.
    report = write_report(
        base / "report.html",
        runs=[sweeps["monolith"] / f"step-{nearest}", sweeps["disagg"] / f"step-{nearest}"],
        labels=["monolith", "disagg"],
        options=ReportOptions(slos=scale_slos(SLOSet(goodput=targets), scale), time_scale=scale),
        markdown=base / "report.md",
        comparison=comparison,
        sweep_comparison=result,
    )
    console.print(
        f"report: {report} (summary: {base / 'report.md'}; verdict: {base / 'verdict.json'})"
    )
    console.print(f"done in {time.monotonic() - started:.0f} s; sweeps in {base}")
