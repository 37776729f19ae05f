"""``loadgen compare``: a thin command over ``analyzers.compare.runs`` (runs of one trace on
different deployments) and ``analyzers.compare.crossover`` (two sweeps and their crossover),
rendered by ``reports.compare``.

Exits 2 when asked to compare runs of different traces without
``--allow-different-traces``, like every bad input.
"""

from __future__ import annotations

from pathlib import Path

import click

from loadgen.cli.echo import echo_json, echo_renderables, write_text
from loadgen.cli.errors import one_line_errors
from loadgen.cli.options.alias import deprecated_alias
from loadgen.cli.options.bootstrap import bootstrap_options
from loadgen.cli.options.output import (
    by_option,
    json_option,
    markdown_option,
    percentiles_option,
)
from loadgen.cli.options.runpath import RUN_PATH
from loadgen.cli.options.slo import load_slos, slo_option


@click.command()
@click.argument("runs", nargs=-1, required=True, type=RUN_PATH)
@one_line_errors
@click.option(
    "--label",
    "labels",
    multiple=True,
    help="A name per run, in order [default: directory names].",
)
@click.option(
    "--metrics",
    default="ttft_ms,tpot_ms,itl_ms,e2e_ms",
    show_default=True,
    help="Comma-separated metrics to compare.",
)
@percentiles_option("50,90,99", verb="compare")
@slo_option()
@bootstrap_options
@click.option(
    "--clock-scale",
    "time_scale",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="The simulator's --clock-scale the runs were made at (wall seconds per model "
    "second): report latencies on its model clock.",
)
@deprecated_alias(
    "--time-scale", "--clock-scale", "time_scale", type_=click.FloatRange(min=0, min_open=True)
)
@click.option(
    "--allow-different-traces", is_flag=True, help="Compare runs of different traces anyway."
)
@by_option
@markdown_option
@json_option
def compare(
    runs: tuple[Path, ...],
    labels: tuple[str, ...],
    metrics: str,
    percentiles: tuple[float, ...],
    slo_args: tuple[str, ...],
    resamples: int,
    seed: int,
    time_scale: float,
    allow_different_traces: bool,
    by: str,
    markdown: Path | None,
    as_json: bool,
) -> None:
    """Compare runs of the same trace on different deployments (A B [C...]).

    Every run is compared against the first: per class, metric and percentile both
    values, the difference and its bootstrap 95% interval, TTFT components where the
    server reports them, and plain verdict lines. Two sweep directories give both
    goodput curves, the knees and the crossover load (needs goodput targets: --slo).
    No winner or crossover is declared on an invalid run or step (client-bound, too few
    samples, ...) or within noise: one "no verdict: ..." line says why.

    Example: loadgen compare runs/monolith runs/disagg --label monolith --label disagg
    """
    from analyzers.compare.crossover import compare_sweeps
    from analyzers.compare.sweep import SweepOptions, is_sweep_dir

    slos = load_slos(slo_args)
    sweeps = [is_sweep_dir(r) for r in runs]
    if any(sweeps):
        from reports.compare import sweep_comparison_markdown, sweep_comparison_renderables

        if not all(sweeps) or len(runs) != 2:
            raise click.UsageError("compare two sweep directories, or run directories only")
        result = compare_sweeps(
            runs[0],
            runs[1],
            SweepOptions(slos=slos),
            labels=(labels[0], labels[1]) if len(labels) >= 2 else None,
            allow_different_traces=allow_different_traces,
        )
        if markdown is not None:
            write_text(markdown, sweep_comparison_markdown(result))
        if as_json:
            from reports.jsondoc import sweep_comparison_json

            echo_json(sweep_comparison_json(result))
            return
        echo_renderables(sweep_comparison_renderables(result))
        return
    from analyzers.compare.runs import CompareOptions, compare_runs
    from analyzers.goodput import SLOTargets
    from reports.compare import comparison_markdown, comparison_renderables

    comparison = compare_runs(
        list(runs),
        CompareOptions(
            metrics=tuple(m.strip() for m in metrics.split(",") if m.strip()),
            percentiles=percentiles,
            by_workload=by == "workload",
            goodput=slos.goodput if slos.goodput != SLOTargets() else None,
            resamples=resamples,
            seed=seed,
            allow_different_traces=allow_different_traces,
            time_scale=time_scale,
            labels=labels or None,
        ),
    )
    if markdown is not None:
        write_text(markdown, comparison_markdown(comparison))
    if as_json:
        from reports.jsondoc import comparison_json

        echo_json(comparison_json(comparison))
        return
    echo_renderables(comparison_renderables(comparison))
