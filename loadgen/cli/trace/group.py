"""``loadgen trace``: make, import, inspect and transform workload traces.

Each subcommand lives in its own module and is imported only when used.
"""

from __future__ import annotations

import click

from loadgen.cli.lazy import LazyGroup

_SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "synth": ("loadgen.cli.trace.synth:synth", "Synthesize a seeded workload trace."),
    "import": (
        "loadgen.cli.trace.importer:import_",
        "Convert a public trace format into a trace file.",
    ),
    "info": (
        "loadgen.cli.trace.tools:info",
        "Summarize a trace: rate, burstiness, lengths, reuse.",
    ),
    "validate": ("loadgen.cli.trace.tools:validate", "Check a trace file against schema v1."),
    "slice": ("loadgen.cli.trace.tools:slice_", "Cut a trace by time window, count or class."),
    "scale": ("loadgen.cli.trace.tools:scale", "Rescale a trace's time axis, keeping burstiness."),
    "merge": ("loadgen.cli.trace.tools:merge", "Merge traces into one, ordered by arrival."),
}


@click.group(cls=LazyGroup, lazy_commands=_SUBCOMMANDS)
def trace() -> None:
    """Make, import, inspect and transform workload traces (Parquet, schema v1)."""
