"""The streaming writer behind every importer: incremental checks, ordering, window, Parquet.

A format module turns each batch of its source into an Arrow table with trace columns plus
``LINE_COLUMN`` (the 1-based source line of each row) and calls ``TraceSink.add``. The sink

1. checks each value a source can get wrong (NaN arrival, non-positive lengths, and the
   value rules of ``traces.values.find_bad_value``: request ids, messages, SLOs,
   images) and names the source line and the source column on failure;
2. clips inputs above ``--max-input-tokens`` (and their prefix blocks, consistently);
3. keeps arrival order across batches: a decreasing arrival is an error naming its line,
   unless ``--sort-window N`` asks to reorder within a bounded window of N rows;
4. applies the ``--start/--end`` window (seconds from the source's first row) and
   ``--limit``, re-zeroes ``arrival_s``, conforms each batch with ``traces.io.conform_trace``
   and writes it as one Parquet row group.

Memory is bounded by one batch plus the sort window, whatever the source size. The file is
written to ``<out>.tmp`` and renamed on success; provenance goes into the file metadata
(the writer does not embed the Arrow schema, so the final metadata, with the counts known
only at the end, is what readers see). Imports pyarrow and ``traces`` only.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from traces import schema as s
from traces.errors import ValidationError
from traces.importers.base import LINE_COLUMN, ImportOptions
from traces.importers.errors import SourceError
from traces.io import conform_trace
from traces.values import find_bad_value


@dataclass(frozen=True, slots=True, kw_only=True)
class SkipCount:
    """Source rows left out for one reason (e.g. ``failed``: BurstGPT rows with 0 output)."""

    reason: str
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportResult:
    """What an import wrote: row count, duration of the output trace, skipped and clipped rows."""

    path: Path
    rows: int
    duration_s: float
    skipped: tuple[SkipCount, ...]
    clipped: int
    """Rows whose input was clipped to ``--max-input-tokens``."""


def _first_true(mask: pa.Array | pa.ChunkedArray) -> int | None:
    filled = pc.fill_null(mask, False)
    if not pc.any(filled).as_py():
        return None
    return int(pc.index(filled, True).as_py())


def message_batch(cols: Mapping[str, list[Any]], api: list[str]) -> pa.Table:
    """One batch of message-carrying requests (ShareGPT-like sources) from column lists
    keyed ``id t in out msgs session turn line``, with ``api`` for each row."""
    return pa.table(
        {
            s.REQUEST_ID: pa.array(cols["id"], pa.string()),
            s.ARRIVAL_S: pa.array(cols["t"], pa.float64()),
            s.INPUT_TOKENS: pa.array(cols["in"], pa.int64()),
            s.OUTPUT_TOKENS: pa.array(cols["out"], pa.int64()),
            s.MESSAGES: pa.array(cols["msgs"], pa.string()),
            s.API: pa.array(api, pa.string()),
            s.SESSION_ID: pa.array(cols["session"], pa.string()),
            s.TURN: pa.array(cols["turn"], pa.int32()),
            LINE_COLUMN: pa.array(cols["line"], pa.int64()),
        }
    )


class TraceSink:
    """Accepts batches of trace rows in source order and writes them as one trace file."""

    def __init__(
        self,
        out: Path,
        *,
        where: str,
        options: ImportOptions,
        source_columns: Mapping[str, str],
        provenance: Mapping[str, Any],
        block_size: int | None = None,
        unique_ids: bool = False,
    ) -> None:
        self._out = Path(out)
        self._tmp = self._out.with_name(self._out.name + ".tmp")
        self._where = where
        self._opts = options
        self._cols = dict(source_columns)
        self._provenance = dict(provenance)
        self._block_size = block_size
        self._ids: set[str] | None = set() if unique_ids else None
        self._writer: pq.ParquetWriter | None = None
        self._pending: pa.Table | None = None
        self._last_arrival = -math.inf
        self._last_line: int | None = None
        self._zero: float | None = None
        self._first_out: float | None = None
        self._last_out = 0.0
        self._rows = 0
        self._clipped = 0
        self._skips: dict[str, int] = {}
        self._done = False

    # ------------------------------------------------------------------ public
    @property
    def done(self) -> bool:
        """True once ``--limit`` or ``--end`` is reached: the importer may stop reading."""
        return self._done

    def skip(self, reason: str, count: int = 1) -> None:
        """Count source rows the importer left out, by reason (reported and recorded)."""
        if count:
            self._skips[reason] = self._skips.get(reason, 0) + count

    def note(self, key: str, value: Any) -> None:
        """Add a JSON-ready provenance entry known only while reading (e.g. the time origin)."""
        self._provenance[key] = value

    def add(self, batch: pa.Table) -> None:
        """Check, order, window and write one batch (trace columns plus ``LINE_COLUMN``)."""
        if self._done or batch.num_rows == 0:
            return
        batch = self._check_values(batch)
        batch = self._clip(batch)
        if self._opts.sort_window > 0:
            self._release_sorted(batch)
        else:
            self._check_order(batch)
            self._emit(batch)

    def close(self) -> ImportResult:
        """Flush the sort window, write the final metadata and move the file into place."""
        if self._pending is not None and self._pending.num_rows and not self._done:
            pending, self._pending = self._pending, None
            self._emit(pending)
        if self._writer is None or self._rows == 0:
            self.abort()
            skipped = ", ".join(f"{k}={v}" for k, v in sorted(self._skips.items()))
            raise ValidationError(
                f"{self._where}: no requests imported"
                + (f" (skipped: {skipped})" if skipped else "")
                + "; check --start/--end and the file's contents",
            )
        skipped_t = tuple(SkipCount(reason=k, count=v) for k, v in sorted(self._skips.items()))
        duration = self._last_out - (self._first_out or 0.0)
        prov = dict(self._provenance)
        prov.update(
            rows=self._rows,
            skipped=dict(sorted(self._skips.items())),
            clipped_inputs=self._clipped,
        )
        meta = {"schema_version": s.SCHEMA_VERSION, "kind": "trace", **prov}
        self._writer.add_key_value_metadata(
            {s.METADATA_KEY.decode(): json.dumps(meta, sort_keys=True)}
        )
        self._writer.close()
        self._writer = None
        os.replace(self._tmp, self._out)
        return ImportResult(
            path=self._out,
            rows=self._rows,
            duration_s=duration,
            skipped=skipped_t,
            clipped=self._clipped,
        )

    def abort(self) -> None:
        """Drop the partial file (after an error)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._tmp.unlink(missing_ok=True)

    # ------------------------------------------------------------------ steps
    def _line(self, batch: pa.Table, i: int) -> int:
        return int(batch.column(LINE_COLUMN)[i].as_py())

    def _src(self, column: str) -> str:
        return self._cols.get(column, column)

    def _check_values(self, batch: pa.Table) -> pa.Table:
        arrival = batch.column(s.ARRIVAL_S)
        bad = _first_true(pc.or_(pc.is_null(arrival), pc.is_nan(arrival)))
        if bad is not None:
            raise SourceError(
                self._where,
                line=self._line(batch, bad),
                column=self._src(s.ARRIVAL_S),
                problem="arrival time is missing or not a number",
            )
        for col in (s.INPUT_TOKENS, s.OUTPUT_TOKENS):
            values = batch.column(col)
            bad = _first_true(pc.or_(pc.is_null(values), pc.less_equal(values, 0)))
            if bad is not None:
                raise SourceError(
                    self._where,
                    line=self._line(batch, bad),
                    column=self._src(col),
                    problem=f"token count must be a positive integer, got {values[bad].as_py()}",
                )
            if _first_true(pc.greater(values, 2**31 - 1)) is not None:
                bad = _first_true(pc.greater(values, 2**31 - 1))
                assert bad is not None
                raise SourceError(
                    self._where,
                    line=self._line(batch, bad),
                    column=self._src(col),
                    problem=f"token count {values[bad].as_py()} does not fit in int32",
                )
        if self._ids is not None:
            for i, rid in enumerate(batch.column(s.REQUEST_ID).to_pylist()):
                if rid in self._ids:
                    raise SourceError(
                        self._where,
                        line=self._line(batch, i),
                        column=self._src(s.REQUEST_ID),
                        problem=f"duplicate request id {rid!r}",
                    )
                self._ids.add(rid)
        found = find_bad_value(batch)
        if found is not None:
            raise SourceError(
                self._where,
                line=self._line(batch, found.row),
                column=self._src(found.column),
                problem=found.problem,
            )
        return batch

    def _clip(self, batch: pa.Table) -> pa.Table:
        cap = self._opts.max_input_tokens
        if cap is None:
            return batch
        inputs = batch.column(s.INPUT_TOKENS)
        over = pc.greater(inputs, cap)
        n_over = int(pc.sum(pc.cast(over, pa.int64())).as_py() or 0)
        if n_over == 0:
            return batch
        self._clipped += n_over
        idx = batch.schema.get_field_index(s.INPUT_TOKENS)
        batch = batch.set_column(idx, s.INPUT_TOKENS, pc.min_element_wise(inputs, cap))
        if s.PREFIX_BLOCKS in batch.column_names and self._block_size:
            keep = -(-cap // self._block_size)
            blocks = batch.column(s.PREFIX_BLOCKS).to_pylist()
            clipped = [b[:keep] if b is not None else None for b in blocks]
            bidx = batch.schema.get_field_index(s.PREFIX_BLOCKS)
            batch = batch.set_column(
                bidx, s.PREFIX_BLOCKS, pa.array(clipped, type=pa.list_(pa.int64()))
            )
        return batch

    def _check_order(self, batch: pa.Table) -> None:
        values = batch.column(s.ARRIVAL_S).combine_chunks()
        prev = pa.concat_arrays(
            [pa.array([self._last_arrival], pa.float64()), values.slice(0, len(values) - 1)]
        )
        bad = _first_true(pc.less(values, pc.cast(prev, values.type)))
        if bad is not None:
            before = prev[bad].as_py()
            raise SourceError(
                self._where,
                line=self._line(batch, bad),
                column=self._src(s.ARRIVAL_S),
                problem=(
                    f"arrival {values[bad].as_py():.6f} s is before the previous row's "
                    f"{before:.6f} s: the source is not in arrival order "
                    "(pass --sort-window N to reorder within N rows)"
                ),
            )
        self._last_arrival = float(values[len(values) - 1].as_py())

    def _release_sorted(self, batch: pa.Table) -> None:
        pending = batch if self._pending is None else pa.concat_tables([self._pending, batch])
        pending = pending.take(pc.sort_indices(pending, sort_keys=[(s.ARRIVAL_S, "ascending")]))
        n_release = pending.num_rows - self._opts.sort_window
        if n_release <= 0:
            self._pending = pending
            return
        release, self._pending = pending.slice(0, n_release), pending.slice(n_release)
        first = float(release.column(s.ARRIVAL_S)[0].as_py())
        if first < self._last_arrival:
            raise SourceError(
                self._where,
                line=self._line(release, 0),
                column=self._src(s.ARRIVAL_S),
                problem=(
                    f"arrival {first:.6f} s is earlier than rows already written "
                    f"({self._last_arrival:.6f} s): it is more than --sort-window "
                    f"{self._opts.sort_window} rows out of order"
                ),
            )
        self._last_arrival = float(release.column(s.ARRIVAL_S)[-1].as_py())
        self._emit(release)

    def _emit(self, batch: pa.Table) -> None:
        """Window, limit, re-zero, conform and write rows already in arrival order."""
        opts = self._opts
        arrival = batch.column(s.ARRIVAL_S)
        if opts.start_s is not None:
            batch = batch.filter(pc.greater_equal(arrival, opts.start_s))
            arrival = batch.column(s.ARRIVAL_S)
        if opts.end_s is not None:
            past = _first_true(pc.greater(arrival, opts.end_s))
            if past is not None:
                batch = batch.slice(0, past)
                self._done = True
        if opts.limit is not None and self._rows + batch.num_rows >= opts.limit:
            batch = batch.slice(0, opts.limit - self._rows)
            self._done = True
        if batch.num_rows == 0:
            return
        if self._zero is None:
            self._zero = (
                opts.start_s
                if opts.start_s is not None
                else float(batch.column(s.ARRIVAL_S)[0].as_py())
            )
        idx = batch.schema.get_field_index(s.ARRIVAL_S)
        batch = batch.set_column(
            idx, s.ARRIVAL_S, pc.subtract(batch.column(s.ARRIVAL_S), self._zero)
        )
        if opts.workload is not None:
            labels = pa.array([opts.workload] * batch.num_rows, pa.string())
            if s.WORKLOAD in batch.column_names:
                batch = batch.set_column(
                    batch.schema.get_field_index(s.WORKLOAD), s.WORKLOAD, labels
                )
            else:
                batch = batch.append_column(s.WORKLOAD, labels)
        batch = batch.drop_columns([LINE_COLUMN])
        table = conform_trace(batch, str(self._out))
        if self._writer is None:
            self._out.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(
                self._tmp, s.TRACE_SCHEMA, compression="zstd", store_schema=False
            )
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
        out_arrival = table.column(s.ARRIVAL_S)
        if self._first_out is None:
            self._first_out = float(out_arrival[0].as_py())
        self._last_out = float(out_arrival[-1].as_py())
        self._rows += table.num_rows
