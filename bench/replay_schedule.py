"""Replay benchmark: does ``loadgen replay`` keep an open-loop schedule, start fast, and
shard without overhead? One command, each figure beside its target:

    .venv/bin/python bench/replay_schedule.py [--quick]

Uses the stub server of ``bench/client_ingest.py`` (raw asyncio, its own process pinned to
CPU 1); ``loadgen replay`` runs as a real subprocess pinned to CPU 0.

(c) open loop, Poisson 500 req/s, short outputs: share of scheduled requests sent, share
    sent within 2 ms of their due time, p99 lateness (sent - due);
(d) time from starting the process to its first request leaving;
(e) CPU-seconds per million streamed tokens with one worker and with two (the workers'
    own CPU during the replay, from run.json, so start-up and the summary are excluded),
    and whether both runs replayed exactly the same request set.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
CLIENT_CPU = 0


def _ingest_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "client_ingest", REPO_ROOT / "bench" / "client_ingest.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["client_ingest"] = module
    spec.loader.exec_module(module)
    return module


def _write_trace(path: Path, *, n: int, rate: float, output_tokens: int, seed: int) -> None:
    import pyarrow as pa

    from traces.io import write_trace

    rng = random.Random(seed)
    t = 0.0
    arrivals = []
    for _ in range(n):
        arrivals.append(t)
        t += rng.expovariate(rate)
    write_trace(
        pa.table(
            {
                "request_id": [f"r{i}" for i in range(n)],
                "arrival_s": arrivals,
                "input_tokens": [16] * n,
                "output_tokens": [output_tokens] * n,
            }
        ),
        path,
    )


def _pin_client() -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {CLIENT_CPU})


def _replay(trace: Path, run_dir: Path, port: int, *extra: str) -> tuple[float, int]:
    """Run ``loadgen replay`` as a subprocess; return (wall start ns, exit code)."""
    cmd = [
        sys.executable, "-m", "loadgen.cli", "replay", str(trace),
        "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "bench",
        "-o", str(run_dir), "--no-progress", "--header", "x-bench-itl-ms: 0", *extra,
    ]  # fmt: skip
    start = time.time_ns()
    proc = subprocess.run(
        cmd, cwd=REPO_ROOT, preexec_fn=_pin_client, capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
    return start, proc.returncode


def _rows(run_dir: Path) -> Any:
    from traces.io import read_run_table

    return read_run_table(run_dir)


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))] if values else 0.0


def schedule_check(port: int, workdir: Path, *, n: int, rate: float) -> dict[str, float]:
    trace = workdir / "poisson.parquet"
    _write_trace(trace, n=n, rate=rate, output_tokens=4, seed=1)
    start_ns, rc = _replay(trace, workdir / "sched", port)
    table = _rows(workdir / "sched")
    sent = [s for s in table.column("sent_ns").to_pylist() if s is not None]
    due = table.column("due_ns").to_pylist()
    late_ms = [(s - d) / 1e6 for s, d in zip(table.column("sent_ns").to_pylist(), due, strict=True)
               if s is not None]  # fmt: skip
    ok = sum(1 for o in table.column("outcome").to_pylist() if o == "ok")
    return {
        "scheduled": float(n),
        "sent_share": len(sent) / n,
        "on_time_share": sum(1 for x in late_ms if x <= 2.0) / n,
        "late_p50_ms": _pct(late_ms, 0.50),
        "late_p99_ms": _pct(late_ms, 0.99),
        "ok_share": ok / n,
        "first_request_s": (min(sent) - start_ns) / 1e9 if sent else float("nan"),
        "exit_code": float(rc),
    }


def shard_check(port: int, workdir: Path, *, streams: int, tokens: int) -> dict[str, Any]:
    trace = workdir / "burst.parquet"
    _write_trace(trace, n=streams, rate=1e6, output_tokens=tokens, seed=2)
    out: dict[str, Any] = {}
    request_sets = []
    for workers in (1, 2):
        run_dir = workdir / f"w{workers}"
        _, rc = _replay(trace, run_dir, port, "--concurrency", str(streams),
                        "--workers", str(workers))  # fmt: skip
        info = json.loads((run_dir / "run.json").read_text())
        table = _rows(run_dir)
        streamed = sum(len(x) for x in table.column("chunk_offsets_us").to_pylist())
        cpu_s = sum(w["cpu_s"] for w in info["health"]["workers"])
        request_sets.append(sorted(table.column("request_id").to_pylist()))
        out[f"workers_{workers}"] = {
            "exit_code": rc,
            "tokens": streamed,
            "cpu_s": cpu_s,
            "cpu_s_per_mtok": cpu_s / streamed * 1e6 if streamed else float("nan"),
        }
    out["same_request_set"] = request_sets[0] == request_sets[1]
    one = out["workers_1"]["cpu_s_per_mtok"]
    two = out["workers_2"]["cpu_s_per_mtok"]
    out["ratio_2_to_1"] = two / one if one else float("nan")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a shorter schedule (about 20 s)")
    parser.add_argument("--json", type=Path, default=None, help="also save the results here")
    args = parser.parse_args(argv)
    ingest = _ingest_module()
    n = 1500 if args.quick else 5000
    server = ingest._Server()
    try:
        with tempfile.TemporaryDirectory(prefix="replay-bench-") as tmp:
            work = Path(tmp)
            sched = schedule_check(server.port, work, n=n, rate=500.0)
            shard = shard_check(server.port, work, streams=64, tokens=2048 if args.quick else 8192)
    finally:
        server.close()
    print(f"(c) open loop, Poisson 500 req/s, {n} requests, 4-token outputs")
    print(f"    sent {sched['sent_share']:.1%} of scheduled, on time (<= 2 ms) "
          f"{sched['on_time_share']:.1%} [target >= 98%]; lateness p50 "
          f"{sched['late_p50_ms']:.2f} ms, p99 {sched['late_p99_ms']:.2f} ms [target <= 2 ms]; "
          f"ok {sched['ok_share']:.1%}")  # fmt: skip
    print(f"(d) process start to first request: {sched['first_request_s']:.2f} s [target < 1 s]")
    w1, w2 = shard["workers_1"], shard["workers_2"]
    print("(e) closed loop, 64 streams, zero delay: CPU-s per million tokens")
    print(f"    1 worker {w1['cpu_s_per_mtok']:.2f}, 2 workers {w2['cpu_s_per_mtok']:.2f}: "
          f"ratio {shard['ratio_2_to_1']:.2f} [target within 10%]; same request set: "
          f"{shard['same_request_set']}")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps({"schedule": sched, "shards": shard}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
