"""Generic local dataset importer: Parquet (file or shard directory) and JSONL written here,
mapped onto trace fields with ``--map``."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from loadgen.cli.root import cli
from traces import schema as s
from traces.importers.base import ImportOptions
from traces.importers.dataset import parse_mapping
from traces.importers.errors import ImportOptionError, SourceError
from traces.importers.registry import import_trace
from traces.io import read_metadata, read_trace_table


def _qa(path: Path, questions: list[str | None], answers: list[str]) -> Path:
    table = pa.table(
        {
            "question": pa.array(questions, pa.string()),
            "answer": pa.array(answers, pa.string()),
            "instruction": pa.array(["be brief"] * len(answers), pa.string()),
            "unused": pa.array(list(range(len(answers))), pa.int64()),
        }
    )
    pq.write_table(table, path)
    return path


def test_parquet_text_columns_become_chat_messages(tmp_path: Path) -> None:
    src = _qa(
        tmp_path / "train.parquet",
        ["what is two plus two", None, "name a colour", "  "],
        ["four", "x", "blue or green", "y"],
    )
    out = tmp_path / "o.parquet"
    mapping = parse_mapping("prompt=question,output=answer,system=instruction")
    result = import_trace("dataset", src, out, ImportOptions(columns=mapping, rate=2.0, seed=1))
    rows = read_trace_table(out).to_pylist()
    assert len(rows) == 2
    assert json.loads(rows[0][s.MESSAGES]) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is two plus two"},
    ]
    assert [(r[s.INPUT_TOKENS], r[s.OUTPUT_TOKENS]) for r in rows] == [(2 + 5, 1), (2 + 3, 3)]
    assert {r[s.API] for r in rows} == {s.API_CHAT}
    assert rows[0][s.ARRIVAL_S] == 0.0
    assert rows[1][s.ARRIVAL_S] > 0.0
    assert {(k.reason, k.count) for k in result.skipped} == {("empty_prompt", 2)}
    assert read_metadata(out)["column_map"] == {
        "prompt": "question",
        "output": "answer",
        "system": "instruction",
    }


def test_jsonl_token_columns_with_times_and_sessions(tmp_path: Path) -> None:
    src = tmp_path / "d.jsonl"
    records = [
        {"t": 1.5, "n_in": 100, "n_out": 7, "conv": "a", "k": 1},
        {"t": 2.0, "n_in": 300, "n_out": 9, "conv": "a", "k": 2},
        {"t": 4.25, "n_in": 50, "n_out": 3, "conv": "b", "k": 1},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    mapping = parse_mapping(
        "input_tokens=n_in,output_tokens=n_out,arrival_s=t,session_id=conv,turn=k"
    )
    out = tmp_path / "o.parquet"
    import_trace("dataset", src, out, ImportOptions(columns=mapping))
    rows = read_trace_table(out).to_pylist()
    assert [r[s.ARRIVAL_S] for r in rows] == [0.0, 0.5, 2.75]  # re-zeroed at the first row
    assert [(r[s.INPUT_TOKENS], r[s.OUTPUT_TOKENS]) for r in rows] == [(100, 7), (300, 9), (50, 3)]
    assert [(r[s.SESSION_ID], r[s.TURN]) for r in rows] == [("a", 1), ("a", 2), ("b", 1)]
    assert {r[s.API] for r in rows} == {s.API_COMPLETIONS}
    assert all(r[s.MESSAGES] is None for r in rows)


def test_shard_directory_and_bad_cells_name_row_and_column(tmp_path: Path) -> None:
    shards = tmp_path / "data"
    shards.mkdir()
    _qa(shards / "train-00000-of-00002.parquet", ["a b", "c"], ["d", "e"])
    _qa(shards / "train-00001-of-00002.parquet", ["f"], ["g h"])
    out = tmp_path / "o.parquet"
    mapping = parse_mapping("prompt=question,output=answer")
    import_trace("dataset", shards, out, ImportOptions(columns=mapping))
    assert read_trace_table(out).column(s.INPUT_TOKENS).to_pylist() == [2, 1, 1]
    with pytest.raises(SourceError, match=r"column 'query': no such column \(columns: question"):
        import_trace(
            "dataset",
            shards,
            tmp_path / "x.parquet",
            ImportOptions(columns=parse_mapping("prompt=query,output=answer")),
        )
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"q": "x", "n": 3}\n{"q": "y", "n": "many"}\n')
    with pytest.raises(SourceError, match=r"bad\.jsonl: line 2, column 'n': not an integer"):
        import_trace(
            "dataset",
            bad,
            tmp_path / "y.parquet",
            ImportOptions(columns=parse_mapping("prompt=q,output_tokens=n")),
        )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prompt=q,reply=a", "unknown target 'reply'"),
        ("prompt", "TARGET=COLUMN pairs"),
        ("prompt=q,prompt=r", "names 'prompt' twice"),
    ],
)
def test_bad_mappings(text: str, message: str) -> None:
    with pytest.raises(ImportOptionError, match=message):
        parse_mapping(text)


def test_mapping_needs_a_prompt_and_an_output(tmp_path: Path) -> None:
    src = _qa(tmp_path / "t.parquet", ["a"], ["b"])
    with pytest.raises(ImportOptionError, match="needs output=COLUMN or output_tokens=COLUMN"):
        import_trace(
            "dataset",
            src,
            tmp_path / "o.parquet",
            ImportOptions(columns=parse_mapping("prompt=question")),
        )
    with pytest.raises(ImportOptionError, match="does not apply to format 'sharegpt'"):
        import_trace(
            "sharegpt",
            src,
            tmp_path / "o.parquet",
            ImportOptions(columns=parse_mapping("prompt=question,output=answer")),
        )


def test_cli_map_option(tmp_path: Path) -> None:
    src = _qa(tmp_path / "t.parquet", ["one two three"], ["four"])
    out = tmp_path / "o.parquet"
    args = ["trace", "import", "dataset", str(src), "--map", "prompt=question"]
    result = CliRunner().invoke(cli, [*args, "--map", "output=answer", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "imported 1 requests" in result.output
    assert read_trace_table(out).column(s.INPUT_TOKENS).to_pylist() == [3]
    result = CliRunner().invoke(cli, [*args, "--map", "prompt=answer", "-o", str(out)])
    assert result.exit_code == 2
    assert "names 'prompt' twice" in result.output
