"""The option groups that several commands share, each declared once.

A group is a decorator that adds its options to a command in the order ``--help`` lists
them. The groups that stand for one library value (the row selection, the budget) hand the
command that value instead of the raw options; ``--slo`` stays raw, because ``sweep`` reads
it only when it stops on a breach. Public helpers do the parsing for callers without the
decorator (import them from their modules): ``row_selection``, ``load_budget``,
``load_slos``, ``parse_percentiles``.
Options one command owns stay in that command's module.

Nothing here imports polars, matplotlib or the analyzers at import time: the library values
are built inside the helpers, when a command runs, so ``--help`` stays fast.
"""

from __future__ import annotations

__all__ = [
    "alias",
    "apis",
    "bootstrap",
    "budget",
    "cache",
    "config",
    "engine",
    "group",
    "loadmode",
    "outfile",
    "output",
    "runpath",
    "selection",
    "slo",
    "url",
]
