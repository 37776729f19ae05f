"""``parquet_out``: the ``-o`` callback of the commands that write a trace, which is always
Parquet: a name with another suffix (``x.csv``) is refused (exit 2), never silently
written as Parquet under that name."""

from __future__ import annotations

from pathlib import Path

import click


def parquet_out(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """``value`` when it ends in ``.parquet`` (or has no suffix), else a usage error."""
    if value is not None and value.suffix and value.suffix.lower() != ".parquet":
        raise click.BadParameter(
            f"{value}: traces are written as Parquet; name the file {value.stem}.parquet "
            "(loadgen export writes a run's rows as CSV or JSON Lines)",
            ctx,
            param,
        )
    return value
