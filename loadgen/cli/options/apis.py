"""``api_options``: which API the requests go to, shared by ``replay`` and ``sweep``:
``--api`` (every row to one API instead of each row's own) and ``--embed-batch`` (inputs
per embeddings request). The values stay raw keyword arguments (``api``, ``embed_batch``)
for ``loadgen.run.options.SessionOptions``."""

from __future__ import annotations

from collections.abc import Callable

import click

from loadgen.cli.options.group import Command, apply
from traces.schema import APIS

_OPTIONS = (
    click.option(
        "--api",
        type=click.Choice(sorted(APIS)),
        default=None,
        help="Send every request to this API instead of each trace row's own: chat, "
        "completions, responses (/v1/responses, streamed events) or embeddings "
        "(/v1/embeddings, not streamed: latency and items/s) [default: the trace's api "
        "column].",
    ),
    click.option(
        "--embed-batch",
        type=click.IntRange(min=1, max=2048),
        default=1,
        show_default=True,
        help="Embeddings: inputs per request (each row's prompt cut into this many items).",
    ),
)


def api_options() -> Callable[[Command], Command]:
    """The ``--api`` and ``--embed-batch`` options, in that order."""

    def decorate(func: Command) -> Command:
        return apply(_OPTIONS, func)

    return decorate
