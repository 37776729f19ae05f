"""``loadgen trace import FORMAT PATH -o OUT``: convert a public trace into a trace file.

Thin: parses options into ``ImportOptions`` and calls ``traces.importers.registry``.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from loadgen.cli.options.outfile import parquet_out
from traces.importers.base import ImportOptions
from traces.importers.dataset import parse_mapping
from traces.importers.errors import ImportOptionError
from traces.importers.registry import REGISTRY, import_trace
from traces.records import ImageSpec


def _image_size(text: str | None) -> ImageSpec | None:
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if match is None:
        raise ImportOptionError(f"--image-size must be WIDTHxHEIGHT, got {text!r}")
    return ImageSpec(width=int(match[1]), height=int(match[2]))


def _formats_help() -> str:
    return "\n".join(f"  {name:<13} {imp.summary}" for name, imp in sorted(REGISTRY.items()))


@click.command(
    name="import",
    epilog="\b\nFormats:\n" + _formats_help() + "\n\nUnits and pitfalls: docs/traces.md.",
)
@click.argument("fmt", metavar="FORMAT", type=click.Choice(sorted(REGISTRY)))
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    callback=parquet_out,
    help="Trace file to write (.parquet).",
)
@click.option("--limit", type=int, default=None, help="Keep at most N requests.")
@click.option("--workload", default=None, help="Workload class label for every row.")
@click.option(
    "--start",
    "start_s",
    type=float,
    default=None,
    help="Keep rows from this many seconds after the source's first row.",
)
@click.option(
    "--end",
    "end_s",
    type=float,
    default=None,
    help="Keep rows up to this many seconds after the source's first row.",
)
@click.option(
    "--sort-window",
    type=int,
    default=0,
    show_default=True,
    help="Reorder an unordered source within N rows (0: out-of-order is an error).",
)
@click.option(
    "--max-input-tokens",
    type=int,
    default=None,
    help="Clip longer inputs (and their prefix blocks) to N tokens.",
)
@click.option(
    "--block-size", type=int, default=None, help="[mooncake] Tokens per hash block (default 512)."
)
@click.option(
    "--keep-failed",
    is_flag=True,
    default=False,
    help="[burstgpt] Keep failed rows (0 response tokens) with 1 output token.",
)
@click.option(
    "--rate",
    type=float,
    default=None,
    help="[sharegpt, dataset] Poisson arrival rate, requests/s (default 1).",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="[sharegpt, servegen, dataset] Seed of sampled arrivals and lengths.",
)
@click.option(
    "--tokens-per-word",
    type=float,
    default=1.0,
    show_default=True,
    help="[sharegpt, dataset, aiperf, aiperf_dag] Token estimate per word of text.",
)
@click.option(
    "--turns",
    type=click.Choice(["first", "all"]),
    default="first",
    show_default=True,
    help="[sharegpt] One request per conversation, or one per user turn.",
)
@click.option(
    "--think-s",
    type=float,
    default=None,
    help="[sharegpt] With --turns all: mean think time between a conversation's turns, s "
    "(conversations then start at --rate).",
)
@click.option(
    "--map",
    "mapping",
    multiple=True,
    metavar="TARGET=COLUMN,...",
    help="[dataset] Source column of each trace field: prompt, system, output, input_tokens, "
    "output_tokens, arrival_s, session_id, turn (repeatable).",
)
@click.option(
    "--image-size",
    default=None,
    help="[azure_mm2025] Size of every synthesized image, WIDTHxHEIGHT (default 1920x1080).",
)
@click.option(
    "--output-tokens",
    type=int,
    default=None,
    help="[aiperf, aiperf_dag] Output tokens of a turn without output_length / max_tokens "
    "(default 256).",
)
def import_(
    fmt: str,
    path: Path,
    out: Path,
    limit: int | None,
    workload: str | None,
    start_s: float | None,
    end_s: float | None,
    sort_window: int,
    max_input_tokens: int | None,
    block_size: int | None,
    keep_failed: bool,
    rate: float | None,
    seed: int,
    tokens_per_word: float,
    turns: str,
    think_s: float | None,
    mapping: tuple[str, ...],
    image_size: str | None,
    output_tokens: int | None,
) -> None:
    """Convert the public trace at PATH, in FORMAT, into a trace file (schema v1).

    \b
    Examples:
      loadgen trace import mooncake conversation_trace.jsonl -o mooncake.parquet
      loadgen trace import dataset train.parquet --map prompt=question,output=answer \\
          --rate 4 -o qa.parquet
      loadgen trace import aiperf conversations.jsonl --output-tokens 200 -o chat.parquet
      loadgen trace import aiperf_dag tree.dag.jsonl -o tree.parquet

    The source is streamed in batches (bounded memory) and validated as it is read; a
    bad value is reported with its file, line and column. Provenance (format, source
    file, block size, options, skipped-row counts) is stored in the file metadata.
    """
    options = ImportOptions(
        limit=limit,
        workload=workload,
        start_s=start_s,
        end_s=end_s,
        sort_window=sort_window,
        max_input_tokens=max_input_tokens,
        block_size=block_size,
        keep_failed=keep_failed,
        rate=rate,
        seed=seed,
        tokens_per_word=tokens_per_word,
        turns=turns,
        think_s=think_s,
        columns=parse_mapping(",".join(mapping)) if mapping else (),
        image_size=_image_size(image_size),
        output_tokens=output_tokens,
    )
    result = import_trace(fmt, path, out, options)
    skipped = ", ".join(f"{k.reason}={k.count}" for k in result.skipped)
    click.echo(
        f"imported {result.rows} requests over {result.duration_s:.3f} s from {path.name} "
        f"({fmt}) -> {result.path}"
        + (f"; skipped {skipped}" if skipped else "")
        + (f"; clipped {result.clipped} inputs" if result.clipped else "")
    )
