"""What an analysing command prints and writes: ``--percentiles``, ``--by``, ``--json`` and
``--markdown``, passed to the command as they are (percentiles parsed and sorted)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from loadgen.cli.options.group import Command

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
"""``as_json``: JSON on stdout instead of the rich tables."""

markdown_option = click.option(
    "--markdown",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also write a Markdown summary here (for pull requests and CI summaries).",
)
"""``markdown``: a path for the command's Markdown summary, or None."""

by_option = click.option(
    "--by",
    type=click.Choice(["workload", "none"]),
    default="workload",
    show_default=True,
    help="Report per workload class as well as overall.",
)
"""``by``: ``workload`` (per class and overall) or ``none`` (overall only)."""


def parse_percentiles(
    ctx: click.Context | None, param: click.Parameter | None, value: str
) -> tuple[float, ...]:
    """``50,99,99.9`` as sorted distinct percentiles, each strictly between 0 and 100 (a
    click callback: anything else is a usage error, exit 2)."""
    try:
        values = tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of numbers: {value!r}") from None
    if not values or any(not 0 < v < 100 for v in values):
        raise click.BadParameter("percentiles must lie strictly between 0 and 100")
    return tuple(sorted(set(values)))


def percentiles_option(default: str, *, verb: str = "report") -> Callable[[Command], Command]:
    """Add ``--percentiles`` (``percentiles``: a sorted tuple) with the command's default."""
    return click.option(
        "--percentiles",
        callback=parse_percentiles,
        default=default,
        show_default=True,
        help=f"Comma-separated percentiles to {verb}.",
    )
