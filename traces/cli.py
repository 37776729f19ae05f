"""``loadgen trace``: make, import, inspect and transform workload traces.

Each subcommand lives in its own module and is imported only when used.
"""

from __future__ import annotations

import importlib

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


class _LazyTraceGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target[0].split(":")
        command = getattr(importlib.import_module(module_name), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target[0]} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, _SUBCOMMANDS[name][1]) for name in sorted(_SUBCOMMANDS)])


@click.group(cls=_LazyTraceGroup)
def trace() -> None:
    """Make, import, inspect and transform workload traces (Parquet, schema v1)."""
