"""Old option spellings kept for one release: ``deprecated_alias("--warmup",
"--warmup-requests", "warmup_requests")`` adds a hidden ``--warmup`` that sets the
``warmup_requests`` parameter and says on stderr which spelling replaces it
(CHANGELOG, "Deprecated").

The alias hands its value over through ``ctx.default_map``: click processes the options
given on the command line before the others, so the new option, when not given itself,
takes the alias's value (and, given as well, wins). This works alike on every click
version the project supports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def deprecated_alias(
    old: str, new: str, target: str, *, type_: Any = None, is_flag: bool = False
) -> Decorator:
    """A hidden option ``old`` that sets parameter ``target`` (the option ``new``), with a
    ``warning:`` line on stderr when used."""

    def hand_over(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        source = ctx.get_parameter_source(param.name or "")
        if value is None or source is not click.core.ParameterSource.COMMANDLINE:
            return
        click.echo(
            f"warning: {old} is deprecated and will be removed in the next release; use {new}",
            err=True,
        )
        ctx.default_map = {**(ctx.default_map or {}), target: value}

    return click.option(
        old,
        f"{target}__alias",
        type=type_,
        is_flag=is_flag,
        default=None,
        hidden=True,
        expose_value=False,
        callback=hand_over,
        help=f"Deprecated spelling of {new}.",
    )
