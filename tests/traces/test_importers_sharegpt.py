"""ShareGPT importer on a hand-written JSON array shaped as in
../shared/reference/traces.md §1.7 (``id`` + ``conversations`` of ``from``/``value`` turns)."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

import pytest

from traces import schema as s
from traces.importers.base import ImportOptions
from traces.importers.errors import ImportOptionError, SourceError
from traces.importers.parse import iter_json_array
from traces.importers.registry import import_trace
from traces.io import read_metadata, read_trace_table

DATA = Path(__file__).parent / "data"


def test_first_turns_become_chat_messages_with_word_counts(tmp_path: Path) -> None:
    out = tmp_path / "sg.parquet"
    result = import_trace("sharegpt", DATA / "sharegpt.json", out, ImportOptions())
    rows = read_trace_table(out).to_pylist()
    assert [r["request_id"] for r in rows] == ["0-0", "2-0"]
    assert json.loads(rows[0]["messages"]) == [{"role": "user", "content": "hello there friend"}]
    assert json.loads(rows[1]["messages"])[0] == {"role": "system", "content": "be brief"}
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == [(3, 4), (5, 1)]
    assert all(r["api"] == s.API_CHAT for r in rows)
    assert rows[0]["arrival_s"] == 0.0
    assert {(k.reason, k.count) for k in result.skipped} == {
        ("no_exchange", 1),
        ("unknown_role", 1),
    }


def test_all_turns_share_a_session_and_carry_history(tmp_path: Path) -> None:
    out = tmp_path / "sg.parquet"
    import_trace(
        "sharegpt", DATA / "sharegpt.json", out, ImportOptions(turns="all", tokens_per_word=1.5)
    )
    rows = read_trace_table(out).to_pylist()
    assert [(r["session_id"], r["turn"]) for r in rows] == [("a", 0), ("a", 1), ("c", 0)]
    assert len(json.loads(rows[1]["messages"])) == 3
    # history of 3 + 4 + 4 words, each message ceil(words * 1.5)
    assert rows[1]["input_tokens"] == 5 + 6 + 6
    assert rows[1]["output_tokens"] == 2


def test_poisson_arrivals_follow_rate_and_seed(tmp_path: Path) -> None:
    convo = {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}
    src = tmp_path / "many.json"
    src.write_text(json.dumps([convo] * 4000))
    out = tmp_path / "p.parquet"
    import_trace("sharegpt", src, out, ImportOptions(rate=5.0, seed=3))
    arrival = read_trace_table(out).column(s.ARRIVAL_S).to_pylist()
    gaps = [b - a for a, b in itertools.pairwise(arrival)]
    assert statistics.mean(gaps) == pytest.approx(0.2, rel=0.06)
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, rel=0.08)
    again = tmp_path / "q.parquet"
    import_trace("sharegpt", src, again, ImportOptions(rate=5.0, seed=3))
    assert read_trace_table(again).column(s.ARRIVAL_S).to_pylist() == arrival
    assert read_metadata(out)["arrivals"] == "poisson rate=5.0/s seed=3"


def test_streaming_array_decoder_handles_chunk_boundaries(tmp_path: Path) -> None:
    values = [{"id": i, "text": "x" * (i % 7), "n": 10**i} for i in range(30)]
    src = tmp_path / "arr.json"
    src.write_text("[\n" + ",\n".join(json.dumps(v) for v in values) + "\n]\n")
    decoded = list(iter_json_array(src, chunk_chars=5))
    assert [v for _, v in decoded] == values
    assert [line for line, _ in decoded][:3] == [2, 3, 4]


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    src = tmp_path / "bad.json"
    src.write_text('[\n{"conversations": []},\n{"conversations": [}\n]')
    with pytest.raises(SourceError, match=r"bad\.json: line 3: invalid JSON"):
        import_trace("sharegpt", src, tmp_path / "o.parquet", ImportOptions())


def test_turn_without_text_names_the_column(tmp_path: Path) -> None:
    src = tmp_path / "bad.json"
    src.write_text('[{"conversations": [{"from": "human"}]}]')
    with pytest.raises(SourceError, match=r"line 1, column 'conversations'"):
        import_trace("sharegpt", src, tmp_path / "o.parquet", ImportOptions())


def _convo(cid: str, turns: int) -> dict[str, object]:
    msgs: list[dict[str, str]] = []
    for k in range(turns):
        msgs += [{"from": "human", "value": f"question {k}"}, {"from": "gpt", "value": "ok"}]
    return {"id": cid, "conversations": msgs}


def test_jsonl_and_openai_messages_are_read(tmp_path: Path) -> None:
    src = tmp_path / "sg.jsonl"
    lines = [
        json.dumps(_convo("a", 2)),
        "",
        json.dumps(
            {
                "id": "b",
                "messages": [
                    {"role": "user", "content": "one two"},
                    {"role": "assistant", "content": "three"},
                ],
            }
        ),
    ]
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o.parquet"
    import_trace("sharegpt", src, out, ImportOptions(turns="all"))
    rows = read_trace_table(out).to_pylist()
    assert [(r["session_id"], r["turn"]) for r in rows] == [("a", 0), ("a", 1), ("b", 0)]
    assert json.loads(rows[2]["messages"]) == [{"role": "user", "content": "one two"}]
    assert rows[2]["input_tokens"] == 2


def test_think_time_keeps_conversations_as_sessions(tmp_path: Path) -> None:
    src = tmp_path / "many.jsonl"
    src.write_text("".join(json.dumps(_convo(f"c{i}", 1 + i % 5)) + "\n" for i in range(400)))
    out = tmp_path / "s.parquet"
    import_trace(
        "sharegpt", src, out, ImportOptions(turns="all", rate=2.0, think_s=3.0, batch_rows=64)
    )
    rows = read_trace_table(out).to_pylist()
    assert len(rows) == sum(1 + i % 5 for i in range(400))
    arrivals = [r["arrival_s"] for r in rows]
    assert arrivals == sorted(arrivals)
    by_session: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        by_session.setdefault(r["session_id"], []).append((r["turn"], r["arrival_s"]))
    starts = sorted(v[0][1] for v in by_session.values())
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert statistics.mean(gaps) == pytest.approx(0.5, rel=0.12)  # sessions at --rate 2/s
    thinks = []
    for turns in by_session.values():
        assert [t for t, _ in turns] == list(range(len(turns)))  # turns in order
        thinks += [b[1] - a[1] for a, b in itertools.pairwise(turns)]
    assert statistics.mean(thinks) == pytest.approx(3.0, rel=0.12)
    # interleaved: some session's later turn comes after another session's start
    assert [r["session_id"] for r in rows] != sorted(
        (r["session_id"] for r in rows), key=lambda c: int(c[1:])
    )


def test_think_time_needs_all_turns(tmp_path: Path) -> None:
    with pytest.raises(ImportOptionError, match="--think-s needs --turns all"):
        import_trace(
            "sharegpt", DATA / "sharegpt.json", tmp_path / "o.parquet", ImportOptions(think_s=1.0)
        )
