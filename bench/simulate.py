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

``--baseline DIR`` (a source tree of other code, e.g. ``git worktree add /tmp/base main``)
also times that tree's engine on the same trace, in ``--pairs`` interleaved pairs of
child processes (baseline, then this tree), and prints both, the baseline/this CPU ratio
(median of the pairs' ratios) and whether the two gave the same rows: a comparison made
in one run on one machine state, which a shared machine's load otherwise spoils.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
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


def _trace(tmp: Path, requests: int, source: Path) -> Path:
    """The tiled Mooncake-format JSONL of ``requests`` rows, imported to a trace file."""
    jsonl = tmp / "mooncake.jsonl"
    rows = _tiled(_rows(source), requests)
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trace = tmp / "trace.parquet"
    import_trace("mooncake", jsonl, trace, ImportOptions())
    return trace


def _timed(trace: Path, replicas: int) -> dict[str, Any]:
    """Simulate ``trace`` with the ``loadgen`` this process imports: its figures and a
    digest of the rows (equal digests: equal rows)."""
    requests = read_trace(trace)
    engine = EngineConfig(model="llama-3.1-8b", gpu="h100", replicas=replicas)
    started, cpu0 = time.perf_counter(), time.process_time()
    result = simulate(requests, engine, OfflineLoad(), run_id="bench")
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu0
    return {
        "requests": len(requests),
        "served": sum(1 for r in result.records if r.outcome == "ok"),
        "wall_s": wall,
        "cpu_s": cpu,
        "steps": result.steps,
        "output_tokens": sum(r.completion_tokens or 0 for r in result.records),
        "simulated_s": (result.end_ns - result.start_ns) / 1e9,
        "rows_sha256": hashlib.sha256(repr(result.records).encode()).hexdigest(),
    }


def _child(root: Path, trace: Path, replicas: int) -> dict[str, Any]:
    """``_timed`` in a child process importing ``loadgen`` from the tree ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    args = [sys.executable, __file__, "--child", str(trace), "--replicas", str(replicas)]
    done = subprocess.run(args, env=env, cwd=root, capture_output=True, text=True, check=True)
    doc: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return doc


def _compare(trace: Path, baseline: Path, pairs: int, replicas: int) -> dict[str, Any]:
    """Interleaved pairs of child processes: the baseline tree's engine, then this one's."""
    here = Path(__file__).resolve().parents[1]
    old: list[dict[str, Any]] = []
    new: list[dict[str, Any]] = []
    for _ in range(pairs):
        old.append(_child(baseline, trace, replicas))
        new.append(_child(here, trace, replicas))
    ratios = [o["cpu_s"] / n["cpu_s"] for o, n in zip(old, new, strict=True)]
    return {
        "baseline": str(baseline),
        "baseline_cpu_s": [o["cpu_s"] for o in old],
        "baseline_wall_s": [o["wall_s"] for o in old],
        "cpu_s_pairs": [n["cpu_s"] for n in new],
        "wall_s_pairs": [n["wall_s"] for n in new],
        "cpu_ratio": statistics.median(ratios),
        "same_rows": all(
            o["rows_sha256"] == n["rows_sha256"] for o, n in zip(old, new, strict=True)
        ),
        "last": new[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--source", type=Path, default=_SAMPLE)
    parser.add_argument("--json", type=Path, default=None, help="Also write the figures here.")
    parser.add_argument(
        "--baseline", type=Path, default=None, help="Source tree of the code to compare with."
    )
    parser.add_argument("--pairs", type=int, default=3, help="Interleaved pairs (--baseline).")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:  # one timing, for a parent's --baseline comparison
        print(json.dumps(_timed(args.child, args.replicas)))
        return
    comparison: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        trace = _trace(Path(tmp), args.requests, args.source)
        if args.baseline is None:
            doc = _timed(trace, args.replicas)
        else:
            comparison = _compare(trace, args.baseline.resolve(), max(1, args.pairs), args.replicas)
            doc = comparison["last"]
    source = args.source.name if args.source.exists() else "synthetic stand-in"
    wall, cpu = doc["wall_s"], doc["cpu_s"]
    verdict = "ok" if wall <= TARGET_S else "over target"
    print(
        f"simulate: {doc['requests']:,} requests of {source} (Mooncake format), "
        f"{args.replicas} x llama-3.1-8b on h100: {wall:.2f} s wall ({cpu:.2f} s CPU), "
        f"{doc['steps']:,} steps, {doc['output_tokens']:,} output tokens, "
        f"{doc['simulated_s']:,.0f} s simulated; "
        f"{doc['requests'] / wall:,.0f} req/s; target <= {TARGET_S:g} s: {verdict}"
    )
    if comparison is not None:
        cpus = ", ".join(
            f"{o:.2f}/{n:.2f}"
            for o, n in zip(comparison["baseline_cpu_s"], comparison["cpu_s_pairs"], strict=True)
        )
        print(
            f"baseline {comparison['baseline']}: CPU s baseline/this per pair {cpus}; "
            f"ratio (median) {comparison['cpu_ratio']:.2f}; same rows: "
            f"{'yes' if comparison['same_rows'] else 'NO'}"
        )
    if args.json is not None:
        out = {
            k: doc[k] for k in ("requests", "served", "wall_s", "cpu_s", "steps", "output_tokens")
        }
        out["target_s"] = TARGET_S
        if comparison is not None:
            out.update({k: v for k, v in comparison.items() if k != "last"})
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
