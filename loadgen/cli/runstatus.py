"""The one-line stderr warning of the analysing commands for a run that did not complete.

A run whose ``run.json`` status is not complete (``traces.runinfo.COMPLETE_STATUSES``:
killed and recovered, still ``running``, interrupted, failed) lacks requests, and its tail
percentiles look better than they were (the lost requests are the longest in flight).
``analyze``, ``decompose`` and ``report`` warn and go on; ``gate`` warns and refuses it
(``InvalidRunError``, exit 3).
"""

from __future__ import annotations

from pathlib import Path

import click


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


def status_problem(run: Path) -> str | None:
    """Why RUN's ``run.json`` says it is not complete, or None (complete, no ``run.json``,
    or one that cannot be read: the analysis reports that itself)."""
    from traces.errors import TraceError
    from traces.io import read_run_info

    directory = _run_dir(run)
    if directory is None:
        return None
    try:
        info = read_run_info(directory)
    except TraceError:
        return None
    return None if info is None else info.status_problem()


def warn_if_incomplete(*runs: Path | None) -> list[str]:
    """Print ``warning: <run>: ...`` on stderr for each run that is not complete; return the
    problems."""
    problems: list[str] = []
    for run in runs:
        if run is None:
            continue
        problem = status_problem(run)
        if problem is not None:
            line = f"{run}: {problem}"
            click.echo(f"warning: {line}", err=True)
            problems.append(line)
    return problems
