"""``loadgen analyze``: a thin command over ``analyzers.metrics.analyze`` (a run) and
``analyzers.compare.sweep.analyze_sweep`` (a sweep directory); with the expected cached
tokens of ``analyzers.cache`` (``--trace``, ``--kv-block-size``).

Prints rich tables (``reports.tables``, ``reports.compare``) or JSON. Errors are one line on
stderr with the error's exit code (2: bad input, 3: invalid run). Polars and the reports
are imported inside the command, so that ``loadgen --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from loadgen.cli.echo import echo_json, echo_renderables
from loadgen.cli.errors import one_line_errors
from loadgen.cli.options.cache import cache_options
from loadgen.cli.options.output import by_option, json_option, percentiles_option
from loadgen.cli.options.runpath import RUN_PATH
from loadgen.cli.options.selection import selection_options

if TYPE_CHECKING:
    from analyzers.cache import CacheOptions
    from analyzers.frames import RowSelection
    from analyzers.goodput import SLOTargets

DEFAULT_PERCENTILES = "50,90,95,99,99.9"


@click.command()
@click.argument("run", type=RUN_PATH)
@one_line_errors
@selection_options(window=True)
@by_option
@json_option
@percentiles_option(DEFAULT_PERCENTILES)
@click.option(
    "--slo-ttft-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Global TTFT SLO for goodput (a request's own slo_ttft_ms wins).",
)
@click.option(
    "--slo-tpot-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Global TPOT SLO for goodput (a request's own slo_tpot_ms wins).",
)
@click.option(
    "--ttft-from",
    type=click.Choice(["due", "sent"]),
    default="due",
    show_default=True,
    help="Goodput measures TTFT from the due time (no coordinated omission) or from send.",
)
@click.option(
    "--window-s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Throughput window length [default: about 30 windows over the run].",
)
@click.option(
    "--max-schedule-lag-ms",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Flag the run client-bound above this p99 schedule lag.",
)
@cache_options
def analyze(
    run: Path,
    selection: RowSelection,
    by: str,
    as_json: bool,
    percentiles: tuple[float, ...],
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    ttft_from: str,
    window_s: float | None,
    max_schedule_lag_ms: float,
    cache: CacheOptions,
) -> None:
    """Latency percentiles, throughput, errors, prompt fidelity, goodput and prefix-cache
    fidelity of a run.

    RUN is a run directory, a requests Parquet file, a quoted glob of shards, or a sweep
    directory (from `loadgen sweep`: latency, throughput and goodput against offered
    load, and the knee, the highest load meeting the goodput SLOs). A run whose replay
    died (killed, run.json still "running", no process holding it) is recovered first, as
    `loadgen recover` does; a run that did not complete gets a warning on stderr.

    Cached tokens: the share the server reported (token-weighted) beside the share the
    trace's prefix blocks allow (an ideal prefix cache over the requests as sent, whole
    KV blocks), overall and per session turn depth; the trace is the one run.json names
    (or --trace).

    \b
    Examples:
      loadgen analyze runs/today --percentiles 50,99,99.9 --slo-ttft-ms 200
      loadgen analyze runs/agents --trace agents.parquet --kv-block-size 16
    """
    from analyzers.compare.sweep import is_sweep_dir
    from analyzers.goodput import SLOTargets

    slo = SLOTargets(
        ttft_ms=slo_ttft_ms, tpot_ms=slo_tpot_ms, ttft_basis="due" if ttft_from == "due" else "sent"
    )
    if is_sweep_dir(run):
        _analyze_sweep(run, slo, selection)
        return
    from loadgen.cli.runstatus import warn_if_incomplete

    warn_if_incomplete(run)
    from analyzers.analysis import AnalysisOptions
    from analyzers.metrics import analyze as run_analysis
    from analyzers.validity import ValidityThresholds

    options = AnalysisOptions(
        percentiles=percentiles,
        by_workload=by == "workload",
        selection=selection,
        slo=slo,
        window_s=window_s,
        thresholds=ValidityThresholds(max_schedule_lag_p99_ms=max_schedule_lag_ms),
        cache=cache,
    )
    result = run_analysis(run, options)
    if as_json:
        from reports.jsondoc import analysis_json

        echo_json(analysis_json(result))
        return
    from reports.tables import analysis_renderables

    echo_renderables(analysis_renderables(result))


def _analyze_sweep(sweep: Path, slo: SLOTargets, selection: RowSelection) -> None:
    """A sweep's load curves and knee; a sweep's steps are trimmed alike, never windowed."""
    from analyzers.compare.sweep import SweepOptions, analyze_sweep
    from analyzers.frames import RowSelection
    from analyzers.slo.parse import SLOSet
    from reports.compare import sweep_renderables

    options = SweepOptions(
        slos=SLOSet(goodput=slo),
        selection=RowSelection(
            trim_start_s=selection.trim_start_s, trim_end_s=selection.trim_end_s
        ),
    )
    echo_renderables(sweep_renderables(analyze_sweep(sweep, options)))
