"""Parquet reading and writing for traces and runs, with provenance in file metadata."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from traces import schema as s
from traces.errors import RunInfoError, SchemaError, TraceFileError, ValidationError, shown
from traces.records import RequestRecord, TraceRequest, records_to_batch, trace_requests_from_table
from traces.runinfo import RunInfo
from traces.validate import check_columns, validate_trace


def file_sha256(path: Path) -> str:
    """The content hash of a file, read in 1 MiB blocks: the trace's, as a run records it
    (compare and gate use it to refuse runs of different traces)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_metadata(kind: str, provenance: Mapping[str, Any] | None = None) -> dict[bytes, bytes]:
    """The Parquet key-value metadata: schema version, file kind and provenance."""
    meta: dict[str, Any] = {"schema_version": s.SCHEMA_VERSION, "kind": kind}
    if provenance:
        meta.update(provenance)
    return {s.METADATA_KEY: json.dumps(meta, sort_keys=True).encode()}


def read_metadata(path: Path) -> dict[str, Any]:
    """Return the llm-loadgen metadata of a Parquet file (empty when it has none)."""
    try:
        raw = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowInvalid) as exc:
        raise TraceFileError(f"{path}: cannot read Parquet metadata: {exc}") from exc
    blob = raw.get(s.METADATA_KEY)
    if blob is None:
        return {}
    try:
        value = json.loads(blob)
    except json.JSONDecodeError as exc:
        raise TraceFileError(f"{path}: llm-loadgen metadata is not valid JSON") from exc
    return value if isinstance(value, dict) else {}


def _first_unfit(column: pa.ChunkedArray, want: pa.DataType) -> int | None:
    """The first row of an integer column whose value an integer ``want`` cannot hold."""
    if not (pa.types.is_integer(want) and pa.types.is_integer(column.type)):
        return None
    bits = want.bit_width
    signed = pa.types.is_signed_integer(want)
    least, most = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    outside = pc.or_(pc.less(column, least), pc.greater(column, most))
    filled = pc.fill_null(outside, False)
    if not pc.any(filled).as_py():
        return None
    return int(pc.index(filled, True).as_py())


def conform_trace(table: pa.Table, where: str) -> pa.Table:
    """Cast a table with trace columns into ``TRACE_SCHEMA``, filling absent optional columns."""
    check_columns(table, where)
    n = table.num_rows
    arrays: list[pa.Array | pa.ChunkedArray] = []
    for field in s.TRACE_SCHEMA:
        if field.name in table.column_names:
            col = table.column(field.name)
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                row = _first_unfit(col, field.type)
                if row is not None:
                    raise ValidationError(
                        f"{where}: row {row}, column {field.name!r}: "
                        f"{shown(col[row].as_py())} does not fit {field.type}",
                        row=row,
                        column=field.name,
                    ) from exc
                raise SchemaError(
                    f"{where}: column {field.name!r} cannot be read as {field.type}: {exc}"
                ) from exc
        elif field.name == s.WORKLOAD:
            col = pa.array(["text"] * n).dictionary_encode().cast(field.type)
        elif field.name == s.API:
            col = pa.array([s.API_CHAT] * n).dictionary_encode().cast(field.type)
        else:
            col = pa.nulls(n, type=field.type)
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=s.TRACE_SCHEMA)


def read_trace_table(path: Path) -> pa.Table:
    """Read, conform and validate a trace Parquet file; raise ``TraceError`` with a clear line."""
    path = Path(path)
    if not path.exists():
        raise TraceFileError(f"{path}: no such trace file")
    if path.is_dir():
        raise TraceFileError(f"{path}: is a directory, expected a trace .parquet file")
    try:
        # One local file: ParquetFile reads it as pq.read_table would (same options, no
        # partitioning for a single file) without importing pyarrow.dataset and Acero,
        # which would cost ``loadgen replay`` tens of ms before its first request.
        with pq.ParquetFile(path) as parquet:
            table = parquet.read()
    except (OSError, pa.ArrowInvalid) as exc:
        raise TraceFileError(f"{path}: not a readable Parquet file ({exc})") from exc
    table = conform_trace(table, str(path))
    validate_trace(table, str(path))
    return table


def read_trace(path: Path) -> list[TraceRequest]:
    """Read a trace file into ``TraceRequest`` values."""
    return trace_requests_from_table(read_trace_table(path))


