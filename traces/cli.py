"""``loadgen trace``: make, import, inspect and transform workload traces.

Each subcommand lives in its own module and is attached here.
"""

from __future__ import annotations

import click


@click.group()
def trace() -> None:
    """Make, import, inspect and transform workload traces (Parquet, schema v1)."""
