"""Printing and writing what an analysing command produced: JSON or rich renderables on
stdout, and the files it was asked for. Rendering itself is ``reports``' job."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click


def echo_json(payload: dict[str, Any]) -> None:
    """``payload`` as indented JSON on stdout."""
    import orjson

    click.echo(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode())


def echo_renderables(renderables: Iterable[Any]) -> None:
    """Rich tables and lines on stdout, never wrapped (tables keep their width in pipes; a
    line of text stays one line, so that a verdict can be grepped)."""
    from rich.console import Console
    from rich.text import Text

    console = Console(soft_wrap=False)
    for item in renderables:
        console.print(item, soft_wrap=isinstance(item, Text))


def write_text(path: Path, text: str) -> None:
    """Write an output file a command was asked for, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
