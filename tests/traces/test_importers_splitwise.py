"""SplitwiseSim importer on a hand-written file with the columns of
../shared/reference/traces.md §1.6 (example row ``0,2,0,1,1,4096,32``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from traces.importers.base import ImportOptions
from traces.importers.errors import SourceError
from traces.importers.registry import import_trace
from traces.io import read_trace_table

DATA = Path(__file__).parent / "data"


def test_seconds_ids_and_non_llm_rows(tmp_path: Path) -> None:
    out = tmp_path / "sw.parquet"
    result = import_trace("splitwise", DATA / "splitwise.csv", out, ImportOptions())
    rows = read_trace_table(out).to_pylist()
    assert [r["request_id"] for r in rows] == ["0", "1", "3"]
    assert [r["arrival_s"] for r in rows] == [0.0, 0.5, 2.25]
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == [
        (4096, 32),
        (1024, 16),
        (2048, 64),
    ]
    assert [(k.reason, k.count) for k in result.skipped] == [("not_llm", 1)]


def test_duplicate_request_id_names_the_line(tmp_path: Path) -> None:
    src = tmp_path / "dup.csv"
    src.write_text(
        "request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size\n"
        "7,2,0,1,1,10,2\n7,2,0,2,1,10,2\n"
    )
    with pytest.raises(SourceError, match=r"dup\.csv: line 3, column 'request_id': duplicate"):
        import_trace("splitwise", src, tmp_path / "o.parquet", ImportOptions())


def test_zero_tokens_names_the_source_column(tmp_path: Path) -> None:
    src = tmp_path / "zero.csv"
    src.write_text(
        "request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size\n"
        "1,2,0,1,1,10,0\n"
    )
    with pytest.raises(
        SourceError,
        match=r"line 2, column 'token_size': token count must be a positive integer, got 0",
    ):
        import_trace("splitwise", src, tmp_path / "o.parquet", ImportOptions())
