"""Which rows a command analyses: ``--trim-start/--trim-end`` (every command that reads a
run) and the steady-state window ``--start/--end/--include-warmup`` (``analyze``,
``decompose``), handed to the command as one ``analyzers.frames.RowSelection``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any

import click

from loadgen.cli.options.group import Command, apply

if TYPE_CHECKING:
    from analyzers.frames import RowSelection


def _seconds(
    flag: str, dest: str, default: float | None, text: str
) -> Callable[[Command], Command]:
    """An option in seconds on the run's due-time axis (never negative); a default is shown."""
    return click.option(
        flag,
        dest,
        type=click.FloatRange(min=0),
        default=default,
        show_default=default is not None,
        help=text,
    )


_TRIM = (
    _seconds(
        "--trim-start", "trim_start_s", 0.0, "Drop requests due in the first S seconds (warm-up)."
    ),
    _seconds(
        "--trim-end", "trim_end_s", 0.0, "Drop requests due in the last S seconds (cool-down)."
    ),
)

_WINDOW = (
    _seconds(
        "--start", "start_s", None, "Steady-state window: keep requests due from S seconds on."
    ),
    _seconds("--end", "end_s", None, "Steady-state window: keep requests due before S seconds."),
    click.option(
        "--include-warmup",
        is_flag=True,
        help="Keep the rows flagged warmup (excluded by default).",
    ),
)


def row_selection(
    *,
    trim_start_s: float = 0.0,
    trim_end_s: float = 0.0,
    start_s: float | None = None,
    end_s: float | None = None,
    include_warmup: bool = False,
) -> RowSelection:
    """The selection the options name; a window that ends before it starts is a usage
    error (exit 2)."""
    from analyzers.frames import RowSelection

    if start_s is not None and end_s is not None and end_s <= start_s:
        raise click.BadParameter("--end must be after --start", param_hint="--end")
    return RowSelection(
        exclude_warmup=not include_warmup,
        trim_start_s=trim_start_s,
        trim_end_s=trim_end_s,
        start_s=start_s,
        end_s=end_s,
    )


def selection_options(*, window: bool) -> Callable[[Command], Command]:
    """Add the trim options (and with ``window`` the steady-state window); the command
    receives ``selection: RowSelection`` in their place."""

    def decorate(func: Command) -> Command:
        @wraps(func)
        def with_selection(
            *args: Any,
            trim_start_s: float,
            trim_end_s: float,
            start_s: float | None = None,
            end_s: float | None = None,
            include_warmup: bool = False,
            **kwargs: Any,
        ) -> Any:
            kwargs["selection"] = row_selection(
                trim_start_s=trim_start_s,
                trim_end_s=trim_end_s,
                start_s=start_s,
                end_s=end_s,
                include_warmup=include_warmup,
            )
            return func(*args, **kwargs)

        return apply((*_TRIM, *_WINDOW) if window else _TRIM, with_selection)

    return decorate
