"""``loadgen recover``: a thin command over ``loadgen.run.recover.recover_run``.

Prints one line per directory merged and the counts: rows recovered, requests certainly
sent and lost. Errors are one line on stderr with their exit code (2: not a run
directory, 4: a journal that cannot be merged, which stays in place).
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("run", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option(
    "--cause",
    default=None,
    help="Why the run died, for run.json [default: the replay process died].",
)
def recover(run: Path, cause: str | None) -> None:
    """Turn the journals a killed run left into requests.parquet and mark it incomplete.

    After kill -9, a crash or a dead --workers shard, the rows recorded so far sit in
    requests.parts/journal.arrows (one per shard-K/). This merges each into
    requests.parquet, counts the requests the run sent and never recorded (from the
    schedule: every request up to the last recorded, and every one due before the
    journal's last write; a lower bound), and writes run.json with status "incomplete",
    the cause and those counts. A run that completed is left as it is.

    Example: loadgen recover runs/killed
    """
    from loadgen.run.recover import recover_run

    result = recover_run(run, cause=cause)
    if not result.changed:
        click.echo(f"{run}: nothing to recover (status {result.info.status})")
        return
    for shard in result.shards:
        if shard.merged:
            click.echo(f"merged {shard.rows} rows into {shard.directory / 'requests.parquet'}")
    info = result.info.incomplete
    assert info is not None
    click.echo(
        f"{run}: incomplete ({info.cause}): {info.rows} rows recovered of {info.scheduled} "
        f"scheduled; {info.dispatched} requests certainly sent, {info.lost} of them lost "
        f"(sent, never recorded; at most {info.scheduled - info.rows})"
    )
    if result.note is not None:
        click.echo(f"note: {result.note}", err=True)
