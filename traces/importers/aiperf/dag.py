"""AIPerf conversation-DAG files (``--custom-dataset-type dag_jsonl``) -> branching chat
sessions (``parent`` + ``branch`` fork/spawn).

Source format, as AIPerf's documentation gives it ("DAG Benchmarks: Branching
Conversations", https://docs.nvidia.com/aiperf/latest/benchmark-modes/conversation-dag-benchmarks.md):
one conversation per line, ``{"session_id": ..., "turns": [...]}``; a turn has ``messages``
(OpenAI chat messages, appended to the session's history), optional ``max_tokens``,
``tools``, ``extra``, ``delay`` (ms before the turn), and the structural keys ``forks``
(children that continue this turn's history: ids, or ``{"child": id, "background": true}``)
and ``spawns`` (children that start fresh: ids, or ``{"children": [...], "join_at": k}``).

Mapping: sessions referenced by no ``forks``/``spawns`` are roots, each starting at 0 s
plus its first turn's delay. Every turn is one chat request with literal ``messages`` (the
session's authored messages so far; a fork child's start with its parent turn's), ``parent``
the previous turn (``think_s`` = its ``delay`` / 1000) or, on a child's first turn, the
forking/spawning turn with ``branch`` = fork/spawn. A spawn target named by several parents
is one session per mention (``ID``, ``ID#2``, ...). Arrivals are the parent's arrival plus
the delay (the file has no reply times; ``replay --sessions closed`` waits for replies).
``input_tokens`` are words of the message texts (``--tokens-per-word``); ``output_tokens``
is ``max_tokens``, else ``--output-tokens`` (default 256); ``tools`` is kept.

Not represented: replies (the file has none), SPAWN joins (a gated turn waits only for its
own previous turn), ``extra``. Orchestrator conversations (``orchestrator``, ``rounds``),
``pre_session_spawns`` and ``context_mode`` are rejected with the line. The conversation
structure is held in memory (DAG files are authored, small); rows are written in batches.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from traces import schema as s
from traces.importers.aiperf.custom import DEFAULT_OUTPUT_TOKENS, batch_table
from traces.importers.base import Importer, ImportOptions
from traces.importers.errors import SourceError
from traces.importers.parse import iter_jsonl
from traces.importers.sink import TraceSink

UNSUPPORTED: Final = ("orchestrator", "rounds", "pre_session_spawns", "context_mode")


@dataclass(frozen=True, slots=True)
class _Conv:
    line: int
    turns: list[dict[str, Any]]


def _children(turn: dict[str, Any], key: str, fail: Any) -> list[str]:
    out: list[str] = []
    for item in turn.get(key) or []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict) and isinstance(item.get("child"), str):
            out.append(item["child"])
        elif isinstance(item, dict) and isinstance(item.get("children"), list):
            out.extend(str(c) for c in item["children"])
        else:
            raise fail(key, f"expected session ids, got {item!r}")
    return out


def _words(messages: list[dict[str, Any]], per_word: float) -> int:
    total = 0
    for m in messages:
        content = m.get("content")
        parts = [content] if isinstance(content, str) else content or []
        for p in parts:
            text = p if isinstance(p, str) else p.get("text") if isinstance(p, dict) else None
            if isinstance(text, str):
                total += max(1, math.ceil(len(text.split()) * per_word))
    return max(1, total)


def _load(path: Path) -> dict[str, _Conv]:
    convs: dict[str, _Conv] = {}
    for line, entry in iter_jsonl(path):

        def fail(column: str | None, problem: str, line: int = line) -> SourceError:
            return SourceError(path.name, line=line, column=column, problem=problem)

        if not isinstance(entry, dict):
            raise fail(None, "expected a conversation object")
        for key in UNSUPPORTED:
            if key in entry:
                raise fail(key, "not supported by this importer (see docs/traces.md)")
        sid = entry.get("session_id")
        if not isinstance(sid, str) or not sid:
            raise fail("session_id", "missing or not a string")
        if sid in convs:
            raise fail("session_id", f"duplicate session_id {sid!r}")
        turns = entry.get("turns")
        if not isinstance(turns, list) or not turns:
            raise fail("turns", "expected a non-empty list of turns")
        for k, turn in enumerate(turns):
            where = f"turns[{k}]"
            if not isinstance(turn, dict):
                raise fail(where, "expected a turn object")
            msgs = turn.get("messages")
            if (
                not isinstance(msgs, list)
                or not msgs
                or not all(isinstance(m, dict) and "role" in m for m in msgs)
            ):
                raise fail(f"{where}.messages", "expected a non-empty list of messages with roles")
            delay = turn.get("delay", 0)
            if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
                raise fail(f"{where}.delay", f"expected milliseconds >= 0, got {delay!r}")
            out = turn.get("max_tokens")
            if out is not None and (isinstance(out, bool) or not isinstance(out, int) or out <= 0):
                raise fail(f"{where}.max_tokens", f"expected a positive integer, got {out!r}")
            _children(turn, "forks", fail)
            _children(turn, "spawns", fail)
        convs[sid] = _Conv(line=line, turns=turns)
    return convs


def read(path: Path, options: ImportOptions, sink: TraceSink) -> None:
    """Read the DAG file, unfold every tree from its roots and write the turns by arrival."""
    convs = _load(path)
    per_word = options.tokens_per_word
    default_out = options.output_tokens or DEFAULT_OUTPUT_TOKENS
    sink.note("token_estimate", f"ceil(words*{per_word})")
    named = {
        c
        for conv in convs.values()
        for turn in conv.turns
        for key in ("forks", "spawns")
        for c in _children(turn, key, None)
    }
    rows: list[tuple[float, int, tuple[Any, ...]]] = []
    uses: dict[str, int] = {}

    def unfold(
        sid: str,
        seed: list[dict[str, Any]],
        at: float,
        parent: str | None,
        branch: str | None,
        path_ids: tuple[str, ...],
        ref_line: int | None = None,
    ) -> None:
        conv = convs.get(sid)
        if conv is None:
            raise SourceError(
                path.name, line=ref_line, column="forks/spawns", problem=f"unknown session {sid!r}"
            )
        if sid in path_ids:
            raise SourceError(
                path.name,
                line=conv.line,
                column="forks/spawns",
                problem="cycle: " + " -> ".join((*path_ids, sid)),
            )
        uses[sid] = uses.get(sid, 0) + 1
        session = sid if uses[sid] == 1 else f"{sid}#{uses[sid]}"
        history = list(seed)
        for k, turn in enumerate(conv.turns):
            delay = float(turn.get("delay", 0)) / 1000.0
            at += delay
            history.extend(turn["messages"])
            rid = f"{session}:{k}"
            tools = turn.get("tools")
            row = (
                rid, at, _words(history, per_word), turn.get("max_tokens") or default_out,
                json.dumps(history, ensure_ascii=False), session, k, parent,
                delay if parent is not None and delay > 0 else None, conv.line,
                branch if k == 0 else None,
                json.dumps(tools, ensure_ascii=False) if tools else None,
            )  # fmt: skip
            rows.append((at, len(rows), row))
            for child in _children(turn, "forks", None):
                unfold(child, history, at, rid, s.BRANCH_FORK, (*path_ids, sid), conv.line)
            for child in _children(turn, "spawns", None):
                unfold(child, [], at, rid, s.BRANCH_SPAWN, (*path_ids, sid), conv.line)
            parent = rid
            branch = None

    for sid in convs:
        if sid not in named:
            unfold(sid, [], 0.0, None, None, ())
    rows.sort(key=lambda r: (r[0], r[1]))
    for start in range(0, len(rows), options.batch_rows):
        sink.add(batch_table([r[2] for r in rows[start : start + options.batch_rows]]))
        if sink.done:
            return


IMPORTER = Importer(
    name="aiperf_dag",
    summary="AIPerf dag_jsonl conversations -> fork/spawn branching chat sessions",
    read=read,
    options=frozenset({"tokens_per_word", "output_tokens"}),
    source_columns={s.MESSAGES: "messages", s.OUTPUT_TOKENS: "max_tokens"},
)
