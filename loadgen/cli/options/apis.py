"""``api_options``: which API the requests go to and what their bodies carry, shared by
``replay`` and ``sweep``: ``--api`` (every row to one API instead of each row's own),
``--embed-batch`` (inputs per embeddings request), ``--extra-body`` (fields merged into
every body) and ``--no-stream``. The values stay raw keyword arguments (``api``,
``embed_batch``, ``extra_body``, ``no_stream``) for ``loadgen.run.options.SessionOptions``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import orjson

from loadgen.cli.options.group import Command, apply
from loadgen.errors import ConfigError
from traces.schema import APIS


def parse_extra_body(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> dict[str, Any] | None:
    """``--extra-body``: a JSON object, none of whose keys the client owns."""
    if value is None:
        return None
    from loadgen.openai.bodies import extra_body_problem

    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"--extra-body is not valid JSON: {exc}") from None
    problem = extra_body_problem(parsed)
    if problem is not None:
        raise ConfigError(f"--extra-body {problem}")
    result: dict[str, Any] = parsed
    return result


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
    click.option(
        "--extra-body",
        "extra_body",
        default=None,
        metavar="JSON",
        callback=parse_extra_body,
        help="JSON object merged into every request body, e.g. '{\"temperature\": 0}' "
        "(a trace's own sampling columns win; model, messages, stream, max_tokens are "
        "refused).",
    ),
    click.option(
        "--no-stream",
        is_flag=True,
        help="Non-streamed requests: one JSON reply each, E2E and usage only (TTFT, TPOT and "
        "ITL are null); joins TGI's timing headers.",
    ),
)


def api_options() -> Callable[[Command], Command]:
    """The ``--api``, ``--embed-batch``, ``--extra-body`` and ``--no-stream`` options, in
    that order."""

    def decorate(func: Command) -> Command:
        return apply(_OPTIONS, func)

    return decorate
