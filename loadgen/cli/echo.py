"""Printing and writing what an analysing command produced: JSON or rich renderables on
stdout, and the files it was asked for. Rendering itself is ``reports``' job."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console


PIPE_WIDTH = 200
"""Columns rich lays tables out in when stdout is not a terminal (a CI log, a pipe): rich's
default there is 80, which cuts wide tables; ``COLUMNS`` still wins when set."""


def cli_console(**kwargs: Any) -> Console:
    """A rich ``Console`` for a command's output: the terminal's width in a terminal, and
    ``PIPE_WIDTH`` (or ``COLUMNS``) outside one, so that tables are not cut in CI logs."""
    from rich.console import Console

    console = Console(**kwargs)
    if not console.is_terminal and "COLUMNS" not in os.environ and "width" not in kwargs:
        console.width = PIPE_WIDTH
    return console


def echo_json(payload: dict[str, Any]) -> None:
    """``payload`` as indented JSON on stdout."""
    import orjson

    click.echo(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode())


def echo_renderables(renderables: Iterable[Any]) -> None:
    """Rich tables and lines on stdout, never wrapped (tables keep their width in pipes; a
    line of text stays one line, so that a verdict can be grepped)."""
    from rich.text import Text

    console = cli_console(soft_wrap=False)
    for item in renderables:
        console.print(item, soft_wrap=isinstance(item, Text))


def write_text(path: Path, text: str) -> None:
    """Write an output file a command was asked for, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