def write_trace(table: pa.Table, path: Path, provenance: Mapping[str, Any] | None = None) -> None:
    """Conform, validate and write a trace, atomically (temp file then rename)."""
    path = Path(path)
    table = conform_trace(table, str(path))
    validate_trace(table, str(path))
    table = table.replace_schema_metadata(file_metadata("trace", provenance))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def run_request_files(run_dir: Path) -> list[Path]:
    """The files holding a run's request rows.

    A closed run has ``requests.parquet``; a run still going, or killed before closing, has
    its journal (``requests.parts/journal.arrows``, an Arrow IPC stream; ``read_journal``)
    and, from older versions, Parquet parts there. A run with several workers keeps one
    such set per ``shard-K/`` directory.
    """
    run_dir = Path(run_dir)
    files: list[Path] = []
    for directory in [run_dir, *sorted(run_dir.glob("shard-*"))]:
        merged = directory / s.REQUESTS_FILE
        if merged.exists():
            files.append(merged)
            continue
        parts = directory / s.PARTS_DIR
        files.extend(sorted(parts.glob("part-*.parquet")))
        journal = parts / s.JOURNAL_FILE
        if journal.exists():
            files.append(journal)
    return files


def is_journal(path: Path) -> bool:
    """Whether a run file is a journal (Arrow IPC stream) rather than Parquet."""
    return Path(path).name == s.JOURNAL_FILE


def row_group_rows(path: Path) -> list[int]:
    """The rows of each row group of a Parquet file, in file order (from its footer; no
    data is read)."""
    metadata = pq.ParquetFile(path).metadata
    return [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]


def read_journal(path: Path) -> pa.Table:
    """The complete row batches of a journal; a torn last batch (a killed run) is dropped.

    Only a stream that ends short is taken for the end of the journal. A file that cannot
    be opened or read (missing, out of file descriptors, an I/O error) raises ``OSError``:
    read as empty, it would let a merge replace the rows with nothing."""
    batches: list[pa.RecordBatch] = []
    with pa.OSFile(str(path), "rb") as source:
        try:
            for batch in pa.ipc.open_stream(source):
                batches.append(batch)
        except pa.ArrowInvalid:
            pass  # the stream ends inside a message's length or metadata: a torn tail
        except OSError as exc:
            # A body shorter than its header announced is a torn tail too, and Arrow says
            # so without an errno; a failing read of the file has one.
            if exc.errno is not None:
                raise
    return pa.Table.from_batches(batches, schema=s.RUN_SCHEMA)


def read_run_file(path: Path) -> pa.Table:
    """One run file (Parquet or journal) in ``RUN_SCHEMA``."""
    if is_journal(path):
        return read_journal(path)
    return pq.read_table(path, schema=s.RUN_SCHEMA)


def read_run_table(run_dir: Path) -> pa.Table:
    """Read all request rows of a run directory (merged file, journal or parts)."""
    files = run_request_files(run_dir)
    if not files:
        raise TraceFileError(
            f"{run_dir}: no {s.REQUESTS_FILE} (and no flushed rows): not a run directory"
        )
    try:
        tables = [read_run_file(f) for f in files]
    except (OSError, pa.ArrowInvalid) as exc:
        raise TraceFileError(f"{run_dir}: cannot read run rows ({exc})") from exc
    return pa.concat_tables(tables)


def read_run_info(run_dir: Path) -> RunInfo | None:
    """A run directory's ``run.json`` (None when it has none).

    Raises ``NewerRunInfoError`` for one written by a newer llm-loadgen and
    ``RunInfoError`` for one that is unreadable or does not match its version's schema.
    """
    path = Path(run_dir) / s.RUN_JSON
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunInfoError(f"{path}: unreadable run.json ({exc})") from exc
    return RunInfo.from_json(doc, where=str(path))


def write_run_info(run_dir: Path, info: RunInfo) -> Path:
    """Write ``run.json`` atomically (temp file then rename: it is rewritten at the end of
    the run, and a reader must never see half of it)."""
    path = Path(run_dir) / s.RUN_JSON
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(info.to_json(), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def write_run_records(
    run_dir: Path, records: Iterable[RequestRecord], provenance: Mapping[str, Any]
) -> Path:
    """Write whole-run rows as ``requests.parquet`` in one go (a run made without a
    recorder, such as ``loadgen simulate``'s), atomically; same schema and compression as
    the recorder's. ``provenance`` joins the file metadata (``run_id``, ``shard``)."""
    path = Path(run_dir) / s.REQUESTS_FILE
    tmp = path.with_name(path.name + ".tmp")
    batch = records_to_batch(records)
    table = pa.Table.from_batches([batch]).replace_schema_metadata(file_metadata("run", provenance))
    pq.write_table(table, tmp, compression="zstd", row_group_size=65_536)
    os.replace(tmp, path)
    return path
