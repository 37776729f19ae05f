"""Mooncake importer: the real FAST'25 conversation head, and the format's pitfalls.

Expected values are computed here from the raw JSONL, never taken from the importer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pytest

from traces import schema as s
from traces.importers.base import ImportOptions
from traces.importers.errors import SourceError
from traces.importers.registry import import_trace
from traces.io import read_metadata, read_trace_table

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "../shared/traces-samples"
DATA = Path(__file__).parent / "data"
needs_samples = pytest.mark.skipif(
    not SAMPLES.is_dir(), reason=f"real trace samples absent: {SAMPLES} (needs ../shared)"
)


@needs_samples
def test_real_conversation_head_reproduces_raw_statistics(tmp_path: Path) -> None:
    src = SAMPLES / "mooncake/conversation_trace.head2000.jsonl"
    raw = [json.loads(line) for line in src.read_text().splitlines()]
    out = tmp_path / "mc.parquet"
    result = import_trace("mooncake", src, out, ImportOptions())
    table = read_trace_table(out)

    assert result.rows == table.num_rows == len(raw) == 2000
    mean_in = sum(r["input_length"] for r in raw) / len(raw)
    mean_out = sum(r["output_length"] for r in raw) / len(raw)
    assert pc.mean(table.column(s.INPUT_TOKENS)).as_py() == pytest.approx(mean_in)
    assert pc.mean(table.column(s.OUTPUT_TOKENS)).as_py() == pytest.approx(mean_out)
    # ms -> s, relative to the first row
    last_s = (raw[-1]["timestamp"] - raw[0]["timestamp"]) / 1000
    assert table.column(s.ARRIVAL_S)[-1].as_py() == pytest.approx(last_s)
    assert result.duration_s == pytest.approx(last_s)
    assert table.column(s.PREFIX_BLOCKS)[1].as_py() == raw[1]["hash_ids"]
    assert table.column(s.API)[0].as_py() == s.API_COMPLETIONS
    meta = read_metadata(out)
    assert meta["source_format"] == "mooncake"
    assert meta["source_file"] == src.name
    assert meta["block_size"] == 512


@needs_samples
def test_real_head_first_rows_match_the_reference_doc(tmp_path: Path) -> None:
    # reference/traces.md §1.1 quotes the first two rows of conversation_trace.jsonl
    out = tmp_path / "mc.parquet"
    import_trace(
        "mooncake",
        SAMPLES / "mooncake/conversation_trace.head2000.jsonl",
        out,
        ImportOptions(limit=2),
    )
    rows = read_trace_table(out).to_pylist()
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == [(6758, 500), (7322, 490)]
    assert rows[0]["prefix_blocks"] == list(range(14))


def test_pitfalls_ms_units_shared_ms_and_inputs_beyond_128k(tmp_path: Path) -> None:
    out = tmp_path / "p.parquet"
    result = import_trace("mooncake", DATA / "mooncake_pitfalls.jsonl", out, ImportOptions())
    rows = read_trace_table(out).to_pylist()
    assert [r["arrival_s"] for r in rows] == [0.0, 0.0, 1.5, 2.999]
    assert rows[2]["input_tokens"] == 191_378  # above 128k: kept by default
    assert len(rows[2]["prefix_blocks"]) == 374
    assert result.clipped == 0


def test_max_input_tokens_clips_tokens_and_blocks_together(tmp_path: Path) -> None:
    out = tmp_path / "p.parquet"
    opts = ImportOptions(max_input_tokens=131_072)
    result = import_trace("mooncake", DATA / "mooncake_pitfalls.jsonl", out, opts)
    rows = read_trace_table(out).to_pylist()
    assert rows[2]["input_tokens"] == 131_072
    assert len(rows[2]["prefix_blocks"]) == 256  # 131072 / 512
    assert rows[2]["prefix_blocks"][:2] == [0, 1]
    assert result.clipped == 1
    assert read_metadata(out)["import_options"] == {"max_input_tokens": 131_072}


def test_block_count_not_covering_input_names_line_and_column(tmp_path: Path) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text(
        '{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [1]}\n'
        '{"timestamp": 5, "input_length": 2000, "output_length": 1, "hash_ids": [1, 2]}\n'
    )
    with pytest.raises(SourceError, match=r"bad\.jsonl: line 2, column 'hash_ids'"):
        import_trace("mooncake", src, tmp_path / "o.parquet", ImportOptions())
    assert not (tmp_path / "o.parquet").exists()
    assert not (tmp_path / "o.parquet.tmp").exists()


def test_wrong_block_size_is_caught(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="wrong --block-size"):
        import_trace(
            "mooncake",
            DATA / "mooncake_pitfalls.jsonl",
            tmp_path / "o.parquet",
            ImportOptions(block_size=16),
        )


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ('{"timestamp": "soon", "input_length": 5, "output_length": 1}', "timestamp"),
        ('{"timestamp": 0, "input_length": 0, "output_length": 1}', "input_length"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 1.5}', "output_length"),
    ],
)
def test_bad_values_name_line_and_column(tmp_path: Path, text: str, column: str) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n' + text + "\n")
    with pytest.raises(SourceError, match=rf"line 2, column '{column}'"):
        import_trace("mooncake", src, tmp_path / "o.parquet", ImportOptions())


def test_unordered_source_errors_unless_a_sort_window_is_given(tmp_path: Path) -> None:
    src = tmp_path / "unordered.jsonl"
    src.write_text(
        "\n".join(
            json.dumps({"timestamp": t, "input_length": 10, "output_length": 1})
            for t in (0, 300, 200, 400)
        )
        + "\n"
    )
    with pytest.raises(SourceError, match=r"line 3, column 'timestamp'.*--sort-window"):
        import_trace("mooncake", src, tmp_path / "o.parquet", ImportOptions())
    out = tmp_path / "sorted.parquet"
    import_trace("mooncake", src, out, ImportOptions(sort_window=2, batch_rows=1))
    assert read_trace_table(out).column(s.ARRIVAL_S).to_pylist() == [0.0, 0.2, 0.3, 0.4]


def test_limit_and_time_window_rezero_at_start(tmp_path: Path) -> None:
    out = tmp_path / "w.parquet"
    opts = ImportOptions(start_s=1.0, end_s=3.0, batch_rows=1)
    import_trace("mooncake", DATA / "mooncake_pitfalls.jsonl", out, opts)
    assert read_trace_table(out).column(s.ARRIVAL_S).to_pylist() == pytest.approx([0.5, 1.999])
    import_trace(
        "mooncake", DATA / "mooncake_pitfalls.jsonl", out, ImportOptions(limit=3, workload="x")
    )
    table = read_trace_table(out)
    assert table.num_rows == 3
    assert set(pc.cast(table.column(s.WORKLOAD), "string").to_pylist()) == {"x"}


def test_row_beyond_the_sort_window_names_its_line(tmp_path: Path) -> None:
    src = tmp_path / "far.jsonl"
    stamps = (100, 200, 300, 400, 0)
    src.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": 1, "output_length": 1}) + "\n"
            for t in stamps
        )
    )
    with pytest.raises(SourceError, match=r"line 5, column 'timestamp'.*more than --sort-window 1"):
        import_trace(
            "mooncake", src, tmp_path / "o.parquet", ImportOptions(sort_window=1, batch_rows=1)
        )
