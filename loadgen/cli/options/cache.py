"""The expected cached tokens' inputs: ``--trace`` (the trace the run replayed, when
``run.json``'s path no longer reaches it) and ``--kv-block-size`` (the server's KV block
size, when the run's deployment does not say), handed to the command as one
``analyzers.cache.CacheOptions`` (``analyze``, ``report``, ``gate``).
"""

from __future__ import annotations

from functools import wraps
from pathlib import Path
from typing import Any

import click

from loadgen.cli.options.group import Command, apply

_OPTIONS = (
    click.option(
        "--trace",
        "trace_path",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        default=None,
        help="The trace the run replayed, for the expected cached tokens [default: the "
        "path run.json names]; must match run.json's content hash.",
    ),
    click.option(
        "--kv-block-size",
        type=click.IntRange(min=1),
        default=None,
        help="The server's KV (prefix-cache) block size in tokens [default: the run's "
        "deployment in run.json, else 16].",
    ),
)


def cache_options(func: Command) -> Command:
    """Add ``--trace`` and ``--kv-block-size``; the command receives ``cache: CacheOptions``
    in their place."""

    @wraps(func)
    def with_cache(
        *args: Any, trace_path: Path | None, kv_block_size: int | None, **kwargs: Any
    ) -> Any:
        from analyzers.cache import CacheOptions

        kwargs["cache"] = CacheOptions(
            trace=str(trace_path) if trace_path is not None else None,
            kv_block_size=kv_block_size,
        )
        return func(*args, **kwargs)

    return apply(_OPTIONS, with_cache)
