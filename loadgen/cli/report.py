"""``loadgen report``: a thin command over ``reports.html.report.write_report``.

Parses the runs, comparisons, sweeps, budget and SLOs, writes the HTML report (and the
Markdown summary with ``--markdown``) and prints where they went. Errors are one line on
stderr with the error's exit code (2: bad input, 3: invalid run). Polars and matplotlib are
imported inside the command, so that ``loadgen --help`` stays fast. Must not import loadgen.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from loadgen.cli.errors import one_line_errors
from loadgen.cli.options.budget import BudgetChoice, budget_options
from loadgen.cli.options.cache import cache_options
from loadgen.cli.options.output import markdown_option
from loadgen.cli.options.runpath import RUN_PATH
from loadgen.cli.options.selection import selection_options
from loadgen.cli.options.slo import load_slos, slo_option

if TYPE_CHECKING:
    from analyzers.cache import CacheOptions
    from analyzers.frames import RowSelection

_PATH = click.Path(path_type=Path, exists=True)


@click.command()
@click.argument("run", type=RUN_PATH, required=False)
@one_line_errors
@click.option(
    "--compare",
    "others",
    type=_PATH,
    multiple=True,
    help="Another run of the same trace to compare with RUN (repeatable).",
)
@click.option(
    "--sweep",
    "sweeps",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    multiple=True,
    help="A sweep directory (repeat once to compare two sweeps and find the crossover).",
)
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The HTML file [default: report.html in RUN's (or the sweep's) directory].",
)
@markdown_option
@click.option("--label", "labels", multiple=True, help="Names of RUN and each --compare run.")
@budget_options
@click.option(
    "--slo-ttft-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="TTFT SLO: drawn on the charts, used for goodput and the decomposition, and gated "
    "as ttft_from_due_ms.p99 when no --slo/--slo-file is given.",
)
@slo_option()
@click.option(
    "--slo-file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="An SLO file (docs/gates.md).",
)
@selection_options(window=False)
@click.option(
    "--allow-different-traces",
    is_flag=True,
    help="Compare runs (or sweeps) of different traces anyway.",
)
@cache_options
def report(
    run: Path | None,
    others: tuple[Path, ...],
    sweeps: tuple[Path, ...],
    out: Path | None,
    markdown: Path | None,
    labels: tuple[str, ...],
    budget: BudgetChoice,
    slo_ttft_ms: float | None,
    slo_args: tuple[str, ...],
    slo_file: Path | None,
    selection: RowSelection,
    allow_different_traces: bool,
    cache: CacheOptions,
) -> None:
    """Write a self-contained HTML report (and a Markdown summary) of a run, a comparison
    or a sweep: what was run, the verdicts, the tables and the charts.

    RUN is a run directory (or a sweep directory, read as --sweep). A run of sessions
    gets a chart of the prefix cache by turn depth: the cached share the server reported
    beside the share the trace's prefixes allow (the trace from run.json, or --trace).

    Example: loadgen report runs/a --compare runs/b --slo-ttft-ms 200 -o ab.html
    """
    from analyzers.compare.sweep import is_sweep_dir
    from reports.html.report import build_report, console_lines, write_built
    from reports.html.run import ReportOptions

    runs: list[Path] = []
    sweep_dirs = list(sweeps)
    if run is not None and is_sweep_dir(run):
        sweep_dirs.insert(0, run)
    elif run is not None:
        runs.append(run)
    runs += others
    from loadgen.cli.runstatus import warn_if_incomplete

    warn_if_incomplete(*runs)
    if others and not runs[:1]:
        raise click.UsageError("--compare needs a RUN to compare with")
    if not runs and not sweep_dirs:
        raise click.UsageError("give a RUN, or --sweep SWEEP")
    if len(sweep_dirs) > 2:
        raise click.UsageError("at most two sweeps (the crossover compares two)")
    # --slo-file is one more --slo FILE, read before the others.
    slos = load_slos((str(slo_file), *slo_args) if slo_file is not None else slo_args)
    # The budget and time scale: the first run's recorded deployment, --deployment, flags.
    resolved = budget.resolve(runs[0] if runs else None)
    if resolved.provenance is not None:
        click.echo(resolved.provenance, err=True)
    options = ReportOptions(
        slo_ttft_ms=slo_ttft_ms,
        slos=slos,
        budget=resolved.budget,
        selection=selection,
        time_scale=resolved.time_scale or 1.0,
        cache=cache,
    )
    first = runs[0] if runs else sweep_dirs[0]
    home = first if first.is_dir() else first.parent
    built = build_report(
        runs=runs,
        sweeps=sweep_dirs,
        options=options,
        labels=labels or None,
        allow_different_traces=allow_different_traces,
    )
    html_path = write_built(built, out or home / "report.html", markdown)
    for line in console_lines(built):
        click.echo(line)
    click.echo(f"report written to {html_path}")
    if markdown is not None:
        click.echo(f"summary written to {markdown}")
