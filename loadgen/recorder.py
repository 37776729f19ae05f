"""Incremental writer of a run's ``requests.parquet``, off the event loop.

Records are queued by the replay (a cheap, non-blocking ``add``); a background thread turns
them into Arrow batches and writes each batch as a complete Parquet part file (written to a
temporary name, then renamed), every ``flush_rows`` rows or ``flush_interval_s`` seconds.
A crash therefore loses at most the last unflushed batch, and the parts are readable as
they are. ``close()`` merges the parts into ``requests.parquet`` (one row group per part)
and removes them.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from traces import schema as s
from traces.io import file_metadata
from traces.records import RequestRecord, records_to_batch

_STOP = object()


class RunRecorder:
    """Writes run rows to ``run_dir`` from a background thread."""

    def __init__(
        self,
        run_dir: Path,
        *,
        flush_rows: int = 2000,
        flush_interval_s: float = 1.0,
        provenance: Mapping[str, Any] | None = None,
    ) -> None:
        self._dir = Path(run_dir)
        self._parts = self._dir / s.PARTS_DIR
        self._parts.mkdir(parents=True, exist_ok=True)
        self._flush_rows = flush_rows
        self._flush_interval_s = flush_interval_s
        self._metadata = file_metadata("run", provenance)
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._part_no = 0
        self._rows = 0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="run-recorder", daemon=True)
        self._thread.start()

    @property
    def rows_written(self) -> int:
        """Rows flushed to disk so far."""
        return self._rows

    def add(self, record: RequestRecord) -> None:
        """Queue one record. Never blocks, safe to call from the event loop."""
        self._queue.put(record)

    def _run(self) -> None:
        pending: list[RequestRecord] = []
        deadline = time.monotonic() + self._flush_interval_s
        try:
            while True:
                timeout = max(0.0, deadline - time.monotonic())
                try:
                    item = self._queue.get(timeout=timeout)
                except queue.Empty:
                    item = None
                if item is _STOP:
                    self._write(pending)
                    return
                if isinstance(item, RequestRecord):
                    pending.append(item)
                if len(pending) >= self._flush_rows or time.monotonic() >= deadline:
                    self._write(pending)
                    pending = []
                    deadline = time.monotonic() + self._flush_interval_s
        except BaseException as exc:  # surfaced by close(); the thread must not die silently
            self._error = exc

    def _write(self, records: list[RequestRecord]) -> None:
        if not records:
            return
        batch = records_to_batch(records)
        self._part_no += 1
        final = self._parts / f"part-{self._part_no:06d}.parquet"
        tmp = final.with_name(final.name + ".tmp")
        with pq.ParquetWriter(
            tmp, s.RUN_SCHEMA.with_metadata(self._metadata), compression="zstd"
        ) as w:
            w.write_batch(batch)
        os.replace(tmp, final)
        self._rows += len(records)

    def close(self) -> Path:
        """Flush what is queued, merge the parts into ``requests.parquet`` and return its path."""
        self._queue.put(_STOP)
        self._thread.join()
        if self._error is not None:
            raise RuntimeError(f"run recorder failed: {self._error}") from self._error
        return merge_parts(self._dir, self._metadata)


def merge_parts(run_dir: Path, metadata: Mapping[bytes, bytes] | None = None) -> Path:
    """Merge a run's flushed parts into ``requests.parquet`` (also repairs a killed run)."""
    run_dir = Path(run_dir)
    parts_dir = run_dir / s.PARTS_DIR
    parts = sorted(parts_dir.glob("part-*.parquet"))
    out = run_dir / s.REQUESTS_FILE
    schema = s.RUN_SCHEMA.with_metadata(dict(metadata) if metadata else file_metadata("run"))
    tmp = out.with_name(out.name + ".tmp")
    with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
        for part in parts:
            writer.write_table(
                pq.read_table(part, schema=s.RUN_SCHEMA).replace_schema_metadata(schema.metadata)
            )
    os.replace(tmp, out)
    for part in parts:
        part.unlink()
    for leftover in parts_dir.glob("*.tmp"):
        leftover.unlink()
    parts_dir.rmdir()
    return out
