"""AIPerf custom dataset files (``--custom-dataset-type single_turn`` / ``multi_turn``)
-> workload table of chat requests.

Source format, as NVIDIA's AIPerf documentation gives it (Custom Dataset Guide,
https://docs.nvidia.com/aiperf/v0.14.0/tutorials/datasets-inputs/custom-dataset-guide.md;
timestamps in ms per its Fixed Schedule page; delays between turns in ms per its Multi-Turn
Conversations page), one JSON object per line:

* ``single_turn``: ``{"text": "...", "output_length": 50}``, optionally ``timestamp`` (ms
  from the start) or ``delay`` (ms after the previous line's request);
* ``multi_turn``: ``{"session_id": "chat_1", "turns": [{"text": "..."}, ...]}``, each turn
  with the same optional ``timestamp``/``delay``/``output_length``. A leading text-only
  turn with ``"role": "system"`` and no dispatch field is the conversation's system prompt,
  sent before every turn and not a request of its own (as AIPerf hoists it).

Both kinds may be mixed in one file (a line with ``turns`` is a conversation). Mapping:

* one request per turn, ``api`` = chat, a literal ``messages`` JSON string: the system
  prompt (if any) and the user text of every turn so far. The file carries no replies, so
  under ``--history trace`` the earlier user turns are sent back to back; ``replay
  --sessions closed --history live`` puts the server's replies between them, as AIPerf does.
* ``session_id`` (a single-turn line has none), ``turn`` from 0, ``parent`` the previous
  turn's request id, ``think_s`` a turn's ``delay`` in seconds (null on first turns and on
  turns without a ``delay`` or placed by ``timestamp``; null reads as 0). Request ids are
  ``LINE`` or ``LINE-TURN``.
* ``arrival_s``: a line's or turn's ``timestamp`` / 1000 when given; otherwise the previous
  arrival (the previous line's, or for a later turn its predecessor's) plus ``delay`` / 1000
  (0 without one). Later turns are merged into arrival order with a heap that holds only
  turns not yet due, so session starts must be in file order (else ``--sort-window``).
* ``input_tokens``: ``ceil(words * --tokens-per-word)`` summed over the messages, at least 1
  (as the ShareGPT and dataset importers estimate); ``output_tokens``: ``output_length``,
  else ``--output-tokens`` (default 256).
* Fields not mapped (``extra``, ``image``/``images`` and other media) are ignored; the
  count of lines carrying media is recorded in provenance (``media_ignored``).

AIPerf's conversation-DAG files (``dag_jsonl``, FORK/SPAWN) are read by ``aiperf_dag``.
Imports ``traces`` and the standard library only (plus pyarrow).
"""

from __future__ import annotations

import heapq
import json
import math
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from traces import schema as s
from traces.importers.base import LINE_COLUMN, Importer, ImportOptions
from traces.importers.errors import SourceError
from traces.importers.parse import iter_jsonl
from traces.importers.sink import TraceSink

DEFAULT_OUTPUT_TOKENS: Final = 256
MEDIA_FIELDS: Final = ("image", "images", "audio", "audios", "video", "videos")
DISPATCH_FIELDS: Final = ("timestamp", "delay", "output_length", "extra")
KEYS: Final = (
    "id", "t", "in", "out", "msgs", "session", "turn", "parent", "think", "line", "branch", "tools",
)  # fmt: skip

Row = tuple[Any, ...]


def _tokens(text: str, per_word: float) -> int:
    return max(1, math.ceil(len(text.split()) * per_word))


class _Line:
    """Field checks of one source line, naming the line and field on error."""

    def __init__(self, where: str, line: int) -> None:
        self.where = where
        self.line = line

    def fail(self, column: str | None, problem: str) -> SourceError:
        return SourceError(self.where, line=self.line, column=column, problem=problem)

    def text(self, obj: dict[str, Any], field: str) -> str:
        value = obj.get("text")
        if not isinstance(value, str):
            raise self.fail(field, "expected a 'text' string")
        return value

    def ms(self, obj: dict[str, Any], key: str, field: str) -> float | None:
        value = obj.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(field, f"expected milliseconds (a number), got {value!r}")
        if not (math.isfinite(value) and value >= 0):
            raise self.fail(field, f"must be >= 0 milliseconds, got {value!r}")
        return float(value) / 1000.0

    def output(self, obj: dict[str, Any], field: str, default: int) -> int:
        value = obj.get("output_length")
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(field, f"expected a positive integer, got {value!r}")
        return value


def _is_system_prompt(turn: Any) -> bool:
    return (
        isinstance(turn, dict)
        and turn.get("role") == "system"
        and isinstance(turn.get("text"), str)
        and not any(k in turn for k in (*DISPATCH_FIELDS, *MEDIA_FIELDS))
    )


