"""What the analysing commands do first with a run: recover it if its replay died, then
warn with one stderr line if it did not complete.

A run whose ``run.json`` still says ``running`` and whose replay processes are all gone
(nobody holds its ``run.lock``: killed with SIGKILL, its machine rebooted) is recovered as
``loadgen recover`` would (``loadgen.run.recover``), with one stderr line saying so and
the counts; a run still being written is left alone and said to be running.

A run whose ``run.json`` status is not complete (``traces.runinfo.COMPLETE_STATUSES``:
killed and recovered, still ``running``, interrupted, failed) lacks requests, and its tail
percentiles look better than they were (the lost requests are the longest in flight).
``analyze``, ``decompose`` and ``report`` warn and go on; ``gate`` warns and refuses it
(``InvalidRunError``, exit 3).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from traces.runinfo import RunInfo


def _run_dir(run: Path) -> Path | None:
    """The run directory of RUN (a directory, or a file in one); None for a glob."""
    from traces import schema as s

    if run.is_dir():
        return run
    if run.is_file():
        parent = run.parent
        if parent.name == s.PARTS_DIR:
            parent = parent.parent
        if parent.name.startswith("shard-") and (parent.parent / s.RUN_JSON).exists():
            parent = parent.parent
        return parent
    return None


def _run_info(run: Path) -> tuple[Path, RunInfo] | None:
    """RUN's directory and ``run.json``; None for a glob, a run without ``run.json``, or
    one that cannot be read (the analysis reports that itself)."""
    from traces.errors import TraceError
    from traces.io import read_run_info

    directory = _run_dir(run)
    if directory is None:
        return None
    try:
        info = read_run_info(directory)
    except TraceError:
        return None
    return None if info is None else (directory, info)


def refuse_newer(run: Path) -> None:
    """Raise ``NewerRunInfoError`` (exit 2) when RUN's ``run.json`` was written by a newer
    llm-loadgen, whose files this build may misread: for the commands that read a run's
    files without the analysis (``export``, ``server-metrics``). A ``run.json`` that cannot
    be read at all is left to the command, which reports the run as invalid (exit 3)."""
    from traces.errors import NewerRunInfoError, RunInfoError
    from traces.io import read_run_info

    directory = _run_dir(run)
    if directory is None:
        return
    try:
        read_run_info(directory)
    except NewerRunInfoError:
        raise
    except RunInfoError:
        return


def status_problem(run: Path) -> str | None:
    """Why RUN's ``run.json`` says it is not complete, or None (complete, no ``run.json``,
    or one that cannot be read: the analysis reports that itself)."""
    found = _run_info(run)
    return None if found is None else found[1].status_problem()


def recover_if_dead(run: Path) -> str | None:
    """Recover RUN when its ``run.json`` says ``running`` and no replay process holds it
    (one stderr line with the counts); return why it was not when that matters (a replay
    still writes it, a journal that cannot be merged), else None."""
    from loadgen.errors import RecorderError, RunDirError, RunLiveError
    from loadgen.run.recover import recover_run

    found = _run_info(run)
    if found is None or found[1].status != "running":
        return None
    directory, info = found
    try:
        result = recover_run(directory)
    except RunLiveError as exc:
        return f"run {info.run_id} is still running ({exc.holder}): these are its rows so far"
    except (RecorderError, RunDirError, OSError) as exc:  # a read-only copy, a bad journal
        return (
            f"run {info.run_id} is still running or its process died, and could not be "
            f"recovered here: {exc}"
        )
    if result.changed:
        from loadgen.cli.recover import counts

        click.echo(f"recovered {directory}: {counts(result)}", err=True)
    return None


def warn_if_incomplete(*runs: Path | None) -> list[str]:
    """Recover each dead run (``recover_if_dead``), then print ``warning: <run>: ...`` on
    stderr for each run that is not complete; return the problems."""
    problems: list[str] = []
    for run in runs:
        if run is None:
            continue
        problem = recover_if_dead(run) or status_problem(run)
        if problem is not None:
            line = f"{run}: {problem}"
            click.echo(f"warning: {line}", err=True)
            problems.append(line)
    return problems
