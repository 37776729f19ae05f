"""Incremental writer of a run's request rows, off the event loop.

Rows (``traces.records.RunRow``) are queued by the replay (a cheap, non-blocking ``add``:
an append to a deque, which wakes nobody until ``flush_rows`` wait); a background thread,
awake once a flush, turns them into Arrow batches (``rows_to_batch``, one column at a time,
sleeping ``column_pause_s`` between columns) and appends each to the run's journal, an Arrow
IPC stream (``requests.parts/journal.arrows``), every ``flush_rows`` rows or
``flush_interval_s`` seconds. A crash therefore loses at most the last unflushed batch, and
the journal is readable up to its last complete batch (``traces.io.read_journal``). Beside
the journal, the dispatch record (``loadgen.dispatched``) names every request sent, so that
a crash's losses can be counted exactly. ``close()`` turns the journal into ``requests.parquet``
and removes both.

Why no wake-up a row: a queue whose ``put`` woke the thread for each row made the two
threads trade the GIL once a request (at 2,000 requests a second, a third of the event
loop's samples were in ``put``, waiting to run again).

Why the thread yields: it needs the GIL to convert, and on a client pinned to one core the
kernel runs it beside the event loop, so the two trade the GIL every switch interval and
the loop gets about half the core while a batch converts. Converting 2,000 rows takes 2-3
ms on an idle core; at 5,000 requests a second every flush made the requests due during it
2-6 ms late (98.3% sent within 2 ms, p99 2.9 ms), and cut into 256-row slices 1 ms apart it
still took 8 ms of the thread's CPU over 16-22 ms, with the same lateness. So the
thread sleeps 0.5 ms after each column (at most about 0.2 ms of work at 2,000 rows), which
lets the GIL go, and runs 10 nice levels below the loop (``_NICE``), so that the kernel
gives it the core while the loop waits rather than beside it. A flush then takes 60-80 ms
and no more of the thread's CPU (about 10 ms); docs/performance.md has the runs. At close
nothing is due: ``close()`` writes what is still queued on its caller's thread, without
pauses. Nor is a batch of fewer than ``paced_rows`` rows paced (256: about 0.5 ms of work).

Why a journal and not a Parquet file per flush: opening and closing a Parquet writer holds
the GIL for milliseconds inside pyarrow, which would delay the event loop's next due
request; appending an IPC batch does not (measured: p99 loop wake-up delay 3.1 ms with
Parquet flushes, 0.4 ms with IPC appends).

The record builder (``loadgen.rows``) sees to it that every value fits its column, so a
write fails only for something outside the run: a full disk, an I/O error, or a row that
slipped past the builder (a bug). Then the recorder does not die quietly: the rows of that
batch that do convert are still written, ``on_failure`` is told at once (the replay stops
dispatching), later records are dropped and counted, and ``close()`` raises
``RecorderError``. The journal keeps what was written, and a merge never replaces it with
fewer rows than it holds (``merge_parts``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.dispatched import DispatchLog
from loadgen.errors import RecorderError
from loadgen.stalls import RECORDER_FLUSH
from traces import schema as s
from traces.io import file_metadata, read_run_file
from traces.records import RequestRecord, RunRow, record_problem, rows_to_batch, run_row

_ROW_GROUP_ROWS = 65_536


def _as_row(item: RunRow | RequestRecord) -> RunRow:
    return item if isinstance(item, RunRow) else run_row(item)


_NICE = 10
"""How far the recorder thread's nice value is raised above the loop's (at most to 19).
Under Linux's fair scheduler a thread 10 nice levels lower weighs about a tenth: it rarely
preempts the event loop's thread, yet keeps about 10% of a core the loop saturates (some
20,000 rows a second at about 5 µs of the thread's CPU a row, more than one loop can
finish). An unprivileged thread cannot take a lower nice value back, so no more than 10."""


def _yield_to_the_loop() -> None:
    """Raise the calling thread's nice value by ``_NICE`` (Linux's per-thread
    ``setpriority``), so that the kernel runs it while the event loop's thread waits rather
    than beside it (module notes). Elsewhere, or where refused, it stays as it is."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            me = threading.get_native_id()
            nice = min(19, os.getpriority(os.PRIO_PROCESS, me) + _NICE)
            os.setpriority(os.PRIO_PROCESS, me, nice)


