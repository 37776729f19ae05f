"""Mooncake FAST'25 traces (JSONL) -> workload table.

Source format (reference/traces.md §1.1; kvcache-ai/Mooncake FAST25-release/README.md)::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

* ``timestamp`` is milliseconds from the trace start; many rows share one millisecond.
* ``hash_ids`` are prefix-chained hashes of 512-token blocks: equal ids mean a shared prefix
  up to that block. They become ``prefix_blocks`` unchanged. Every real row satisfies
  ``(len-1)*512 < input_length <= len*512``; a row that does not is an error, which also
  catches a wrong ``--block-size`` (ServeGen's offline traces use 16).
* Inputs go above 128k tokens (the synthetic trace's max is 191,378); they are kept unless
  ``--max-input-tokens`` clips them (the sink truncates ``prefix_blocks`` with them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from traces import schema as s
from traces.importers.base import LINE_COLUMN, Importer, ImportOptions
from traces.importers.errors import SourceError
from traces.importers.parse import iter_jsonl
from traces.importers.sink import TraceSink

BLOCK_SIZE = 512
"""Tokens per hash block in the Mooncake release (README and paper)."""


def _int_field(obj: dict[str, Any], key: str, where: str, line: int) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SourceError(where, line=line, column=key, problem=f"expected a number, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise SourceError(
            where, line=line, column=key, problem=f"expected an integer, got {value!r}"
        )
    return int(value)


def read(path: Path, options: ImportOptions, sink: TraceSink) -> None:
    """Stream a Mooncake JSONL trace into ``sink``."""
    where = path.name
    block = options.block_size or BLOCK_SIZE
    origin_ms: int | None = None
    rows: dict[str, list[Any]] = {}

    def reset() -> None:
        rows.update({k: [] for k in ("id", "t", "in", "out", "blocks", "line")})

    def flush() -> None:
        if rows["id"]:
            sink.add(
                pa.table(
                    {
                        s.REQUEST_ID: pa.array(rows["id"], pa.string()),
                        s.ARRIVAL_S: pa.array(rows["t"], pa.float64()),
                        s.INPUT_TOKENS: pa.array(rows["in"], pa.int64()),
                        s.OUTPUT_TOKENS: pa.array(rows["out"], pa.int64()),
                        s.PREFIX_BLOCKS: pa.array(rows["blocks"], pa.list_(pa.int64())),
                        s.API: pa.array([s.API_COMPLETIONS] * len(rows["id"]), pa.string()),
                        LINE_COLUMN: pa.array(rows["line"], pa.int64()),
                    }
                )
            )
        reset()

    reset()
    for index, (line, obj) in enumerate(iter_jsonl(path)):
        if not isinstance(obj, dict):
            raise SourceError(where, line=line, column=None, problem="expected a JSON object")
        ts = _int_field(obj, "timestamp", where, line)
        n_in = _int_field(obj, "input_length", where, line)
        n_out = _int_field(obj, "output_length", where, line)
        hashes = obj.get("hash_ids")
        blocks: list[int] | None = None
        if hashes is not None:
            if not isinstance(hashes, list) or not all(
                isinstance(h, int) and not isinstance(h, bool) for h in hashes
            ):
                raise SourceError(
                    where, line=line, column="hash_ids", problem="expected a list of integers"
                )
            if n_in > 0 and not (len(hashes) - 1) * block < n_in <= len(hashes) * block:
                raise SourceError(
                    where,
                    line=line,
                    column="hash_ids",
                    problem=(
                        f"{len(hashes)} blocks of {block} tokens do not cover input_length "
                        f"{n_in} (wrong --block-size?)"
                    ),
                )
            blocks = hashes
        if origin_ms is None:
            origin_ms = ts
            sink.note("source_time_origin", f"timestamp {ts} ms")
        rows["id"].append(str(index))
        rows["t"].append((ts - origin_ms) / 1000.0)
        rows["in"].append(n_in)
        rows["out"].append(n_out)
        rows["blocks"].append(blocks)
        rows["line"].append(line)
        if len(rows["id"]) >= options.batch_rows:
            flush()
            if sink.done:
                return
    flush()


IMPORTER = Importer(
    name="mooncake",
    summary="Mooncake FAST'25 JSONL (ms timestamps, 512-token chained hash blocks)",
    read=read,
    options=frozenset({"block_size"}),
    source_columns={
        s.ARRIVAL_S: "timestamp",
        s.INPUT_TOKENS: "input_length",
        s.OUTPUT_TOKENS: "output_length",
        s.PREFIX_BLOCKS: "hash_ids",
    },
    block_size=BLOCK_SIZE,
)
