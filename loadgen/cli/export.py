"""``loadgen export``: a run's per-request rows as CSV or JSON Lines, for tools that do not
read Parquet (the columns are ``requests.parquet``'s, docs/formats.md; list columns such as
``chunk_offsets_us`` are JSON arrays in CSV cells)."""

from __future__ import annotations

from pathlib import Path

import click

from loadgen.cli.errors import one_line_errors
from loadgen.cli.options.runpath import RUN_PATH


@click.command()
@click.argument("run", type=RUN_PATH)
@one_line_errors
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "jsonl"]),
    default="csv",
    show_default=True,
    help="CSV (list columns as JSON arrays) or JSON Lines (one request per line).",
)
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="File to write [default: stdout].",
)
def export(run: Path, fmt: str, out: Path | None) -> None:
    """Write RUN's per-request rows (requests.parquet) as CSV or JSON Lines.

    \b
    Examples:
      loadgen export runs/r1 --format csv -o r1.csv
      loadgen export runs/r1 --format jsonl | jq .ttft_ms
    """
    import polars as pl

    from analyzers.frames import scan_run
    from loadgen.cli.runstatus import refuse_newer, warn_if_incomplete

    refuse_newer(run)
    warn_if_incomplete(run)
    frame = scan_run(run).collect()
    if fmt == "csv":
        lists = [n for n, t in frame.schema.items() if isinstance(t, (pl.List, pl.Array))]
        frame = frame.with_columns(
            pl.col(n).map_elements(
                lambda v: "[" + ",".join(str(x) for x in v) + "]", return_dtype=pl.String
            )
            for n in lists
        )
        text = frame.write_csv()
    else:
        text = frame.write_ndjson()
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text)
