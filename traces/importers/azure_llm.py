"""Azure LLM inference traces 2023 (Splitwise) and 2024 (DynamoLLM), CSV -> workload table.

Source format (reference/traces.md §1.2-1.3; Azure/AzurePublicDataset)::

    TIMESTAMP,ContextTokens,GeneratedTokens
    2023-11-16 18:17:03.9799600,4808,10                  (2023: 7 fractional digits, no zone)
    2024-05-12 00:00:00.001163+00:00,2162,5              (2024: zone, mixed precision:
    2024-05-12 00:00:00+00:00,...                         some rows have no fraction)

* Times are wall-clock date-times; ``arrival_s`` is seconds from the first row, computed in
  integer nanoseconds so that a week-long file keeps sub-microsecond spacing. Zoned values
  are converted to UTC; a file may not mix zoned and naive values.
* The 2024 week files hold up to 27.3 M rows: the file is streamed in 4 MiB blocks and
  written row group by row group.
* Columns are read by name, so extra columns (the 2025 multimodal ``NumImages``) are ignored
  here and handled by ``azure_lmm``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from traces import schema as s
from traces.importers.base import LINE_COLUMN, Importer, ImportOptions
from traces.importers.parse import csv_header, iter_csv, require_columns, to_epoch_ns, to_int
from traces.importers.sink import TraceSink

TIMESTAMP = "TIMESTAMP"
CONTEXT_TOKENS = "ContextTokens"
GENERATED_TOKENS = "GeneratedTokens"
NUM_IMAGES = "NumImages"

SOURCE_COLUMNS = {
    s.ARRIVAL_S: TIMESTAMP,
    s.INPUT_TOKENS: CONTEXT_TOKENS,
    s.OUTPUT_TOKENS: GENERATED_TOKENS,
    s.IMAGES: NUM_IMAGES,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class AzureBatch:
    """One parsed batch: trace columns (plus line numbers) and the raw extra column if asked."""

    table: pa.Table
    num_images: pa.Array | None


def iter_azure(
    path: Path, options: ImportOptions, sink: TraceSink, *, fmt: str, with_images: bool
) -> Iterator[AzureBatch]:
    """Parse an Azure CSV into batches with ``arrival_s`` relative to the first row."""
    where = path.name
    header = csv_header(path)
    wanted = [TIMESTAMP, CONTEXT_TOKENS, GENERATED_TOKENS] + ([NUM_IMAGES] if with_images else [])
    require_columns(path, header, wanted, fmt)
    origin_ns: int | None = None
    index = 0
    for batch in iter_csv(path, wanted, header=header):
        t = batch.table
        if t.num_rows == 0:
            continue
        first = batch.first_line
        ns, zoned = to_epoch_ns(
            t.column(TIMESTAMP), where=where, column=TIMESTAMP, first_line=first
        )
        if origin_ns is None:
            origin_ns = int(ns[0].as_py())
            sink.note("source_time_origin", t.column(TIMESTAMP)[0].as_py().strip())
            sink.note("source_time_zone", "UTC (converted)" if zoned else "none (wall clock)")
        arrival = pc.divide(pc.cast(pc.subtract(ns, origin_ns), pa.float64()), 1e9)
        n = t.num_rows
        table = pa.table(
            {
                s.REQUEST_ID: pa.array([str(i) for i in range(index, index + n)], pa.string()),
                s.ARRIVAL_S: arrival,
                s.INPUT_TOKENS: to_int(
                    t.column(CONTEXT_TOKENS), where=where, column=CONTEXT_TOKENS, first_line=first
                ),
                s.OUTPUT_TOKENS: to_int(
                    t.column(GENERATED_TOKENS),
                    where=where,
                    column=GENERATED_TOKENS,
                    first_line=first,
                ),
                s.API: pa.array([s.API_COMPLETIONS] * n, pa.string()),
                LINE_COLUMN: batch.lines(),
            }
        )
        images = (
            to_int(t.column(NUM_IMAGES), where=where, column=NUM_IMAGES, first_line=first)
            if with_images
            else None
        )
        index += n
        yield AzureBatch(table=table, num_images=images)


def read_2023(path: Path, options: ImportOptions, sink: TraceSink) -> None:
    """Stream an Azure LLM 2023 CSV (naive 7-digit date-times) into ``sink``."""
    for batch in iter_azure(path, options, sink, fmt="azure2023", with_images=False):
        sink.add(batch.table)
        if sink.done:
            return


def read_2024(path: Path, options: ImportOptions, sink: TraceSink) -> None:
    """Stream an Azure LLM 2024 CSV (zoned, mixed-precision date-times) into ``sink``."""
    for batch in iter_azure(path, options, sink, fmt="azure2024", with_images=False):
        sink.add(batch.table)
        if sink.done:
            return


IMPORTER_2023 = Importer(
    name="azure2023",
    summary="Azure LLM inference 2023 / Splitwise CSV (TIMESTAMP,ContextTokens,GeneratedTokens)",
    read=read_2023,
    source_columns=SOURCE_COLUMNS,
)
IMPORTER_2024 = Importer(
    name="azure2024",
    summary="Azure LLM inference 2024 / DynamoLLM week CSV (zoned, mixed-precision times)",
    read=read_2024,
    source_columns=SOURCE_COLUMNS,
)