def read(path: Path, options: ImportOptions, sink: TraceSink) -> None:
    """Stream AIPerf single_turn / multi_turn lines into ``sink`` as chat requests."""
    where = path.name
    per_word = options.tokens_per_word
    default_out = options.output_tokens or DEFAULT_OUTPUT_TOKENS
    sink.note("token_estimate", f"ceil(words*{per_word})")
    batch: list[Row] = []
    pending: list[tuple[float, int, Row]] = []  # later turns, by arrival
    seq = 0
    clock = 0.0
    media = 0

    def flush() -> None:
        if batch:
            sink.add(batch_table(batch))
        batch.clear()

    def emit(row: Row) -> None:
        batch.append(row)

    def release(until: float) -> None:
        while pending and pending[0][0] <= until:
            emit(heapq.heappop(pending)[2])

    for line, entry in iter_jsonl(path):
        check = _Line(where, line)
        if not isinstance(entry, dict):
            raise check.fail(None, "expected a JSON object (single_turn or multi_turn line)")
        media += any(k in entry for k in MEDIA_FIELDS)
        turns = entry.get("turns")
        if turns is None:
            if "text" not in entry:
                raise check.fail(None, "expected 'text' (single_turn) or 'turns' (multi_turn)")
            turns, session = [entry], None
        else:
            if not isinstance(turns, list) or not turns:
                raise check.fail("turns", "expected a non-empty list of turns")
            raw = entry.get("session_id", f"line-{line}")
            if not isinstance(raw, str | int) or isinstance(raw, bool):
                raise check.fail("session_id", f"expected a string, got {raw!r}")
            session = str(raw)
        history: list[dict[str, str]] = []
        if session is not None and len(turns) > 1 and _is_system_prompt(turns[0]):
            history.append({"role": "system", "content": turns[0]["text"]})
            turns = turns[1:]
        when = clock
        parent: str | None = None
        for number, turn in enumerate(turns):
            field = "text" if session is None else f"turns[{number}]"
            if not isinstance(turn, dict):
                raise check.fail(field, "expected a turn object")
            media += session is not None and any(k in turn for k in MEDIA_FIELDS)
            text = check.text(turn, field if session is None else f"{field}.text")
            stamp = check.ms(turn, "timestamp", f"{field}.timestamp".removeprefix("text."))
            delay = check.ms(turn, "delay", f"{field}.delay".removeprefix("text."))
            out = check.output(turn, f"{field}.output_length".removeprefix("text."), default_out)
            role = turn.get("role", "user") if session is not None else "user"
            history.append({"role": str(role), "content": text})
            when = stamp if stamp is not None else when + (delay or 0.0)
            rid = str(line) if session is None else f"{line}-{number}"
            row: Row = (
                rid,
                when,
                sum(_tokens(m["content"], per_word) for m in history),
                out,
                json.dumps(history, ensure_ascii=False),
                session,
                None if session is None else number,
                parent,
                delay if number > 0 and stamp is None else None,
                line,
            )
            parent = rid
            if number == 0:
                clock = when
                release(when)
                emit(row)
            else:
                seq += 1
                heapq.heappush(pending, (when, seq, row))
        if len(batch) >= options.batch_rows:
            flush()
            if sink.done:
                return
    release(math.inf)
    flush()
    if media:
        sink.note("media_ignored", media)


def batch_table(rows: list[Row]) -> pa.Table:
    """One batch of rows, each a tuple in ``KEYS`` order (``branch`` and ``tools`` optional)."""
    n = len(rows)
    padded = [(*r, *(None,) * (len(KEYS) - len(r))) for r in rows]
    by: dict[str, Any] = {k: [r[i] for r in padded] for i, k in enumerate(KEYS)}
    return pa.table(
        {
            s.REQUEST_ID: pa.array(by["id"], pa.string()),
            s.ARRIVAL_S: pa.array(by["t"], pa.float64()),
            s.INPUT_TOKENS: pa.array(by["in"], pa.int64()),
            s.OUTPUT_TOKENS: pa.array(by["out"], pa.int64()),
            s.MESSAGES: pa.array(by["msgs"], pa.string()),
            s.API: pa.array([s.API_CHAT] * n, pa.string()),
            s.SESSION_ID: pa.array(by["session"], pa.string()),
            s.TURN: pa.array(by["turn"], pa.int32()),
            s.PARENT: pa.array(by["parent"], pa.string()),
            s.THINK_S: pa.array(by["think"], pa.float32()),
            s.BRANCH: pa.array(by["branch"], pa.string()),
            s.TOOLS: pa.array(by["tools"], pa.string()),
            LINE_COLUMN: pa.array(by["line"], pa.int64()),
        }
    )


IMPORTER = Importer(
    name="aiperf",
    summary="AIPerf single_turn/multi_turn JSONL -> chat sessions (timestamp/delay in ms)",
    read=read,
    options=frozenset({"tokens_per_word", "output_tokens"}),
    source_columns={s.MESSAGES: "text", s.OUTPUT_TOKENS: "output_length"},
)
