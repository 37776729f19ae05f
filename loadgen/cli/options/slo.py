"""``--slo FILE|RULE`` (``gate``, ``compare``, ``report``, ``sweep``) and ``load_slos``, which
turns its values into one ``analyzers.slo.parse.SLOSet``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from loadgen.cli.options.group import Command

if TYPE_CHECKING:
    from analyzers.slo.parse import SLOSet

SLO_HELP = "An SLO TOML file, or a rule like 'ttft_ms.p99<=200' or 'goodput>=0.95' (repeat)."


def slo_option(help: str = SLO_HELP) -> Callable[[Command], Command]:
    """Add the repeatable ``--slo`` as ``slo_args`` (its raw values: ``sweep`` parses them only
    when it stops on a breach)."""
    return click.option("--slo", "slo_args", multiple=True, metavar="FILE|RULE", help=help)


def load_slos(args: Iterable[str]) -> SLOSet:
    """``--slo`` values as one set: TOML files (an existing path, or a name ending in .toml)
    merged in order, then the rules. Bad files and rules raise ``SLOError`` (exit 2)."""
    from analyzers.slo.parse import SLOSet, load_slo_file, parse_rules

    slos = SLOSet()
    rules: list[str] = []
    for arg in args:
        if arg.endswith(".toml") or Path(arg).is_file():
            slos = slos.merged(load_slo_file(Path(arg)))
        else:
            rules.append(arg)
    if rules:
        slos = slos.merged(parse_rules(rules))
    return slos
