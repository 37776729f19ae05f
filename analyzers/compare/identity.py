"""Trace identity: which trace a run replayed, so that only like runs are compared.

``trace_identity`` fingerprints a run by the content hash its ``run.json`` records
(``trace.sha256``) when it has one, else by the request ids and token counts of its rows;
``check_same_trace`` compares the runs' fingerprints (by rows when only some recorded a
hash) and raises ``DifferentTracesError`` when they differ, unless allowed.
Must not import loadgen or httpx.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from analyzers.errors import DifferentTracesError
from analyzers.frames import run_info, scan_run
from traces import schema as s


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceIdentity:
    """What a run replayed: a fingerprint, how it was made, and the trace path."""

    fingerprint: str
    basis: str
    """``sha256`` (the trace file's content hash in run.json) or ``rows`` (request ids)."""
    path: str | None
    requests: int


def trace_identity(run: Path | str) -> TraceIdentity:
    """Fingerprint what a run replayed (see the module docstring)."""
    path: str | None = None
    sha: str | None = None
    run_path = Path(str(run))
    info = run_info(run_path) if run_path.is_dir() else None
    if info is not None:
        path, sha = info.trace.path, info.trace.sha256
    rows = (
        scan_run(run)
        .select(
            pl.col(s.REQUEST_ID).cast(pl.String),
            pl.col(s.INPUT_TOKENS).cast(pl.Int64),
            pl.col(s.OUTPUT_TOKENS).cast(pl.Int64),
        )
        .unique()
        .sort(s.REQUEST_ID)
        .collect()
    )
    if sha is not None:
        return TraceIdentity(fingerprint=sha, basis="sha256", path=path, requests=rows.height)
    digest = hashlib.sha256()
    for rid, n_in, n_out in rows.iter_rows():
        digest.update(f"{rid}\t{n_in}\t{n_out}\n".encode())
    return TraceIdentity(
        fingerprint=digest.hexdigest(), basis="rows", path=path, requests=rows.height
    )


def check_same_trace(
    runs: Sequence[Path | str], allow_different: bool
) -> tuple[tuple[TraceIdentity, ...], bool]:
    """The runs' identities and whether they agree; raises ``DifferentTracesError`` when
    they do not and ``allow_different`` is false."""
    ids = tuple(trace_identity(r) for r in runs)
    basis = {i.basis for i in ids}
    if len(basis) > 1:
        # One run recorded a content hash, another did not: compare by rows instead.
        ids = tuple(
            i if i.basis == "rows" else _rows_identity(r, i) for r, i in zip(runs, ids, strict=True)
        )
    same = len({i.fingerprint for i in ids}) == 1
    if not same and not allow_different:
        detail = "; ".join(
            f"{r}: {i.requests} requests, {i.basis} {i.fingerprint[:12]}"
            + (f" ({i.path})" if i.path else "")
            for r, i in zip(runs, ids, strict=True)
        )
        raise DifferentTracesError(
            f"the runs replayed different traces ({detail}); pass --allow-different-traces "
            "to compare them anyway"
        )
    return ids, same


def _rows_identity(run: Path | str, known: TraceIdentity) -> TraceIdentity:
    digest = hashlib.sha256()
    rows = (
        scan_run(run)
        .select(pl.col(s.REQUEST_ID).cast(pl.String), s.INPUT_TOKENS, s.OUTPUT_TOKENS)
        .unique()
        .sort(s.REQUEST_ID)
        .collect()
    )
    for rid, n_in, n_out in rows.iter_rows():
        digest.update(f"{rid}\t{n_in}\t{n_out}\n".encode())
    return TraceIdentity(
        fingerprint=digest.hexdigest(), basis="rows", path=known.path, requests=rows.height
    )
