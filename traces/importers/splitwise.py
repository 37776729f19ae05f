"""SplitwiseSim request traces (CSV) -> workload table.

Source format (reference/traces.md §1.6; Mutinifni/splitwise-sim ``traces/*.csv``)::

    request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size
    0,2,0,1,1,4096,32

* ``arrival_timestamp`` is in seconds; ``arrival_s`` is seconds from the first row.
* ``request_type`` 2 is an LLM request; rows of other types are skipped and counted
  (``not_llm``).
* ``request_id`` is kept as the trace's request id and must be unique.
* ``application_id`` and ``batch_size`` describe SplitwiseSim's own scheduling and are
  recorded nowhere; every row is one request.
* The Splitwise *production* traces are the Azure 2023 files: import those with
  ``azure2023``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from traces import schema as s
from traces.importers.base import LINE_COLUMN, Importer, ImportOptions
from traces.importers.errors import SourceError
from traces.importers.parse import csv_header, iter_csv, require_columns, to_float, to_int
from traces.importers.sink import TraceSink

COLUMNS = ("request_id", "request_type", "arrival_timestamp", "prompt_size", "token_size")
LLM_REQUEST_TYPE = 2


def read(path: Path, options: ImportOptions, sink: TraceSink) -> None:
    """Stream a SplitwiseSim CSV into ``sink``."""
    where = path.name
    header = csv_header(path)
    require_columns(path, header, COLUMNS, "splitwise")
    origin: float | None = None
    for batch in iter_csv(path, COLUMNS, header=header):
        t = batch.table
        if t.num_rows == 0:
            continue
        first = batch.first_line
        ts = to_float(
            t.column("arrival_timestamp"), where=where, column="arrival_timestamp", first_line=first
        )
        kind = to_int(
            t.column("request_type"), where=where, column="request_type", first_line=first
        )
        if origin is None:
            origin = float(ts[0].as_py())
            sink.note("source_time_origin", f"arrival_timestamp {origin} s")
        ids = pc.utf8_trim_whitespace(t.column("request_id"))
        blank = pc.equal(ids, "")
        if pc.any(blank).as_py():
            line = first + int(pc.index(blank, True).as_py())
            raise SourceError(where, line=line, column="request_id", problem="empty request id")
        table = pa.table(
            {
                s.REQUEST_ID: ids,
                s.ARRIVAL_S: pc.subtract(ts, origin),
                s.INPUT_TOKENS: to_int(
                    t.column("prompt_size"), where=where, column="prompt_size", first_line=first
                ),
                s.OUTPUT_TOKENS: to_int(
                    t.column("token_size"), where=where, column="token_size", first_line=first
                ),
                s.API: pa.array([s.API_COMPLETIONS] * t.num_rows, pa.string()),
                LINE_COLUMN: batch.lines(),
            }
        )
        is_llm = pc.equal(kind, LLM_REQUEST_TYPE)
        sink.skip("not_llm", t.num_rows - int(pc.sum(pc.cast(is_llm, pa.int64())).as_py() or 0))
        table = table.filter(is_llm)
        if table.num_rows:
            sink.add(table)
        if sink.done:
            return


IMPORTER = Importer(
    name="splitwise",
    summary="SplitwiseSim trace CSV (seconds; request_type 2 = LLM)",
    read=read,
    source_columns={
        s.REQUEST_ID: "request_id",
        s.ARRIVAL_S: "arrival_timestamp",
        s.INPUT_TOKENS: "prompt_size",
        s.OUTPUT_TOKENS: "token_size",
    },
    ids_from_source=True,
)