class RunRecorder:
    """Writes run rows to ``run_dir`` from a background thread.

    ``on_failure(message)`` is called once, from that thread, when a batch cannot be
    written (the session stops the replay with it); ``message`` is one line."""

    def __init__(
        self,
        run_dir: Path,
        *,
        flush_rows: int = 2000,
        flush_interval_s: float = 1.0,
        column_pause_s: float = 0.0005,
        paced_rows: int = 256,
        provenance: Mapping[str, Any] | None = None,
        on_failure: Callable[[str], None] | None = None,
        on_flush: Callable[[str, int, int], None] | None = None,
    ) -> None:
        """``on_flush(cause, start_ns, end_ns)``: told how long each flush took (from the
        recorder's thread; ``loadgen.stalls.StallWatch.mark``). ``column_pause_s``: the
        sleep between a batch's columns while the run goes on (0: none; module notes), for
        batches of at least ``paced_rows`` rows (a smaller one converts at once)."""
        self._dir = Path(run_dir)
        parts = self._dir / s.PARTS_DIR
        parts.mkdir(parents=True, exist_ok=True)
        self._journal_path = parts / s.JOURNAL_FILE
        self.dispatched = DispatchLog(parts / s.DISPATCH_FILE)
        """The run's dispatch record (``loadgen.dispatched``): the client writes it, the
        recorder closes it and the merge deletes it with the journal."""
        self._flush_rows = flush_rows
        self._flush_interval_s = flush_interval_s
        self._between = partial(time.sleep, column_pause_s) if column_pause_s > 0 else None
        self._paced_rows = paced_rows
        self._metadata = file_metadata("run", provenance)
        self._sink = pa.OSFile(str(self._journal_path), "wb")
        self._journal = pa.ipc.new_stream(self._sink, s.RUN_SCHEMA.with_metadata(self._metadata))
        self._pending: deque[RunRow | RequestRecord] = deque()
        self._wake = threading.Event()
        self._stopping = False
        self._on_failure = on_failure
        self._on_flush = on_flush
        self._added = 0
        self._rows = 0
        self._failure: str | None = None
        self._thread = threading.Thread(target=self._run, name="run-recorder", daemon=True)
        self._thread.start()

    @property
    def rows_written(self) -> int:
        """Rows flushed to disk so far."""
        return self._rows

    @property
    def failure(self) -> str | None:
        """Why writing stopped (one line), or None while it works."""
        return self._failure

    def add(self, row: RunRow | RequestRecord) -> None:
        """Queue one row (a ``RequestRecord`` is converted on the recorder's thread). Never
        blocks, safe to call from the event loop. After a failure the row is dropped
        (``close`` reports how many were)."""
        self._added += 1
        if self._failure is None:
            pending = self._pending
            pending.append(row)
            if len(pending) >= self._flush_rows:
                self._wake.set()

    def _run(self) -> None:
        _yield_to_the_loop()
        pending = self._pending
        deadline = time.monotonic() + self._flush_interval_s

        def flush() -> None:
            nonlocal deadline
            while not self._stopping:  # close() writes the rest, at its own thread's priority
                self._wake.wait(max(0.0, deadline - time.monotonic()))
                self._wake.clear()
                if self._stopping:
                    return
                timed = time.monotonic() >= deadline
                # By count: whole batches of flush_rows; by time: every row.
                take = len(pending)
                if not timed:
                    take -= take % self._flush_rows
                self._write_first(take)
                if timed:
                    deadline = time.monotonic() + self._flush_interval_s

        self._guarded(flush)

    def _guarded(self, write: Callable[[], None]) -> None:
        """Run ``write``; a failure is reported at once and by ``close()``, never a silent
        death of the writer."""
        try:
            write()
        except RecorderError as exc:  # a row that does not convert (_write_convertible)
            self._fail(str(exc))
        except BaseException as exc:
            self._fail(f"cannot write to {self._journal_path}: {type(exc).__name__}: {exc}")

    def _write_first(self, count: int) -> None:
        """Write the first ``count`` waiting rows in batches of at most ``flush_rows`` (a
        crash loses at most one)."""
        pending, size = self._pending, self._flush_rows
        while count > 0:
            batch = [_as_row(pending.popleft()) for _ in range(min(count, size))]
            count -= len(batch)
            self._write(batch)

    def _write(self, rows: list[RunRow]) -> None:
        if not rows:
            return
        start = time.perf_counter_ns()
        try:
            self._write_batch(rows)
        finally:
            if self._on_flush is not None:
                self._on_flush(RECORDER_FLUSH, start, time.perf_counter_ns())

    def _write_batch(self, rows: list[RunRow]) -> None:
        try:
            # Paced while the run goes on; at close nothing is due, so no pauses. A small
            # batch (256 rows: about 0.5 ms) converts at once: at low rates a timed flush
            # holds a few rows, and 53 wake-ups of the thread would cost the loop more.
            paced = not self._stopping and len(rows) >= self._paced_rows
            batch = rows_to_batch(rows, between=self._between if paced else None)
        except Exception:
            self._write_convertible(rows)
            return
        self._append(batch)

    def _write_convertible(self, rows: list[RunRow]) -> None:
        """A batch that did not convert: write the rows that do, then fail naming the first
        that does not (slow, and only ever on this path)."""
        good: list[RunRow] = []
        bad: tuple[RunRow, str] | None = None
        for row in rows:
            try:
                rows_to_batch([row])
            except Exception as exc:
                if bad is None:
                    bad = (row, record_problem(row) or f"{type(exc).__name__}: {exc}")
            else:
                good.append(row)
        if good:
            self._append(rows_to_batch(good))
        if bad is not None:
            row, problem = bad
            raise RecorderError(
                f"the row of request {row.request_id!r} cannot be stored: {problem}"
            )

    def _append(self, batch: pa.RecordBatch) -> None:
        self._journal.write_batch(batch)
        self._sink.flush()
        self._rows += batch.num_rows

    def _fail(self, message: str) -> None:
        self._failure = message
        if self._on_failure is not None:
            # A callback that fails (a loop already closed) changes nothing: close() still
            # reports the failure.
            with contextlib.suppress(Exception):
                self._on_failure(message)

    def close(self) -> Path:
        """Flush what is queued, turn the journal into ``requests.parquet``, return its path.

        Raises ``RecorderError`` when writing failed during the run (after merging what was
        written, when that works) or when the merge fails (the journal is then left as it
        is: every reader in this project reads it)."""
        self._stopping = True
        self._wake.set()
        self._thread.join()
        # The rows still queued are written here, not by the recorder's thread: it runs below
        # the loop's priority (``_NICE``), which on a busy machine would slow the close.
        if self._failure is None:
            self._guarded(lambda: self._write_first(len(self._pending)))
        self.dispatched.close()
        try:
            self._journal.close()
            self._sink.close()
        except Exception as exc:  # the end-of-stream marker: the batches before it are whole
            if self._failure is None:
                self._failure = f"cannot close {self._journal_path}: {exc}"
        failure = self._failure
        if failure is None:
            return merge_parts(self._dir, self._metadata, expected_rows=self._rows)
        with contextlib.suppress(RecorderError):  # the journal stays, readable, if this fails
            merge_parts(self._dir, self._metadata, expected_rows=self._rows)
        lost = self._added - self._rows
        raise RecorderError(
            f"run recorder: {failure}; the run stopped with {self._rows} rows written"
            + (f" and {lost} not" if lost else "")
        )


