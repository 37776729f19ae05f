"""AIPerf custom-dataset importer on hand-written single_turn and multi_turn lines shaped as
AIPerf's Custom Dataset Guide shows them (``text``, ``output_length``, ``session_id`` +
``turns``, a leading ``role: system`` turn; ``timestamp``/``delay`` in ms)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli.root import cli
from traces import schema as s
from traces.importers.base import ImportOptions
from traces.importers.errors import SourceError
from traces.importers.registry import import_trace
from traces.io import read_trace_table

DATA = Path(__file__).parent / "data"

LINES = [
    {"text": "What is machine learning?", "output_length": 50},
    {
        "session_id": "chat_1",
        "turns": [
            {"role": "system", "text": "Be terse."},
            {"text": "Explain neural networks."},
            {"text": "Give an example.", "delay": 1500, "output_length": 20},
            {"text": "And another.", "delay": 250},
        ],
    },
    {"text": "Late one", "delay": 2000},
    {"session_id": "chat_2", "turns": [{"text": "Hi there", "timestamp": 2500}, {"text": "More"}]},
]


def _write(path: Path, lines: list[object]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_turns_become_sessions_with_parents_think_and_arrivals(tmp_path: Path) -> None:
    src = _write(tmp_path / "conv.jsonl", [*LINES])
    out = tmp_path / "a.parquet"
    result = import_trace("aiperf", src, out, ImportOptions(output_tokens=64))
    rows = read_trace_table(out).to_pylist()
    got = [
        (r["request_id"], r["arrival_s"], r["session_id"], r["turn"], r["parent"], r["think_s"])
        for r in rows
    ]
    assert got == [
        ("1", 0.0, None, None, None, None),
        ("2-0", 0.0, "chat_1", 0, None, None),
        ("2-1", 1.5, "chat_1", 1, "2-0", 1.5),
        ("2-2", 1.75, "chat_1", 2, "2-1", 0.25),
        ("3", 2.0, None, None, None, None),  # 2000 ms after the previous line
        ("4-0", 2.5, "chat_2", 0, None, None),  # its own timestamp
        ("4-1", 2.5, "chat_2", 1, "4-0", None),  # no delay: null, i.e. 0
    ]
    assert result.rows == 7
    assert [r["output_tokens"] for r in rows] == [50, 64, 20, 64, 64, 64, 64]
    assert all(r["api"] == s.API_CHAT for r in rows)
    # the leading system turn is hoisted into every turn's messages, not a request
    msgs = json.loads(rows[2]["messages"])
    assert msgs == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Explain neural networks."},
        {"role": "user", "content": "Give an example."},
    ]
    assert rows[2]["input_tokens"] == 2 + 3 + 3  # words of every message so far


def test_import_cli_output_passes_trace_validate(tmp_path: Path) -> None:
    src = _write(tmp_path / "conv.jsonl", [*LINES])
    out = tmp_path / "a.parquet"
    runner = CliRunner()
    done = runner.invoke(cli, ["trace", "import", "aiperf", str(src), "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert "imported 7 requests" in done.output
    check = runner.invoke(cli, ["trace", "validate", str(out)])
    assert check.exit_code == 0, check.output


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ({"prompt": "no text field"}, "'text' (single_turn) or 'turns'"),
        ({"session_id": "x", "turns": [{"text": "a"}, {"text": "b", "delay": -5}]}, "delay"),
        ({"session_id": "x", "turns": []}, "non-empty list"),
        ({"text": "a", "output_length": 0}, "output_length"),
    ],
)
def test_malformed_line_names_its_line(tmp_path: Path, bad: object, needle: str) -> None:
    src = _write(tmp_path / "bad.jsonl", [LINES[0], bad])
    with pytest.raises(SourceError) as err:
        import_trace("aiperf", src, tmp_path / "o.parquet", ImportOptions())
    assert "line 2" in str(err.value)
    assert needle in str(err.value)
    assert not (tmp_path / "o.parquet").exists()


def test_dag_forks_and_spawns_become_branches(tmp_path: Path) -> None:
    out = tmp_path / "d.parquet"
    import_trace("aiperf_dag", DATA / "aiperf_dag.jsonl", out, ImportOptions())
    rows = {r["request_id"]: r for r in read_trace_table(out).to_pylist()}
    got = {rid: (r["parent"], r["branch"], r["think_s"], r["arrival_s"]) for rid, r in rows.items()}
    assert got == {
        "root:0": (None, None, None, 0.0),
        "branch-a:0": ("root:0", "fork", None, 0.0),
        "branch-a:1": ("branch-a:0", None, 0.5, 0.5),
        "branch-b:0": ("root:0", "fork", None, 0.0),
        "branch-b:1": ("branch-b:0", None, None, 0.0),
        "critic:0": ("branch-b:0", "spawn", 0.25, 0.25),
    }
    # a fork continues the parent's messages; a spawn starts fresh
    fork = json.loads(rows["branch-a:0"]["messages"])
    assert fork[:2] == json.loads(rows["root:0"]["messages"])
    assert json.loads(rows["critic:0"]["messages"])[0]["content"] == "Critic."
    assert rows["critic:0"]["tools"] is not None
    assert (rows["root:0"]["output_tokens"], rows["critic:0"]["output_tokens"]) == (128, 256)


@pytest.mark.parametrize(
    ("lines", "needle"),
    [
        ([{"session_id": "a", "turns": [{"messages": [{"role": "user"}], "forks": ["b"]}]},
          {"session_id": "b", "turns": [{"messages": []}]}], "turns[0].messages"),
        ([{"session_id": "a", "orchestrator": True, "spawns": ["b"]}], "not supported"),
        ([{"session_id": "a", "turns": [{"messages": [{"role": "user"}], "forks": ["zz"]}]}],
         "unknown session 'zz'"),
    ],
)  # fmt: skip
def test_dag_bad_line_is_named(tmp_path: Path, lines: list[object], needle: str) -> None:
    src = _write(tmp_path / "bad.dag.jsonl", lines)
    with pytest.raises(SourceError) as err:
        import_trace("aiperf_dag", src, tmp_path / "o.parquet", ImportOptions())
    assert f"line {len(lines)}" in str(err.value)
    assert needle in str(err.value)
