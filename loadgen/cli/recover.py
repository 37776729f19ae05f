"""``loadgen recover``: a thin command over ``loadgen.run.recover.recover_run``.

Prints one line per directory merged and the counts: rows recovered, requests sent and
lost. Errors are one line on stderr with their exit code (2: not a run directory, or a
run a replay process is still writing; 4: a journal that cannot be merged, which stays in
place).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from loadgen.run.recover import Recovery


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
    dispatch record written as each request went to the wire: exact; for a run of an
    earlier build, from the schedule: a lower bound), and writes run.json with status
    "incomplete", the cause and those counts. A run that completed is left as it is; a
    run whose replay is still alive is refused (exit 2). analyze, decompose, gate and
    report do the same on their own when they open a dead run.

    Example: loadgen recover runs/killed
    """
    from analyzers.errors import InvalidRunError
    from loadgen.run.recover import recover_run
    from traces.errors import NewerRunInfoError, RunInfoError

    try:
        result = recover_run(run, cause=cause)
    except NewerRunInfoError:
        raise
    except RunInfoError as exc:
        # A run directory whose run.json is broken is an invalid run (exit 3), as it is
        # for analyze, compare and gate; a newer run.json stays bad input (exit 2).
        raise InvalidRunError(str(exc)) from exc
    if not result.changed:
        click.echo(f"{run}: nothing to recover (status {result.info.status})")
        return
    for shard in result.shards:
        if shard.merged:
            click.echo(f"merged {shard.rows} rows into {shard.directory / 'requests.parquet'}")
    click.echo(f"{run}: {counts(result)}")
    if result.note is not None:
        click.echo(f"note: {result.note}", err=True)


def counts(result: Recovery) -> str:
    """One line: the cause, rows recovered, requests sent and lost."""
    info = result.info.incomplete
    assert info is not None
    if info.exact:
        sent = f"{info.dispatched} requests sent, {info.lost} of them lost (sent, never recorded)"
    else:
        sent = (
            f"{info.dispatched} requests certainly sent, {info.lost} of them lost (sent, "
            f"never recorded; a lower bound, at most {info.scheduled - info.rows})"
        )
    return (
        f"incomplete ({info.cause}): {info.rows} rows recovered of {info.scheduled} "
        f"scheduled; {sent}"
    )
