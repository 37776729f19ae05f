"""BurstGPT (KDD'25) CSV -> workload table.

Source format (reference/traces.md §1.5; HPMLL/BurstGPT README "Schema")::

    Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type          (_1, _2)
    Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,...    (_3)

* ``Timestamp`` is seconds from 0:00:00 of the first day (local time); ``arrival_s`` is
  seconds from the first row.
* Columns move between file versions (``_3`` inserts ``Session ID`` and ``Elapsed time``),
  so every column is read by its name, never by position.
* Rows with ``Response tokens`` = 0 are failed requests. They are skipped and counted
  (``failed``) by default; ``--keep-failed`` keeps them with ``output_tokens`` = 1 so that
  their prefill load is still replayed. A row with ``Request tokens`` = 0 cannot be sent and
  is skipped as ``empty_request``.
* ``Session ID`` becomes ``session_id`` when present. ``Elapsed time`` is the end-to-end
  latency of the original request, not an arrival, and is not imported.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from traces import schema as s
from traces.importers.base import LINE_COLUMN, Importer, ImportOptions
from traces.importers.parse import csv_header, iter_csv, require_columns, to_float, to_int
from traces.importers.sink import TraceSink

TIMESTAMP = "Timestamp"
REQUEST_TOKENS = "Request tokens"
RESPONSE_TOKENS = "Response tokens"
SESSION_ID = "Session ID"


def read(path: Path, options: ImportOptions, sink: TraceSink) -> None:
    """Stream a BurstGPT CSV (any file version) into ``sink``."""
    where = path.name
    header = csv_header(path)
    wanted = [TIMESTAMP, REQUEST_TOKENS, RESPONSE_TOKENS]
    require_columns(path, header, wanted, "burstgpt")
    has_session = SESSION_ID in header
    columns = wanted + ([SESSION_ID] if has_session else [])
    sink.note("source_columns", header)
    origin: float | None = None
    index = 0
    for batch in iter_csv(path, columns, header=header):
        t = batch.table
        n = t.num_rows
        if n == 0:
            continue
        first = batch.first_line
        ts = to_float(t.column(TIMESTAMP), where=where, column=TIMESTAMP, first_line=first)
        n_in = to_int(
            t.column(REQUEST_TOKENS), where=where, column=REQUEST_TOKENS, first_line=first
        )
        n_out = to_int(
            t.column(RESPONSE_TOKENS), where=where, column=RESPONSE_TOKENS, first_line=first
        )
        if origin is None:
            origin = float(ts[0].as_py())
            sink.note("source_time_origin", f"Timestamp {origin} s")
        table = pa.table(
            {
                s.REQUEST_ID: pa.array([str(i) for i in range(index, index + n)], pa.string()),
                s.ARRIVAL_S: pc.subtract(ts, origin),
                s.INPUT_TOKENS: n_in,
                s.OUTPUT_TOKENS: n_out,
                s.API: pa.array([s.API_CHAT] * n, pa.string()),
                LINE_COLUMN: batch.lines(),
            }
        )
        if has_session:
            sessions = pc.utf8_trim_whitespace(t.column(SESSION_ID))
            sessions = pc.if_else(pc.equal(sessions, ""), None, sessions)
            table = table.append_column(s.SESSION_ID, sessions)
        index += n
        failed = pc.equal(n_out, 0)
        empty = pc.and_(pc.equal(n_in, 0), pc.invert(failed))
        n_failed = int(pc.sum(pc.cast(failed, pa.int64())).as_py() or 0)
        if options.keep_failed:
            table = table.set_column(
                table.schema.get_field_index(s.OUTPUT_TOKENS),
                s.OUTPUT_TOKENS,
                pc.if_else(failed, 1, n_out),
            )
            empty = pc.equal(n_in, 0)
        else:
            sink.skip("failed", n_failed)
            table = table.filter(pc.invert(failed))
            empty = pc.equal(table.column(s.INPUT_TOKENS), 0)
        sink.skip("empty_request", int(pc.sum(pc.cast(empty, pa.int64())).as_py() or 0))
        table = table.filter(pc.invert(empty))
        if table.num_rows:
            sink.add(table)
        if sink.done:
            return


IMPORTER = Importer(
    name="burstgpt",
    summary="BurstGPT CSV (seconds; failed rows skipped and counted; columns read by name)",
    read=read,
    options=frozenset({"keep_failed"}),
    source_columns={
        s.ARRIVAL_S: TIMESTAMP,
        s.INPUT_TOKENS: REQUEST_TOKENS,
        s.OUTPUT_TOKENS: RESPONSE_TOKENS,
        s.SESSION_ID: SESSION_ID,
    },
)
