"""``one_line_errors``: the analysing commands' failures as one stderr line and an exit code,
also when a command is invoked on its own (tests, ``CliRunner``), not under the root group.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

import click


def one_line_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Print our packages' errors (any ``UserError``) as ``error: ...`` and exit with their code; a
    run Polars cannot read exits 3. Put it above the option groups that parse files (the
    budget), so that their errors are caught too."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import polars as pl

        from traces.errors import UserError

        ctx = click.get_current_context()
        try:
            return func(*args, **kwargs)
        except UserError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except pl.exceptions.PolarsError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            click.echo(f"error: cannot read the run: {first}", err=True)
            ctx.exit(3)

    return wrapper
