"""ShareGPT conversations (JSON array or JSONL) -> workload table of chat requests.

Source format (reference/traces.md §1.7; ``ShareGPT_V3_unfiltered_cleaned_split.json``)::

    [{"id": "...", "conversations": [{"from": "human", "value": "..."},
                                      {"from": "gpt", "value": "..."}, ...]}, ...]

or the same objects one per line (JSONL, as Hugging Face exports write them); the file's
first non-blank character tells which (``[`` array, ``{`` JSONL). Turns given as OpenAI
``messages`` (``{"role": ..., "content": ...}``) under ``conversations`` or ``messages`` are
accepted too.

* The file carries text only: no timestamps and no token counts.
* Arrivals are a Poisson process of ``--rate`` requests/s (default 1) drawn from
  ``--seed``: the first request at 0 s, then exponential gaps, in file order.
* Each request is a literal ``messages`` JSON string (roles ``human``->``user``,
  ``gpt``/``chatgpt``/``bard``->``assistant``, ``system`` kept) with ``api`` = chat.
  ``--turns first`` (default, as vLLM-style loaders do) makes one request per conversation
  from its first user turn and the reply after it; ``--turns all`` makes one request per
  user turn with the whole history before it, sharing a ``session_id`` (the conversation
  id) and numbered by ``turn``.
* ``--think-s MEAN`` (with ``--turns all``) keeps each conversation a session in time:
  conversations start as the Poisson process above and each later turn follows the one
  before by an exponential think time of mean MEAN seconds (0: at once), as
  ``traces.synth.sessions`` spaces synthetic turns; rows from overlapping sessions are
  merged by arrival with a heap that holds only turns not yet due (bounded by the sessions
  in flight). Without it every request is one Poisson arrival, turns in file order.
* Token counts are estimated from words: ``ceil(words * --tokens-per-word)``, at least 1
  (default 1.0, exact for the built-in simulator, which counts words; real BPE tokenizers
  give about 1.3 tokens per English word). The reply's length becomes ``output_tokens``.
* Conversations without a user turn followed by a non-empty reply are skipped and counted
  (``no_exchange``); those with an unknown speaker are skipped as ``unknown_role``.
* The file is decoded one conversation at a time (``parse.iter_json_array``).
"""

from __future__ import annotations

import heapq
import json
import math
import random
from pathlib import Path
from typing import Any

from traces import schema as s
from traces.importers.base import Importer, ImportOptions
from traces.importers.errors import ImportOptionError, SourceError
from traces.importers.parse import check_source, iter_json_array, iter_jsonl
from traces.importers.sink import TraceSink, message_batch

ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "assistant": "assistant",
    "system": "system",
}
DEFAULT_RATE = 1.0


def _tokens(text: str, per_word: float) -> int:
    return max(1, math.ceil(len(text.split()) * per_word))


def _messages(entry: Any, where: str, line: int) -> list[dict[str, str]] | None:
    """The conversation as OpenAI messages, or None when a speaker is unknown."""
    if not isinstance(entry, dict):
        raise SourceError(where, line=line, column=None, problem="expected a conversation object")
    turns = entry.get("conversations", entry.get("messages"))
    if not isinstance(turns, list):
        raise SourceError(
            where, line=line, column="conversations", problem="missing or not a list of turns"
        )
    out: list[dict[str, str]] = []
    for turn in turns:
        text = turn.get("value", turn.get("content")) if isinstance(turn, dict) else None
        if not isinstance(text, str):
            raise SourceError(
                where, line=line, column="conversations", problem="a turn lacks a text 'value'"
            )
        role = ROLES.get(str(turn.get("from", turn.get("role", ""))).lower())
        if role is None:
            return None
        out.append({"role": role, "content": text})
    return out


def _is_jsonl(path: Path) -> bool:
    """True when the first non-blank character is ``{`` (one object per line)."""
    check_source(path)
    with path.open(encoding="utf-8", errors="replace") as fh:
        while chunk := fh.read(4096):
            stripped = chunk.lstrip()
            if stripped:
                return stripped[0] == "{"
    return False


def read(path: Path, options: ImportOptions, sink: TraceSink) -> None:
    """Stream ShareGPT conversations into ``sink`` as chat requests with Poisson arrivals."""
    where = path.name
    rate = options.rate or DEFAULT_RATE
    rng = random.Random(options.seed)
    sink.note("arrivals", f"poisson rate={rate}/s seed={options.seed}")
    sink.note("token_estimate", f"ceil(words*{options.tokens_per_word})")
    per_word = options.tokens_per_word
    cols: dict[str, list[Any]] = {}
    keys = ("id", "t", "in", "out", "msgs", "session", "turn", "line")

    def flush() -> None:
        if cols.get("id"):
            sink.add(message_batch(cols, [s.API_CHAT] * len(cols["id"])))
        cols.update({k: [] for k in keys})

    flush()
    think = options.think_s
    if think is not None and options.turns != "all":
        raise ImportOptionError("--think-s needs --turns all (it spaces a conversation's turns)")
    if think is not None:
        sink.note("sessions", f"starts poisson rate={rate}/s, think exponential mean={think} s")
    think_rng = random.Random(f"sharegpt-think:{options.seed}")
    pending: list[tuple[float, int, tuple[Any, ...]]] = []  # later turns, by arrival
    seq = 0

    def emit(row: tuple[Any, ...]) -> None:
        for key, value in zip(keys, row, strict=True):
            cols[key].append(value)

    def release(until: float) -> None:
        while pending and pending[0][0] <= until:
            emit(heapq.heappop(pending)[2])

    clock = 0.0
    first = True
    entries = iter_jsonl(path) if _is_jsonl(path) else iter_json_array(path)
    for index, (line, entry) in enumerate(entries):
        messages = _messages(entry, where, line)
        if messages is None:
            sink.skip("unknown_role")
            continue
        conv_id = str(entry.get("id", index))
        exchanges = [
            k
            for k in range(len(messages) - 1)
            if messages[k]["role"] == "user"
            and messages[k + 1]["role"] == "assistant"
            and messages[k + 1]["content"].strip()
        ]
        if options.turns == "first":
            exchanges = exchanges[:1]
        if not exchanges:
            sink.skip("no_exchange")
            continue
        for number, k in enumerate(exchanges):
            history = messages[: k + 1]
            if think is None or number == 0:
                if not first:
                    clock += rng.expovariate(rate)
                first = False
                when = clock
                release(when)
            else:
                when += think_rng.expovariate(1.0 / think) if think > 0 else 0.0
            row = (
                f"{index}-{number}",
                when,
                sum(_tokens(m["content"], per_word) for m in history),
                _tokens(messages[k + 1]["content"], per_word),
                json.dumps(history, ensure_ascii=False),
                conv_id if options.turns == "all" else None,
                number if options.turns == "all" else None,
                line,
            )
            if think is None or number == 0:
                emit(row)
            else:
                seq += 1
                heapq.heappush(pending, (when, seq, row))
        if len(cols["id"]) >= options.batch_rows:
            flush()
            if sink.done:
                return
    release(math.inf)
    flush()


IMPORTER = Importer(
    name="sharegpt",
    summary="ShareGPT JSON/JSONL conversations -> chat messages, Poisson arrivals at --rate",
    read=read,
    options=frozenset({"rate", "seed", "tokens_per_word", "turns", "think_s"}),
    source_columns={s.MESSAGES: "conversations"},
)
