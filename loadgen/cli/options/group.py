"""Applying a group of click options to a command in ``--help`` order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Command = Callable[..., Any]
"""A command's callback, before ``click.command`` makes it a command."""


def apply(options: Sequence[Callable[[Command], Command]], func: Command) -> Command:
    """``func`` with ``options`` added, the first listed first in ``--help``.

    Click collects decorators bottom-up, so they are applied in reverse.
    """
    for option in reversed(options):
        func = option(func)
    return func
