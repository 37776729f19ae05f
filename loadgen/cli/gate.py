"""``loadgen gate``: a thin command over ``analyzers.slo.gate``, rendered by ``reports.gate``.

Exit codes (docs/gates.md): 0 pass, 1 SLO breach or regression, 2 bad input, 3 invalid run
(also a run, or baseline, whose ``run.json`` says it did not complete: killed and
recovered, still running, interrupted, failed), 4 endpoint or infrastructure failure.
The environment is read here only: ``GITHUB_STEP_SUMMARY`` receives the gate's Markdown
when set.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from loadgen.cli.echo import echo_json, echo_renderables, write_text
from loadgen.cli.errors import one_line_errors
from loadgen.cli.options.bootstrap import bootstrap_options
from loadgen.cli.options.cache import cache_options
from loadgen.cli.options.config import config_option
from loadgen.cli.options.output import json_option, markdown_option
from loadgen.cli.options.runpath import RUN_PATH
from loadgen.cli.options.selection import selection_options
from loadgen.cli.options.slo import load_slos, slo_option

if TYPE_CHECKING:
    from analyzers.cache import CacheOptions
    from analyzers.frames import RowSelection


def _fraction(ctx: click.Context | None, param: click.Parameter | None, value: str) -> float:
    text = value.strip()
    try:
        number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise click.BadParameter(f"expected a fraction or a percentage, got {value!r}") from None
    if number < 0:
        raise click.BadParameter("must not be negative")
    return number


@click.command()
@click.argument("run", type=RUN_PATH)
@one_line_errors
@config_option
@slo_option()
@click.option(
    "--baseline",
    type=click.Path(path_type=Path, exists=True),
    default=None,
    help="A run of the same trace to check for regressions against.",
)
@click.option(
    "--max-regression",
    callback=_fraction,
    default="10%",
    show_default=True,
    help="Tolerated slowdown against --baseline (relative).",
)
@click.option(
    "--junit",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also write the verdicts as a JUnit XML file (one test case per SLO).",
)
@markdown_option
@bootstrap_options
@click.option(
    "--infra-share",
    callback=_fraction,
    default="50%",
    show_default=True,
    help="Share of unreachable requests (connect errors, timeouts, 502-504) that makes "
    "the run an infrastructure failure (exit 4).",
)
@click.option("--allow-different-traces", is_flag=True, help="Allow a baseline of another trace.")
@selection_options(window=False)
@cache_options
@json_option
def gate(
    run: Path,
    slo_args: tuple[str, ...],
    baseline: Path | None,
    max_regression: float,
    junit: Path | None,
    markdown: Path | None,
    resamples: int,
    seed: int,
    infra_share: float,
    allow_different_traces: bool,
    selection: RowSelection,
    cache: CacheOptions,
    as_json: bool,
) -> None:
    """Fail CI when a run breaks its SLOs or regresses against a baseline.

    Exit 0 pass, 1 SLO breach (or significant regression), 2 bad input, 3 invalid run
    (also one that did not complete), 4 endpoint or infrastructure failure. See
    docs/gates.md.

    The verdict is printed once, on stdout (or in the --json document); stderr carries
    only errors.

    Prefix cache: 'cache_hit_ratio>=0.8' (reported cached / prompt tokens) and
    'cache_fidelity>=0.9' (reported / expected cached tokens, the trace from run.json or
    --trace); no data when the server reports no cached tokens.

    \b
    Examples:
      loadgen gate runs/pr --slo slo.toml --baseline runs/main --junit gate.xml
      loadgen gate runs/pr --config gate.toml
      loadgen gate runs/agents --slo 'cache_hit_ratio>=0.6' --slo 'cache_fidelity>=0.9'
    """
    from analyzers.errors import InvalidRunError
    from analyzers.slo.gate import GateOptions, verdict_error
    from analyzers.slo.gate import gate as run_gate
    from loadgen.cli.runstatus import warn_if_incomplete
    from reports.gate import gate_markdown, gate_renderables, junit_xml
    from reports.jsondoc import gate_json

    problems = warn_if_incomplete(run, baseline)
    if problems:
        raise InvalidRunError(f"{problems[0]}: a gate does not judge an incomplete run")
    report = run_gate(
        run,
        GateOptions(
            slos=load_slos(slo_args),
            selection=selection,
            baseline=baseline,
            max_regression=max_regression,
            resamples=resamples,
            seed=seed,
            infra_share=infra_share,
            allow_different_traces=allow_different_traces,
            cache=cache,
        ),
    )
    if junit is not None:
        write_text(junit, junit_xml(report))
    md = gate_markdown(report)
    if markdown is not None:
        write_text(markdown, md)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(md + "\n")
    if as_json:
        echo_json(gate_json(report))
    else:
        echo_renderables(gate_renderables(report))
    error = verdict_error(report)
    if error is not None:
        # The verdict is the gate's output, printed once above (stdout, or in the JSON):
        # only the exit code says it failed; stderr is kept for errors (bad input).
        click.get_current_context().exit(error.exit_code)
