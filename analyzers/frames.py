"""Lazy Polars frames of run files: one run directory or a glob of shards.

Checks the schema on entry and never collects: callers compose expressions and collect once.
Must not import loadgen or httpx.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from analyzers.errors import InvalidRunError
from traces import schema as s
from traces.io import run_request_files


def scan_run(run: Path | str) -> pl.LazyFrame:
    """Scan the request rows of a run directory, a Parquet file, or a glob of either."""
    text = str(run)
    files: list[Path] = []
    if any(ch in text for ch in "*?["):
        for match in (
            sorted(Path().glob(text))
            if not Path(text).is_absolute()
            else sorted(Path("/").glob(text.lstrip("/")))
        ):
            files.extend(run_request_files(match) if match.is_dir() else [match])
    else:
        path = Path(text)
        if path.is_dir():
            files = run_request_files(path)
        elif path.exists():
            files = [path]
    if not files:
        raise InvalidRunError(
            f"{run}: no run rows found (expected a run directory with {s.REQUESTS_FILE})"
        )
    lf = pl.scan_parquet([str(f) for f in files])
    names = set(lf.collect_schema().names())
    missing = [
        c
        for c in (s.DUE_NS, s.SENT_NS, s.FIRST_TOKEN_NS, s.END_NS, s.OUTCOME, s.CHUNK_OFFSETS_US)
        if c not in names
    ]
    if missing:
        raise InvalidRunError(f"{run}: not a run file: missing column(s) {', '.join(missing)}")
    return lf
