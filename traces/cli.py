"""``loadgen trace``: make, import, inspect and transform workload traces.

Each subcommand lives in its own module and is imported only when used.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

_SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "synth": ("traces.cli_synth:synth", "Synthesize a seeded workload trace."),
    "import": ("traces.cli_import:import_", "Convert a public trace format into a trace file."),
    "info": ("traces.cli_tools:info", "Summarize a trace: rate, burstiness, lengths, reuse."),
    "validate": ("traces.cli_tools:validate", "Check a trace file against schema v1."),
    "slice": ("traces.cli_tools:slice_", "Cut a trace by time window, count or class."),
    "scale": ("traces.cli_tools:scale", "Rescale a trace's time axis, keeping burstiness."),
    "merge": ("traces.cli_tools:merge", "Merge traces into one, ordered by arrival."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when run or when their help is
    shown, so that ``loadgen --help`` and ``loadgen replay`` never pay for Polars or
    matplotlib. ``lazy_commands`` maps a name to ``("module:attribute", "one-line help")``.
    The root ``loadgen`` group is one too; it lives here because ``traces`` is the package
    every other one may import."""

    def __init__(
        self,
        *args: Any,
        lazy_commands: Mapping[str, tuple[str, str]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands: dict[str, tuple[str, str]] = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.lazy_commands) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        target = self.lazy_commands.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target[0].split(":")
        command = getattr(importlib.import_module(module_name), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target[0]} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [
            (name, self.lazy_commands[name][1])
            if name in self.lazy_commands
            else (name, self.commands[name].get_short_help_str())
            for name in self.list_commands(ctx)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, lazy_commands=_SUBCOMMANDS)
def trace() -> None:
    """Make, import, inspect and transform workload traces (Parquet, schema v1)."""
