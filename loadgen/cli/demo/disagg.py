"""``loadgen demo-compare``: does prefill/decode disaggregation pay off for this traffic?

On the engine simulator: the same two H100s run llama-3.1-8b once as a monolith (two
1-GPU replicas) and once disaggregated (one prefill and one decode GPU, 400 Gbit/s link),
on one long-prompt/long-output trace (prompts ~4,000 tokens, outputs ~256).

1. The crossover comes from the offline engine (``loadgen simulate``'s, in virtual time):
   both deployments over a grid of loads, then a bisection on the load
   (:mod:`loadgen.cli.demo.offline`). Exact, seconds, the same on any machine.
2. Two loads, a quarter below and above it, are run against the HTTP simulator (one
   process per deployment), and both numbers are printed side by side.
3. The verdict is the offline crossover confirmed by those checks
   (``analyzers.compare.confirm``): withheld, with the reason, when a check is invalid
   (client-bound, simulator slip) or disagrees. A busy machine then yields "no verdict",
   never a different winner.

The budget model's predicted break-even (``analyzers.budget.disagg_break_even``) is shown
next to it, and the two HTTP runs above the crossover are compared in detail. The HTTP
simulators run at ``--clock-scale`` (wall seconds per model second); every load and latency
printed is on the model's clock (``server_time_scale`` in sweep.json).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from loadgen.cli.options.alias import deprecated_alias
from loadgen.run.session import SessionOptions

if TYPE_CHECKING:
    from analyzers.compare.confirm import CheckPoint
    from analyzers.compare.verdict import ComparisonVerdict
    from loadgen.sim.config import EngineConfig

MODEL = "llama-3.1-8b"
GPU = "h100"
LINK_GBPS = 400.0
PROMPT_TOKENS = 4000
OUTPUT_TOKENS = 256
SLO_TTFT_MS = 1000.0
SLO_TPOT_MS = 15.0
TIME_SCALE = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """How big the demo is: the range of loads (requests per model second), requests per
    run, the pause between HTTP runs, and the HTTP simulators' time scale."""

    rates: tuple[float, ...]
    requests: int
    cooldown_s: float
    time_scale: float = TIME_SCALE


FULL = Plan(rates=(2.0, 8.0), requests=100, cooldown_s=1.0)
QUICK = Plan(rates=(3.0, 7.0), requests=40, cooldown_s=0.5, time_scale=1.0)
"""``rates`` is the offline grid's range (every ``offline.GRID_STEP``); the HTTP checks run
two loads only, so they can afford a slower simulator than the old six-step sweeps: on a
busy 2-core machine the client and the simulator are descheduled, not overworked, and
their lateness (schedule lag, simulator slip) is in wall milliseconds, which weigh less
against the latencies of a slower clock."""


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


def verdict_line(verdict: ComparisonVerdict, offline: ComparisonVerdict, predicted: float) -> str:
    """The demo's last word, one line: the crossover against the budget model's prediction,
    or the verdict as is (withheld, with its reason and the unconfirmed offline crossover;
    a winner over the whole range)."""
    if verdict.kind == "crossover" and verdict.load is not None:
        gap = verdict.load - predicted
        return (
            f"crossover: {verdict.load:.2f} req/s ({verdict.winner} wins above; offline engine, "
            f"confirmed over HTTP), predicted {predicted:.2f} req/s ({gap:+.2f} req/s, "
            f"{gap / predicted:+.0%})"
        )
    unconfirmed = ""
    if verdict.withheld and offline.kind == "crossover" and offline.load is not None:
        unconfirmed = f"offline crossover {offline.load:.2f} req/s ({offline.winner}), "
    return f"verdict: {verdict.text} ({unconfirmed}predicted break-even {predicted:.2f} req/s)"


def engines(time_scale: float) -> dict[str, EngineConfig]:
    """The engine each simulator runs, parsed from ``sim_args`` as ``loadgen sim`` parses
    them (so the offline engine runs exactly what the HTTP simulator runs)."""
    from loadgen.cli.options.engine import engine_config, pop_engine_options
    from loadgen.cli.sim import sim

    out = {}
    for topology in ("monolith", "disagg"):
        with sim.make_context("sim", list(sim_args(topology, time_scale))) as ctx:
            config = engine_config(pop_engine_options(dict(ctx.params)))
        assert config is not None
        out[topology] = config
    return out


