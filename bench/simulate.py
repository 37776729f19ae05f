"""How long ``loadgen simulate`` takes on 10,000 requests of a Mooncake-format trace.

One command::

    .venv/bin/python bench/simulate.py [--requests 10000] [--replicas 1] [--source JSONL] [--json F]

Builds a Mooncake-format JSONL (``timestamp`` ms, ``input_length``, ``output_length``,
``hash_ids``) of ``--requests`` rows by tiling a source file one copy after the other
(later copies shifted in time, their hash ids made distinct except block 0, the shared
system prompt): by default the first 2,000 rows of Mooncake's conversation trace if
``../shared/traces-samples`` has them, else a seeded synthetic stand-in with its shape
(prompts lognormal around 8k tokens, outputs around 350, about 3 req/s). Imports it with
the Mooncake importer, then times the offline engine (``loadgen.sim.offline.engine.simulate``,
llama-3.1-8b on H100s) in this process, on one core. Prints the wall time, the engine
steps and requests per second of wall time; the target is 10 s or less.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from loadgen.sim.config import EngineConfig
from loadgen.sim.offline.engine import OfflineLoad, simulate
from traces.importers.base import ImportOptions
from traces.importers.registry import import_trace
from traces.io import read_trace

TARGET_S = 10.0
_SAMPLE = (
    Path(__file__).resolve().parents[2]
    / "shared/traces-samples/mooncake/conversation_trace.head2000.jsonl"
)


def _rows(source: Path | None) -> list[dict[str, Any]]:
    if source is not None and source.exists():
        return [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    rng = random.Random(7)
    rows: list[dict[str, Any]] = []
    t, next_id = 0.0, 1
    for _ in range(2000):
        t += rng.expovariate(3.0)
        n_in = max(16, int(rng.lognormvariate(9.0, 0.7)))
        blocks = -(-n_in // 512)
        ids = [0, *range(next_id, next_id + blocks - 1)]
        next_id += blocks - 1
        rows.append(
            {
                "timestamp": int(t * 1000),
                "input_length": n_in,
                "output_length": max(1, int(rng.lognormvariate(5.8, 0.5))),
                "hash_ids": ids,
            }
        )
    return rows


def _tiled(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    span = max(int(r["timestamp"]) for r in rows) + 1000
    top = max(max(r["hash_ids"]) for r in rows if r["hash_ids"]) + 1
    out: list[dict[str, Any]] = []
    copy = 0
    while len(out) < n:
        for row in rows[: n - len(out)]:
            ids = [h if h == 0 else h + copy * top for h in row["hash_ids"]]
            out.append({**row, "timestamp": int(row["timestamp"]) + copy * span, "hash_ids": ids})
        copy += 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--source", type=Path, default=_SAMPLE)
    parser.add_argument("--json", type=Path, default=None, help="Also write the figures here.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = Path(tmp) / "mooncake.jsonl"
        rows = _tiled(_rows(args.source), args.requests)
        jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
        trace = Path(tmp) / "trace.parquet"
        import_trace("mooncake", jsonl, trace, ImportOptions())
        requests = read_trace(trace)
    source = args.source.name if args.source.exists() else "synthetic stand-in"
    engine = EngineConfig(model="llama-3.1-8b", gpu="h100", replicas=args.replicas)
    started, cpu0 = time.perf_counter(), time.process_time()
    result = simulate(requests, engine, OfflineLoad(), run_id="bench")
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu0
    tokens = sum(r.completion_tokens or 0 for r in result.records)
    verdict = "ok" if wall <= TARGET_S else "over target"
    print(
        f"simulate: {len(requests):,} requests of {source} (Mooncake format), "
        f"{args.replicas} x llama-3.1-8b on h100: {wall:.2f} s wall ({cpu:.2f} s CPU), "
        f"{result.steps:,} steps, {tokens:,} output tokens, "
        f"{(result.end_ns - result.start_ns) / 1e9:,.0f} s simulated; "
        f"{len(requests) / wall:,.0f} req/s; target <= {TARGET_S:g} s: {verdict}"
    )
    if args.json is not None:
        doc = {
            "requests": len(requests),
            "served": sum(1 for r in result.records if r.outcome == "ok"),
            "wall_s": wall,
            "cpu_s": cpu,
            "steps": result.steps,
            "output_tokens": tokens,
            "target_s": TARGET_S,
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
