"""Any locally saved dataset (Parquet or JSONL, e.g. a Hugging Face dataset written with
``to_parquet``/``to_json``) -> workload table, through a column mapping.

``--map TARGET=COLUMN,...`` names which source column feeds which trace field:

* ``prompt``: the user message text (rows become chat ``messages``, ``api=chat``);
  ``system``: an optional system message text put before it;
* ``output``: the reference answer text, whose length becomes ``output_tokens``;
* ``input_tokens`` / ``output_tokens``: integer lengths, used as given (without ``prompt``
  the rows carry no text and use ``api=completions``, like the token-only traces);
* ``arrival_s``: seconds (without it, arrivals are Poisson at ``--rate``, first at 0 s);
* ``session_id`` and ``turn``: passed through.

A prompt (text or ``input_tokens``) and an output (text or ``output_tokens``) are required.
Text lengths are ``ceil(words * --tokens-per-word)``, at least 1, as for ShareGPT. Rows whose
prompt or output text is missing or blank are skipped (``empty_prompt``, ``no_output``).

PATH is a ``.parquet`` file, a ``.jsonl``/``.json`` file of one object per line, or a
directory of ``.parquet`` shards (read in name order, as ``datasets`` names them). Parquet is
read in record batches of the mapped columns only; a row's "line" in error messages is its
1-based row number across the shards. Imports pyarrow and ``traces`` only.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

from traces import schema as s
from traces.errors import TraceFileError
from traces.importers.base import Importer, ImportOptions
from traces.importers.errors import ImportOptionError, SourceError
from traces.importers.parse import iter_jsonl
from traces.importers.sink import TraceSink, message_batch

TEXT_TARGETS: Final = ("prompt", "system", "output", "session_id")
INT_TARGETS: Final = ("input_tokens", "output_tokens", "turn")
FLOAT_TARGETS: Final = ("arrival_s",)
TARGETS: Final = (*TEXT_TARGETS, *INT_TARGETS, *FLOAT_TARGETS)
DEFAULT_RATE: Final = 1.0


def parse_mapping(text: str) -> tuple[tuple[str, str], ...]:
    """``"prompt=question,output=answer"`` -> ((target, column), ...); ImportOptionError
    naming the bad part."""
    pairs: list[tuple[str, str]] = []
    for part in (p.strip() for p in text.split(",")):
        target, sep, column = part.partition("=")
        target, column = target.strip(), column.strip()
        if not sep or not target or not column:
            raise ImportOptionError(f"--map expects TARGET=COLUMN pairs, got {part!r}")
        if target not in TARGETS:
            raise ImportOptionError(
                f"--map: unknown target {target!r} (known: {', '.join(TARGETS)})"
            )
        if target in (t for t, _ in pairs):
            raise ImportOptionError(f"--map names {target!r} twice")
        pairs.append((target, column))
    return tuple(pairs)


def _check_mapping(mapping: Mapping[str, str]) -> None:
    if not mapping:
        raise ImportOptionError("format 'dataset' needs --map TARGET=COLUMN,... (see --help)")
    if "prompt" not in mapping and "input_tokens" not in mapping:
        raise ImportOptionError("--map needs prompt=COLUMN or input_tokens=COLUMN")
    if "output" not in mapping and "output_tokens" not in mapping:
        raise ImportOptionError("--map needs output=COLUMN or output_tokens=COLUMN")
    if "system" in mapping and "prompt" not in mapping:
        raise ImportOptionError("--map system=COLUMN needs prompt=COLUMN")


def _parquet_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".parquet")
        if not files:
            raise TraceFileError(f"{path}: no .parquet files in this directory")
        return files
    return [path]


def _rows(path: Path, mapping: Mapping[str, str], batch_rows: int) -> Iterator[tuple[int, Any]]:
    """(1-based line or row number, row object) of the source, streaming."""
    if not path.exists():
        raise TraceFileError(f"{path}: no such file")
    if path.is_dir() or path.suffix == ".parquet":
        columns = sorted(set(mapping.values()))
        number = 0
        for file in _parquet_files(path):
            try:
                pf = pq.ParquetFile(file)
            except (pa.ArrowInvalid, OSError) as exc:
                raise TraceFileError(f"{file}: not a readable Parquet file ({exc})") from exc
            names = pf.schema_arrow.names
            missing = [c for c in columns if c not in names]
            if missing:
                raise SourceError(
                    file.name,
                    line=None,
                    column=missing[0],
                    problem=f"no such column (columns: {', '.join(names)})",
                )
            for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
                for row in batch.to_pylist():
                    number += 1
                    yield number, row
        return
    if path.suffix not in (".jsonl", ".json", ".ndjson"):
        raise TraceFileError(f"{path}: expected a .parquet or .jsonl file, or a directory")
    yield from iter_jsonl(path)


def _value(row: Any, target: str, column: str, where: str, line: int) -> Any:
    if not isinstance(row, dict):
        raise SourceError(where, line=line, column=None, problem="expected a JSON object")
    if column not in row:
        raise SourceError(where, line=line, column=column, problem="missing")
    value = row[column]
    if value is None:
        return None
    if target in TEXT_TARGETS:
        return value if isinstance(value, str) else str(value)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if target in INT_TARGETS and not (ok and float(value).is_integer()):
        raise SourceError(where, line=line, column=column, problem=f"not an integer: {value!r}")
    if not ok:
        raise SourceError(where, line=line, column=column, problem=f"not a number: {value!r}")
    return int(value) if target in INT_TARGETS else float(value)


def _tokens(text: str, per_word: float) -> int:
    return max(1, math.ceil(len(text.split()) * per_word))


def read(path: Path, options: ImportOptions, sink: TraceSink) -> None:
    """Stream a local dataset into ``sink`` through ``options.columns``."""
    mapping = dict(options.columns)
    _check_mapping(mapping)
    where = path.name
    per_word = options.tokens_per_word
    rate = options.rate or DEFAULT_RATE
    rng = random.Random(options.seed)
    timed = "arrival_s" in mapping
    sink.note("column_map", mapping)
    if not timed:
        sink.note("arrivals", f"poisson rate={rate}/s seed={options.seed}")
    if "prompt" in mapping or "output" in mapping:
        sink.note("token_estimate", f"ceil(words*{per_word})")
    keys = ("id", "t", "in", "out", "msgs", "api", "session", "turn", "line")
    cols: dict[str, list[Any]] = {k: [] for k in keys}

    def flush() -> None:
        if cols["id"]:
            sink.add(message_batch(cols, cols["api"]))
        for k in keys:
            cols[k] = []

    clock = 0.0
    kept = 0
    for line, row in _rows(path, mapping, options.batch_rows):
        v = {t: _value(row, t, c, where, line) for t, c in mapping.items()}
        prompt, output = v.get("prompt"), v.get("output")
        if "prompt" in mapping and (prompt is None or not prompt.strip()):
            sink.skip("empty_prompt")
            continue
        if "output_tokens" not in mapping and (output is None or not output.strip()):
            sink.skip("no_output")
            continue
        messages = None
        if prompt is not None:
            msgs = [{"role": "user", "content": prompt}]
            if v.get("system"):
                msgs.insert(0, {"role": "system", "content": v["system"]})
            messages = json.dumps(msgs, ensure_ascii=False)
        n_in = v.get("input_tokens")
        if n_in is None:
            if messages is None:
                sink.skip("empty_prompt")
                continue
            n_in = sum(_tokens(m["content"], per_word) for m in json.loads(messages))
        n_out = v.get("output_tokens")
        if n_out is None:
            if output is None or not output.strip():
                sink.skip("no_output")
                continue
            n_out = _tokens(output, per_word)
        if timed:
            if v["arrival_s"] is None:
                raise SourceError(where, line=line, column=mapping["arrival_s"], problem="missing")
            when = v["arrival_s"]
        else:
            if kept:
                clock += rng.expovariate(rate)
            when = clock
        cols["id"].append(str(kept))
        cols["t"].append(when)
        cols["in"].append(n_in)
        cols["out"].append(n_out)
        cols["msgs"].append(messages)
        cols["api"].append(s.API_CHAT if messages is not None else s.API_COMPLETIONS)
        cols["session"].append(v.get("session_id"))
        cols["turn"].append(v.get("turn"))
        cols["line"].append(line)
        kept += 1
        if len(cols["id"]) >= options.batch_rows:
            flush()
            if sink.done:
                return
    flush()


IMPORTER = Importer(
    name="dataset",
    summary="A local Parquet/JSONL dataset through --map TARGET=COLUMN,...",
    read=read,
    options=frozenset({"columns", "rate", "seed", "tokens_per_word"}),
    source_columns={},
)