def checks_table(checks: Sequence[CheckPoint]) -> Table:
    """Offline against HTTP at each check: goodput and TTFT p99 of both deployments."""
    from reports import fmt

    table = Table(title="Offline engine vs HTTP simulator", title_justify="left")
    for column in ("load (req/s)", "deployment", "goodput offline", "goodput HTTP",
                   "TTFT p99 offline", "TTFT p99 HTTP", "HTTP run"):  # fmt: skip
        table.add_column(column, justify="left" if column == "HTTP run" else "right")
    for c in checks:
        for label, off, http in zip(c.labels, c.offline, c.http, strict=True):
            table.add_row(
                f"{c.load:.3g}",
                label,
                fmt.percent(off.goodput),
                fmt.percent(http.goodput),
                fmt.ms(off.ttft_p99_ms),
                fmt.ms(http.ttft_p99_ms),
                "valid" if http.valid else "; ".join(dict.fromkeys(f.kind for f in http.flags)),
            )
    return table


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
@click.option(
    "--quick",
    is_flag=True,
    help="40 requests per run, offline loads 3-7 req/s (about a minute and a half).",
)
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the trace.")
@click.option(
    "--clock-scale",
    "time_scale",
    type=click.FloatRange(min=0.05, max=10),
    default=None,
    help=f"HTTP simulators' wall seconds per model second [default: {TIME_SCALE:g}, "
    f"{QUICK.time_scale:g} with --quick]; larger is slower and leaves the client more "
    "time per request on a small machine.",
)
@deprecated_alias(
    "--time-scale", "--clock-scale", "time_scale", type_=click.FloatRange(min=0.05, max=10)
)
def demo_compare(out: Path | None, quick: bool, seed: int, time_scale: float | None) -> None:
    """Monolith vs disaggregated serving of the same GPUs, on the simulator.

    Finds the crossover with the offline engine (exact, seconds), checks it at two loads
    against the HTTP simulator (printing both), and declares it only if both checks are
    valid and agree; otherwise "no verdict" with the reason. Prints the budget model's
    prediction next to it. About three minutes (--quick: one and a half).

    \b
    Examples:
      loadgen demo-compare --quick
      loadgen demo-compare -o runs/dc --clock-scale 2
    """
    from analyzers.compare.confirm import CheckPoint, confirm
    from analyzers.compare.runs import CompareOptions, compare_runs
    from analyzers.compare.sweep import SweepOptions, analyze_sweep
    from analyzers.goodput import SLOTargets
    from analyzers.slo.parse import SLOSet, scale_slos
    from loadgen.cli.demo.offline import SIDES, check_loads, find_crossover, grid, offline_checks
    from loadgen.sim.launch import start_sim
    from reports.compare import comparison_renderables, sweep_comparison_renderables, verdict_text

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
    targets = SLOTargets(ttft_ms=SLO_TTFT_MS, tpot_ms=SLO_TPOT_MS)
    options = SweepOptions(slos=SLOSet(goodput=targets))
    configs = engines(scale)
    # 1. The crossover on the offline engine: exact, and the same on any machine.
    loads = grid(plan.rates[0], plan.rates[-1])
    clock = time.monotonic()
    offline = find_crossover(base / "offline", trace, configs, loads, options)
    console.print(
        f"offline engine: {offline.simulated} loads x 2 deployments ({plan.requests} requests "
        f"each, {loads[0]:g}-{loads[-1]:g} req/s) in {time.monotonic() - clock:.1f} s"
    )
    for item in sweep_comparison_renderables(offline.comparison)[2:]:  # the curve, verdicts
        console.print(item, soft_wrap=isinstance(item, Text))
    # 2. Two checks over HTTP, one below and one above it.
    points = check_loads(offline.verdict, loads)
    exact = offline_checks(base / "offline-checks", trace, configs, points, options)
    measured = {}
    for topology in SIDES:
        with start_sim(sim_args(topology, scale)) as sim:
            console.print(
                f"checking {topology} over HTTP at {' and '.join(f'{r:g}' for r in points)} "
                f"req/s ({plan.requests} requests each, simulator time scale {scale:g}) ..."
            )
            _sweep(trace, base / topology, sim.base_url, replace(plan, rates=points))
        measured[topology] = analyze_sweep(base / topology, options, label=topology)
    checks = [
        CheckPoint(
            load=load,
            labels=SIDES,
            offline=(exact[SIDES[0]].steps[i], exact[SIDES[1]].steps[i]),
            http=(measured[SIDES[0]].steps[i], measured[SIDES[1]].steps[i]),
        )
        for i, load in enumerate(points)
    ]
    console.print(checks_table(checks))
    verdict = confirm(offline.verdict, checks, tie=options.tie)
    console.print(verdict_text(verdict), soft_wrap=True)
    result = replace(
        offline.comparison,
        verdict=verdict,
        verdicts=(*offline.comparison.verdicts[:-1], verdict.text),
    )
    # The two HTTP runs above the crossover, compared in detail.
    above = [measured[side].steps[-1].run_dir for side in SIDES]
    comparison = compare_runs(
        above,
        CompareOptions(
            percentiles=(50.0, 99.0),
            by_workload=False,
            goodput=targets,
            time_scale=scale,
            labels=SIDES,
            resamples=500,
        ),
    )
    console.print(f"\nAt {points[-1]:g} req/s over HTTP (the check above the crossover):")
    for item in comparison_renderables(comparison):
        console.print(item, soft_wrap=isinstance(item, Text))
    from reports.html.report import write_report
    from reports.html.run import ReportOptions
    from reports.jsondoc import comparison_json, sweep_comparison_json, verdict_json

    console.print(f"\n{verdict_line(verdict, offline.verdict, predicted)}", soft_wrap=True)
    write_json(
        base / "verdict.json",
        {
            "verdict": verdict_json(verdict),
            "offline": sweep_comparison_json(result),
            "checks": [
                {
                    "load": c.load,
                    "lead_offline": c.lead(http=False),
                    "lead_http": c.lead(http=True),
                    "http_flags": [f.reason for step in c.http for f in step.flags],
                }
                for c in checks
            ],
            "above_crossover": comparison_json(comparison),
        },
    )
    # The page shows the comparisons printed above (one verdict, not a second computation);
    # its run sections are on the client's clock, so their goodput targets are scaled.
    report = write_report(
        base / "report.html",
        runs=[Path(r) for r in above],
        labels=list(SIDES),
        options=ReportOptions(slos=scale_slos(SLOSet(goodput=targets), scale), time_scale=scale),
        markdown=base / "report.md",
        comparison=comparison,
        sweep_comparison=result,
    )
    console.print(
        f"report: {report} (summary: {base / 'report.md'}; verdict: {base / 'verdict.json'})"
    )
    console.print(f"done in {time.monotonic() - started:.0f} s; runs in {base}")
