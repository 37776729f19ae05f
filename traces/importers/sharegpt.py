"""ShareGPT conversations (JSON array) -> workload table of chat requests.

Source format (reference/traces.md §1.7; ``ShareGPT_V3_unfiltered_cleaned_split.json``)::

    [{"id": "...", "conversations": [{"from": "human", "value": "..."},
                                      {"from": "gpt", "value": "..."}, ...]}, ...]

* The file carries text only: no timestamps and no token counts.
* Arrivals are a Poisson process of ``--rate`` requests/s (default 1) drawn from
  ``--seed``: the first request at 0 s, then exponential gaps, in file order.
* Each request is a literal ``messages`` JSON string (roles ``human``->``user``,
  ``gpt``/``chatgpt``/``bard``->``assistant``, ``system`` kept) with ``api`` = chat.
  ``--turns first`` (default, as vLLM-style loaders do) makes one request per conversation
  from its first user turn and the reply after it; ``--turns all`` makes one request per
  user turn with the whole history before it, sharing a ``session_id`` (the conversation
  id) and numbered by ``turn``.
* Token counts are estimated from words: ``ceil(words * --tokens-per-word)``, at least 1
  (default 1.0, exact for the built-in simulator, which counts words; real BPE tokenizers
  give about 1.3 tokens per English word). The reply's length becomes ``output_tokens``.
* Conversations without a user turn followed by a non-empty reply are skipped and counted
  (``no_exchange``); those with an unknown speaker are skipped as ``unknown_role``.
* The file is decoded one conversation at a time (``parse.iter_json_array``).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pyarrow as pa

from traces import schema as s
from traces.importers.base import LINE_COLUMN, Importer, ImportOptions
from traces.importers.errors import SourceError
from traces.importers.parse import iter_json_array
from traces.importers.sink import TraceSink

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
    turns = entry.get("conversations")
    if not isinstance(turns, list):
        raise SourceError(
            where, line=line, column="conversations", problem="missing or not a list of turns"
        )
    out: list[dict[str, str]] = []
    for turn in turns:
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise SourceError(
                where, line=line, column="conversations", problem="a turn lacks a text 'value'"
            )
        role = ROLES.get(str(turn.get("from", "")).lower())
        if role is None:
            return None
        out.append({"role": role, "content": turn["value"]})
    return out


def read(path: Path, options: ImportOptions, sink: TraceSink) -> None:
    """Stream a ShareGPT JSON array into ``sink`` as chat requests with Poisson arrivals."""
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
            sink.add(
                pa.table(
                    {
                        s.REQUEST_ID: pa.array(cols["id"], pa.string()),
                        s.ARRIVAL_S: pa.array(cols["t"], pa.float64()),
                        s.INPUT_TOKENS: pa.array(cols["in"], pa.int64()),
                        s.OUTPUT_TOKENS: pa.array(cols["out"], pa.int64()),
                        s.MESSAGES: pa.array(cols["msgs"], pa.string()),
                        s.SESSION_ID: pa.array(cols["session"], pa.string()),
                        s.TURN: pa.array(cols["turn"], pa.int32()),
                        s.API: pa.array([s.API_CHAT] * len(cols["id"]), pa.string()),
                        LINE_COLUMN: pa.array(cols["line"], pa.int64()),
                    }
                )
            )
        cols.update({k: [] for k in keys})

    flush()
    clock = 0.0
    first = True
    for index, (line, entry) in enumerate(iter_json_array(path)):
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
            if not first:
                clock += rng.expovariate(rate)
            first = False
            cols["id"].append(f"{index}-{number}")
            cols["t"].append(clock)
            cols["in"].append(sum(_tokens(m["content"], per_word) for m in history))
            cols["out"].append(_tokens(messages[k + 1]["content"], per_word))
            cols["msgs"].append(json.dumps(history, ensure_ascii=False))
            cols["session"].append(conv_id if options.turns == "all" else None)
            cols["turn"].append(number if options.turns == "all" else None)
            cols["line"].append(line)
        if len(cols["id"]) >= options.batch_rows:
            flush()
            if sink.done:
                return
    flush()


IMPORTER = Importer(
    name="sharegpt",
    summary="ShareGPT JSON conversations -> chat messages, Poisson arrivals at --rate",
    read=read,
    options=frozenset({"rate", "seed", "tokens_per_word", "turns"}),
    source_columns={s.MESSAGES: "conversations"},
)
