"""The bootstrap options of the commands that test differences (``gate --baseline``,
``compare``): ``--resamples`` and ``--seed``, passed to the command as they are."""

from __future__ import annotations

import click

from loadgen.cli.options.group import Command, apply


def bootstrap_options(func: Command) -> Command:
    """Add ``resamples`` and ``seed``."""
    return apply(
        (
            click.option(
                "--resamples",
                type=click.IntRange(min=10),
                default=1000,
                show_default=True,
                help="Bootstrap resamples of each confidence interval.",
            ),
            click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed."),
        ),
        func,
    )
