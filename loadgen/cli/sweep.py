"""``loadgen sweep``: replay one trace at successively higher load into a sweep directory.

Thin: parses the loads, builds the base ``SessionOptions`` and calls
``loadgen.run.sweep.run_sweep``; ``--until-slo-breach`` checks each finished step with
``analyzers.slo.gate`` (the composition root may import everything).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console

from loadgen.cli.echo import cli_console
from loadgen.cli.options.alias import deprecated_alias
from loadgen.cli.options.apis import api_options
from loadgen.cli.options.config import config_option, refuse_redacted, write_config
from loadgen.cli.options.slo import load_slos, slo_option
from loadgen.cli.options.url import check_base_url
from loadgen.run.session import SessionOptions
from loadgen.run.sweep import LoadStep


def _stop_on_breach(slo_args: tuple[str, ...], console: Console) -> Callable[[Path], str | None]:
    from analyzers.slo.gate import GateOptions, gate

    slos = load_slos(slo_args)
    if not slos.objectives:
        raise click.UsageError("--until-slo-breach needs objectives (--slo FILE or RULE)")

    def check(step_dir: Path) -> str | None:
        report = gate(step_dir, GateOptions(slos=slos))
        console.print(f"  {step_dir.name}: {report.summary}")
        # An invalid step (client-bound, too few samples) cannot vouch for higher loads either.
        reasons = {"breach": "SLO breach", "infrastructure": "endpoint failure"}
        if report.verdict != "pass":
            return f"{reasons.get(report.verdict, 'invalid run')} at {step_dir.name}"
        return None

    return check


@click.command()
@click.argument("trace", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@config_option
@click.option(
    "--base-url",
    required=True,
    callback=check_base_url,
    help="OpenAI-compatible endpoint, e.g. http://h:8000/v1",
)
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="Sweep directory: sweep.json and one run directory per step (step-0, ...).",
)
@click.option(
    "--rates", default=None, help="Loads: 0.5x,1x,2x (of the trace's rate) or 2,4,8 req/s."
)
@click.option("--concurrency", "concurrencies", default=None, help="Closed loop: 1,4,16,64.")
@click.option(
    "--until-slo-breach", is_flag=True, help="Stop after the first step that breaks --slo."
)
@slo_option(help="SLOs to stop on.")
@click.option(
    "--cooldown",
    "cooldown_s",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Seconds to wait between steps (the server drains its queue).",
)
@click.option("--model", default=None, help="Model name [default: the endpoint's first].")
@click.option(
    "--max-requests",
    type=click.IntRange(min=1),
    default=None,
    help="Replay at most this many requests of the trace per step.",
)
@click.option(
    "--duration",
    "duration_s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Stop dispatching after this many seconds per step.",
)
@click.option(
    "--warmup-requests",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Flag the first N requests of each step as warm-up (left out of analyses).",
)
@click.option(
    "--request-timeout",
    "timeout_s",
    type=float,
    default=600.0,
    show_default=True,
    help="Per-request deadline in seconds.",
)
@click.option(
    "--clock-scale",
    "server_time_scale",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="The simulator's --clock-scale (wall seconds per model second), recorded so that "
    "analyses use its model clock.",
)
@deprecated_alias(
    "--server-time-scale",
    "--clock-scale",
    "server_time_scale",
    type_=click.FloatRange(min=0, min_open=True),
)
@click.option(
    "--api-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    help="Environment variable holding the API key (sent as a Bearer token).",
)
@click.option("--overwrite", is_flag=True, help="Reuse a non-empty sweep directory.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the steps and what the first would send (secrets redacted) and exit 0: "
    "no connection, no sweep directory.",
)
@api_options()
def sweep(
    trace: Path,
    base_url: str,
    out: Path,
    rates: str | None,
    concurrencies: str | None,
    until_slo_breach: bool,
    slo_args: tuple[str, ...],
    cooldown_s: float,
    model: str | None,
    max_requests: int | None,
    duration_s: float | None,
    warmup_requests: int,
    timeout_s: float,
    server_time_scale: float,
    api_key_env: str,
    overwrite: bool,
    dry_run: bool,
    api: str | None,
    embed_batch: int,
) -> None:
    """Replay TRACE at successively higher load: one run directory per step in OUT.

    Then `loadgen analyze OUT` (load curves and the knee) or `loadgen compare OUT_A OUT_B`
    (the crossover of two deployments).

    Writes config.toml (the resolved options) to OUT: `loadgen sweep --config
    OUT/config.toml -o NEW` sweeps again. Options can come from a TOML file (--config;
    flags given as well win).

    \b
    Examples:
      loadgen sweep trace.parquet --base-url http://localhost:8000/v1 -o sw --rates 1x,2x,4x
      loadgen sweep --config sweep.toml -o sw2 --rates 8,16
      loadgen sweep trace.parquet --base-url http://localhost:8000/v1 -o sw --rates 1x --dry-run
    """
    refuse_redacted(click.get_current_context())
    from loadgen.run.sweep import SweepOptions, parse_concurrency, parse_rates, run_sweep

    if rates is not None and concurrencies is not None:
        raise click.UsageError("give either --rates or --concurrency, not both")
    if rates is None and concurrencies is None and not until_slo_breach:
        raise click.UsageError("give --rates or --concurrency (or --until-slo-breach)")
    if rates is not None:
        steps = parse_rates(rates)
    elif concurrencies is not None:
        steps = parse_concurrency(concurrencies)
    else:
        steps = parse_rates("0.5x,1x,2x,4x,8x,16x,32x,64x")
    console = cli_console()
    stop = _stop_on_breach(slo_args, console) if until_slo_breach else None
    options = SweepOptions(
        session=SessionOptions(
            trace_path=trace,
            run_dir=out,
            base_url=base_url,
            model=model,
            max_requests=max_requests,
            duration_s=duration_s,
            warmup_requests=warmup_requests,
            request_timeout_s=timeout_s,
            api_key=os.environ.get(api_key_env) or None,
            overwrite=overwrite,
            api=api,
            embed_batch=embed_batch,
        ),
        steps=steps,
        cooldown_s=cooldown_s,
        server_time_scale=server_time_scale,
    )

    if dry_run:
        _dry_run(options.session, steps)
        return

    def on_step(index: int, step: LoadStep, run_dir: Path) -> None:
        console.print(f"step {index}: {step.label} -> {run_dir}")

    result = asyncio.run(run_sweep(options, stop_after=stop, on_step=on_step))
    write_config(click.get_current_context(), result.sweep_dir)
    from loadgen.cli.results import write_run_results

    for step_dir in sorted(p for p in result.sweep_dir.glob("step-*") if p.is_dir()):
        write_run_results(step_dir)
    console.print(f"sweep {result.stop_reason}: {len(result.steps)} step(s) in {result.sweep_dir}")
    if result.steps:
        console.print(_knee_line(result.sweep_dir, slo_args), soft_wrap=True)
    console.print(f"next: loadgen analyze {result.sweep_dir}")


def _dry_run(session: SessionOptions, steps: tuple[LoadStep, ...]) -> None:
    """Print the steps and the first request, as ``replay --dry-run`` does; sends nothing."""
    from loadgen.cli.dryrun import echo_dry_run
    from loadgen.run.dryrun import plan_dry_run

    plan = plan_dry_run(session)
    base = plan.mean_rate
    shown = []
    for step in steps:
        if step.concurrency is not None:
            shown.append(f"{step.label} ({step.concurrency} in flight)")
        elif step.rate is not None:
            shown.append(f"{step.label} ({step.rate:.3g} req/s)")
        elif step.multiple is not None and base is not None:
            shown.append(f"{step.label} ({base * step.multiple:.3g} req/s)")
        else:
            shown.append(step.label)
    echo_dry_run(plan)
    click.echo(f"steps: {len(steps)}: " + ", ".join(shown))


def _knee_line(sweep_dir: Path, slo_args: tuple[str, ...]) -> str:
    """The sweep's knee in one line, or why there is none (no SLO; withheld on an invalid
    step, naming it and its flag)."""
    from analyzers.compare.sweep import SweepOptions as JudgeOptions
    from analyzers.compare.sweep import analyze_sweep

    analysis = analyze_sweep(sweep_dir, JudgeOptions(slos=load_slos(slo_args)))
    invalid = [st for st in analysis.steps if not st.valid]
    knee = analysis.knee
    text = (
        f"knee: {knee.offered:.3g} {analysis.load_unit} ({analysis.knee_note})"
        if knee is not None
        else f"knee: none ({analysis.knee_note})"
    )
    if invalid and knee is not None:
        text += f"; {len(invalid)} invalid step(s) above it, first {invalid[0].label}"
    return text
