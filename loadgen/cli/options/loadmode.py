"""``load_mode_options``: how a trace's requests are released, shared by ``replay`` (against
a server) and ``simulate`` (offline): closed loop (``--concurrency``) or open loop, the
trace's own timestamps scaled (``--time-scale``) or rescaled to a mean rate (``--rate``).
The values stay raw keyword arguments; each command checks their combination itself."""

from __future__ import annotations

from collections.abc import Callable

import click

from loadgen.cli.options.group import Command, apply

_OPTIONS = (
    click.option(
        "--concurrency",
        type=click.IntRange(min=1),
        default=None,
        help="Closed loop: keep this many requests in flight.",
    ),
    click.option(
        "--time-scale",
        type=click.FloatRange(min=0),
        default=None,
        help="Open loop: multiply the trace's timestamps (0.5 = twice as fast).",
    ),
    click.option(
        "--rate",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Open loop: rescale to this mean rate (req/s), keeping burstiness.",
    ),
)


def load_mode_options() -> Callable[[Command], Command]:
    """The ``--concurrency``, ``--time-scale`` and ``--rate`` options, in that order."""

    def decorate(func: Command) -> Command:
        return apply(_OPTIONS, func)

    return decorate
