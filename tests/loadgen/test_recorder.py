"""The run writer: parts flushed as complete Parquet files, merged on close."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq

from loadgen.recorder import RunRecorder, merge_parts
from traces import schema as s
from traces.io import read_run_table
from traces.records import RequestRecord


def record(i: int) -> RequestRecord:
    return RequestRecord(
        run_id="r",
        trace_index=i,
        request_id=str(i),
        x_request_id=f"r-{i}",
        workload="text",
        api="chat",
        input_tokens=10,
        output_tokens=2,
        due_ns=i,
        sent_ns=i + 1,
        chunk_offsets_us=[10, 20],
        outcome=s.OUTCOME_OK,
    )


def test_rows_are_flushed_by_count_and_merged_on_close(tmp_path: Path) -> None:
    rec = RunRecorder(tmp_path, flush_rows=10, flush_interval_s=60)
    for i in range(25):
        rec.add(record(i))
    deadline = time.monotonic() + 10
    while rec.rows_written < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    parts = sorted((tmp_path / s.PARTS_DIR).glob("part-*.parquet"))
    assert len(parts) == 2
    # A run killed now would still be readable from its parts.
    assert read_run_table(tmp_path).num_rows == 20
    out = rec.close()
    assert out == tmp_path / s.REQUESTS_FILE
    assert not (tmp_path / s.PARTS_DIR).exists()
    table = pq.read_table(out)
    assert table.num_rows == 25
    assert sorted(table.column(s.TRACE_INDEX).to_pylist()) == list(range(25))
    assert pq.ParquetFile(out).metadata.num_row_groups == 3


def test_rows_are_flushed_by_time(tmp_path: Path) -> None:
    rec = RunRecorder(tmp_path, flush_rows=1000, flush_interval_s=0.05)
    rec.add(record(0))
    deadline = time.monotonic() + 10
    while rec.rows_written < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rec.rows_written == 1
    rec.close()


def test_merge_repairs_a_killed_run(tmp_path: Path) -> None:
    rec = RunRecorder(tmp_path, flush_rows=2, flush_interval_s=60)
    for i in range(4):
        rec.add(record(i))
    deadline = time.monotonic() + 10
    while rec.rows_written < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    # Simulate a crash: never close the recorder, merge what was flushed.
    (tmp_path / s.PARTS_DIR / "part-000099.parquet.tmp").write_bytes(b"half-written")
    merge_parts(tmp_path)
    assert pq.read_table(tmp_path / s.REQUESTS_FILE).num_rows == 4
