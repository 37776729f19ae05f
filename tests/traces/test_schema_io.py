"""The two schemas, trace reading/validation, and run-row conversion."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from traces import schema as s
from traces.errors import SchemaError, TraceFileError, ValidationError
from traces.io import read_metadata, read_trace, read_trace_table, write_trace
from traces.records import RequestRecord, records_to_batch


def trace_table(**overrides: list[object]) -> pa.Table:
    cols: dict[str, list[object]] = {
        "request_id": ["a", "b", "c"],
        "arrival_s": [0.0, 0.5, 1.0],
        "input_tokens": [10, 20, 30],
        "output_tokens": [5, 5, 5],
    }
    cols.update(overrides)
    return pa.table(cols)


def test_record_fields_match_run_schema() -> None:
    assert tuple(f.name for f in fields(RequestRecord)) == tuple(s.RUN_SCHEMA.names)


def test_minimal_trace_round_trip_with_provenance(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    write_trace(trace_table(), path, {"source": "test", "seed": 3})
    reqs = read_trace(path)
    assert [r.request_id for r in reqs] == ["a", "b", "c"]
    assert reqs[1].workload == "text"
    assert reqs[1].api == "chat"
    meta = read_metadata(path)
    assert meta["schema_version"] == s.SCHEMA_VERSION
    assert meta["source"] == "test"
    assert meta["kind"] == "trace"
    assert pq.read_schema(path).remove_metadata() == s.TRACE_SCHEMA


@pytest.mark.parametrize(
    ("overrides", "row", "column"),
    [
        ({"arrival_s": [0.0, -1.0, 2.0]}, 1, "arrival_s"),
        ({"arrival_s": [0.0, 2.0, 1.0]}, 2, "arrival_s"),
        ({"input_tokens": [10, 0, 5]}, 1, "input_tokens"),
        ({"output_tokens": [1, 2, -3]}, 2, "output_tokens"),
        ({"request_id": ["a", "b", "a"]}, 0, "request_id"),
        ({"api": ["chat", "embed", "chat"]}, 1, "api"),
    ],
)
def test_validation_names_first_bad_row_and_column(
    tmp_path: Path, overrides: dict[str, list[object]], row: int, column: str
) -> None:
    path = tmp_path / "bad.parquet"
    pq.write_table(trace_table(**overrides), path)
    with pytest.raises(ValidationError) as info:
        read_trace_table(path)
    assert info.value.row == row
    assert info.value.column == column
    assert f"row {row}" in str(info.value)
    assert column in str(info.value)


def test_missing_columns_and_files(tmp_path: Path) -> None:
    path = tmp_path / "cols.parquet"
    pq.write_table(pa.table({"request_id": ["a"], "arrival_s": [0.0]}), path)
    with pytest.raises(SchemaError, match="input_tokens"):
        read_trace_table(path)
    with pytest.raises(TraceFileError, match="no such trace file"):
        read_trace_table(tmp_path / "absent.parquet")
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(TraceFileError, match="not a readable Parquet"):
        read_trace_table(junk)


def test_records_to_batch_types() -> None:
    rec = RequestRecord(
        run_id="r",
        trace_index=0,
        request_id="a",
        x_request_id="r-a",
        workload="text",
        api="chat",
        input_tokens=1,
        output_tokens=2,
        due_ns=1,
        sent_ns=2,
        chunk_offsets_us=[5, 9],
        chunk_tokens=[1, 1],
        outcome="ok",
    )
    batch = records_to_batch([rec])
    assert batch.schema == s.RUN_SCHEMA
    assert batch.column(s.CHUNK_OFFSETS_US).to_pylist() == [[5, 9]]
