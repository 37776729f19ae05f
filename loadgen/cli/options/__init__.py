"""The option groups that several commands share, each declared once.

A group is a decorator that adds its options to a command in the order ``--help`` lists
them. The groups that stand for one library value (the row selection, the budget) hand the
command that value instead of the raw options; ``--slo`` stays raw, because ``sweep`` reads
it only when it stops on a breach. Public helpers do the parsing for callers without the
decorator: ``row_selection``, ``load_budget``, ``load_slos``, ``parse_percentiles``.
Options one command owns stay in that command's module.

Nothing here imports polars, matplotlib or the analyzers at import time: the library values
are built inside the helpers, when a command runs, so ``--help`` stays fast.
"""

from __future__ import annotations

from loadgen.cli.options.bootstrap import bootstrap_options
from loadgen.cli.options.budget import budget_options, engine_shape, load_budget
from loadgen.cli.options.output import (
    by_option,
    json_option,
    markdown_option,
    parse_percentiles,
    percentiles_option,
)
from loadgen.cli.options.selection import row_selection, selection_options
from loadgen.cli.options.slo import load_slos, slo_option

__all__ = [
    "bootstrap_options",
    "budget_options",
    "by_option",
    "engine_shape",
    "json_option",
    "load_budget",
    "load_slos",
    "markdown_option",
    "parse_percentiles",
    "percentiles_option",
    "row_selection",
    "selection_options",
    "slo_option",
]
