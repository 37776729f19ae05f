"""BurstGPT importer on hand-written files built from the documented schema.

No BurstGPT sample is available (the git copy is an LFS pointer). The fixtures use the
column names and example rows of ../shared/reference/traces.md §1.5: the 6-column header of
``BurstGPT_1/_2`` and the ``_3`` header with ``Session ID,Elapsed time`` inserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from traces import schema as s
from traces.importers.base import ImportOptions
from traces.importers.errors import SourceError
from traces.importers.registry import import_trace
from traces.io import read_metadata, read_trace_table

DATA = Path(__file__).parent / "data"


def test_v1_seconds_and_failed_rows_skipped_and_counted(tmp_path: Path) -> None:
    out = tmp_path / "b.parquet"
    result = import_trace("burstgpt", DATA / "burstgpt_v1.csv", out, ImportOptions())
    rows = read_trace_table(out).to_pylist()
    assert [r["arrival_s"] for r in rows] == [0.0, 40.0, 113.0]  # Timestamp 5, 45, 118 s
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == [
        (472, 18),
        (1087, 230),
        (417, 276),
    ]
    assert [(k.reason, k.count) for k in result.skipped] == [("failed", 1)]
    assert read_metadata(out)["skipped"] == {"failed": 1}


def test_keep_failed_keeps_them_with_one_output_token(tmp_path: Path) -> None:
    out = tmp_path / "b.parquet"
    result = import_trace(
        "burstgpt", DATA / "burstgpt_v1.csv", out, ImportOptions(keep_failed=True)
    )
    rows = read_trace_table(out).to_pylist()
    assert len(rows) == 4
    assert (rows[2]["input_tokens"], rows[2]["output_tokens"]) == (300, 1)
    assert result.skipped == ()


def test_v3_moved_columns_are_read_by_name(tmp_path: Path) -> None:
    out = tmp_path / "b3.parquet"
    result = import_trace("burstgpt", DATA / "burstgpt_v3.csv", out, ImportOptions())
    rows = read_trace_table(out).to_pylist()
    assert [r["arrival_s"] for r in rows] == [0.0, 10.5]
    assert [r["input_tokens"] for r in rows] == [100, 200]  # not "Elapsed time" or "Model"
    assert [r["session_id"] for r in rows] == ["s1", "s1"]
    assert result.skipped[0].count == 1
    assert rows[0]["api"] == s.API_CHAT


def test_bad_cell_names_line_and_column(tmp_path: Path) -> None:
    src = tmp_path / "bad.csv"
    src.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "7,ChatGPT,many,18,490,Conversation log\n"
    )
    with pytest.raises(SourceError, match=r"bad\.csv: line 3, column 'Request tokens'"):
        import_trace("burstgpt", src, tmp_path / "o.parquet", ImportOptions())


def test_all_rows_failed_is_a_clear_error(tmp_path: Path) -> None:
    src = tmp_path / "fails.csv"
    src.write_text("Timestamp,Model,Request tokens,Response tokens\n1,GPT-4,5,0\n")
    with pytest.raises(Exception, match=r"no requests imported \(skipped: failed=1\)"):
        import_trace("burstgpt", src, tmp_path / "o.parquet", ImportOptions())
