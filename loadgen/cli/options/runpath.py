"""``RUN_PATH``: the click type of an analysing command's RUN argument, so that every such
command answers a missing path, or a trace where a run belongs, alike: exit 2 (bad input),
one line. A run directory that exists but cannot be read is the analyzers' to refuse
(exit 3, an invalid run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

_GLOB = "*?["
_RUN_COLUMN = "due_ns"  # every run's rows have it; no trace has it


class RunPathType(click.ParamType[Path, Any]):
    """A run directory, a run's Parquet file, or a glob of them (passed through)."""

    name = "run"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        path = Path(value)
        if any(ch in str(value) for ch in _GLOB):
            return path
        if not path.exists():
            self.fail(f"{value}: no such run directory or file", param, ctx)
        if path.is_file() and path.suffix == ".parquet":
            import polars as pl

            try:
                names = list(pl.read_parquet_schema(path))
            except (OSError, pl.exceptions.PolarsError):
                return path  # unreadable: the analyzers say so (an invalid run, exit 3)
            if _RUN_COLUMN not in names:
                self.fail(
                    f"{value}: a trace or other Parquet file, not a run "
                    "(pass the run directory that loadgen replay -o wrote)",
                    param,
                    ctx,
                )
        return path


RUN_PATH = RunPathType()
"""The RUN argument's type (see the module docstring)."""
