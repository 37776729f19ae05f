"""The two schemas, trace reading/validation, and run-row conversion."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from traces import schema as s
from traces.errors import SchemaError, TraceFileError, ValidationError
from traces.io import read_metadata, read_trace, read_trace_table, write_trace
from traces.records import RequestRecord, record_problem, records_to_batch


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


def test_a_column_written_twice_is_refused_by_name(tmp_path: Path) -> None:
    """Parquet allows two columns of one name (an appended column that was already there);
    the reader says which, instead of failing on the lookup."""
    path = tmp_path / "twice.parquet"
    table = trace_table().append_column("output_tokens", pa.array([6, 6, 6]))
    pq.write_table(table, path)
    with pytest.raises(SchemaError, match=r"twice.parquet: column 'output_tokens' appears more"):
        read_trace_table(path)


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


def _record(**values: object) -> RequestRecord:
    base = RequestRecord(
        run_id="r",
        trace_index=0,
        request_id="a",
        x_request_id="r-a",
        workload="text",
        api="chat",
        input_tokens=1,
        output_tokens=2,
        due_ns=1,
        chunk_offsets_us=[5, 9],
        chunk_tokens=[1, 1],
        outcome="ok",
    )
    return replace(base, **values)  # type: ignore[arg-type]  # wrong types on purpose


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({}, None),
        ({"finish_reason": 7}, "finish_reason: 7 is not a string"),
        ({"finish_reason": {}}, "finish_reason: {} is not a string"),
        ({"completion_tokens": 2**31}, "completion_tokens: 2147483648 does not fit int32"),
        ({"completion_tokens": True}, "completion_tokens: True is not an integer"),
        ({"chunk_tokens": [1, -(2**15) - 1]}, "chunk_tokens: item 1: -32769 does not fit int16"),
        ({"chunk_offsets_us": [2**31]}, "chunk_offsets_us: item 0: 2147483648 does not fit int32"),
        ({"http_status": 2**15}, "http_status: 32768 does not fit int16"),
        ({"server_ttft_ms": 2**54}, "server_ttft_ms: 18014398509481984 is not a double number"),
        ({"slo_ttft_ms": 2**25}, "slo_ttft_ms: 33554432 is not a float number"),
        ({"warmup": 1}, "warmup: 1 is not a boolean"),
        ({"outcome": None}, "outcome: null where a value is required"),
        ({"error": "x" * 500}, None),
    ],
)
def test_record_problem_names_what_records_to_batch_refuses(
    values: dict[str, object], problem: str | None
) -> None:
    """The diagnosis of a row the run table cannot hold agrees with the conversion."""
    rec = _record(**values)
    assert record_problem(rec) == problem
    if problem is None:
        records_to_batch([rec])
    else:
        with pytest.raises((pa.ArrowException, TypeError, ValueError, OverflowError)):
            records_to_batch([rec])