def merge_parts(
    run_dir: Path,
    metadata: Mapping[bytes, bytes] | None = None,
    *,
    expected_rows: int | None = None,
) -> Path:
    """Write a run's flushed rows (journal, and Parquet parts of older versions) as
    ``requests.parquet`` and remove them; also repairs a run whose process was killed.

    The sources are removed only once ``requests.parquet`` holds every row read from them,
    and at least ``expected_rows`` (what the recorder wrote; None when unknown, as after a
    crash). Anything else, including a source that cannot be opened, raises
    ``RecorderError`` and leaves the sources as they were."""
    run_dir = Path(run_dir)
    parts_dir = run_dir / s.PARTS_DIR
    out = run_dir / s.REQUESTS_FILE
    schema = s.RUN_SCHEMA.with_metadata(dict(metadata) if metadata else file_metadata("run"))
    tmp = out.with_name(out.name + ".tmp")
    try:
        sources = sorted(parts_dir.glob("part-*.parquet"))  # listing opens a descriptor too
        journal = parts_dir / s.JOURNAL_FILE
        if journal.exists():
            sources.append(journal)
        rows = 0
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for source in sources:
                table = read_run_file(source).replace_schema_metadata(schema.metadata)
                writer.write_table(table, row_group_size=_ROW_GROUP_ROWS)
                rows += table.num_rows
        if expected_rows is not None and rows < expected_rows:
            raise RecorderError(f"{rows} rows read back where {expected_rows} were written")
        if pq.read_metadata(tmp).num_rows != rows:
            raise RecorderError(f"{tmp} does not hold the {rows} rows written to it")
        os.replace(tmp, out)
    except (OSError, pa.ArrowException, RecorderError) as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise RecorderError(
            f"cannot merge the rows of {run_dir} into {s.REQUESTS_FILE} ({exc}); they stay "
            f"in {parts_dir}, which every reader accepts"
        ) from exc
    for source in sources:
        source.unlink()
    # Every request sent has its row now: the dispatch record has nothing left to tell.
    (parts_dir / s.DISPATCH_FILE).unlink(missing_ok=True)
    for leftover in parts_dir.glob("*.tmp"):
        leftover.unlink()
    parts_dir.rmdir()
    return out
