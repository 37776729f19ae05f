"""Replay benchmark: does ``loadgen replay`` keep an open-loop schedule, start fast, and
shard without overhead? One command, each figure beside its target:

    .venv/bin/python bench/replay_schedule.py [--quick]

Uses the stub server of ``bench/client_ingest.py`` (raw asyncio, its own process pinned to
CPU 1); ``loadgen replay`` runs as a real subprocess pinned to CPU 0.

(c) open loop, Poisson at each of ``--rates`` (500 req/s; e.g. ``--rates 500,2000,5000``),
    short outputs, ``--seconds`` of schedule each (10; 3 with ``--quick``): share of
    scheduled requests sent, share sent within 2 ms of their due time, p99 lateness (sent -
    due), the client's CPU over the replay as a share of one core, and the start: how late
    the first request left and the worst lateness in the schedule's first 100 ms, and the
    10 ms bins of due time that hold a request over 2 ms late (when, how late); then the
    baseline: the same schedule sent by ``bench/open_loop_raw.py`` (raw reader, the same
    wake-up timer, no prompt or record) on the same CPU, and the replay's CPU a request as
    a ratio to it (the host's speed moves both);
(d) time from starting the process to its first request leaving;
(e) CPU-seconds per million streamed tokens with one worker and with two (the workers'
    own CPU during the replay, from run.json, so start-up and the summary are excluded),
    over interleaved pairs (``--pairs``, median of the pairs' ratios), and whether every
    run replayed exactly the same request set. Both workers share the client's one core
    (the stub server has the other), so this measures efficiency, not aggregate speed.
"""

from __future__ import annotations

import argparse
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

REPO_ROOT = Path(__file__).resolve().parents[1]
CLIENT_CPU = 0


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
        sys.executable, "-m", "loadgen.cli.root", "replay", str(trace),
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


def baseline_check(port: int, trace: Path, workdir: Path) -> dict[str, Any]:
    """The same schedule sent by ``bench/open_loop_raw.py`` (the least a client does per
    request), pinned to the replay's CPU: its lateness and its CPU."""
    out = workdir / f"{trace.stem}-raw.json"
    cmd = [sys.executable, str(REPO_ROOT / "bench" / "open_loop_raw.py"), "--port", str(port),
           "--trace", str(trace), "--out", str(out)]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=REPO_ROOT, preexec_fn=_pin_client, capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        raise RuntimeError(f"open_loop_raw.py failed: {proc.stderr.strip()[-500:]}")
    doc = json.loads(out.read_text())
    late_ms = [x / 1e6 for x in doc["late_ns"]]
    return {
        "on_time_share": sum(1 for x in late_ms if x <= 2.0) / max(1, len(late_ms)),
        "late_p99_ms": _pct(late_ms, 0.99),
        "answered": doc["answered"],
        "client_cores": doc["client_cores"],
    }


def schedule_check(port: int, workdir: Path, *, n: int, rate: float) -> dict[str, Any]:
    from traces.io import read_run_info

    trace = workdir / f"poisson-{rate:g}.parquet"
    _write_trace(trace, n=n, rate=rate, output_tokens=4, seed=1)
    run_dir = workdir / f"sched-{rate:g}"
    start_ns, rc = _replay(trace, run_dir, port)
    table = _rows(run_dir)
    info = read_run_info(run_dir)
    health = info.health if info is not None else None
    sent = [s for s in table.column("sent_ns").to_pylist() if s is not None]
    due = table.column("due_ns").to_pylist()
    late_ms = [(s - d) / 1e6 for s, d in zip(table.column("sent_ns").to_pylist(), due, strict=True)
               if s is not None]  # fmt: skip
    ok = sum(1 for o in table.column("outcome").to_pylist() if o == "ok")
    # The start: how late the first request left, and the worst of the schedule's first
    # 100 ms (a start-up stall shows there as a backlog every request inherits).
    by_due = sorted((d, s) for d, s in zip(due, table.column("sent_ns").to_pylist(), strict=True)
                    if s is not None)  # fmt: skip
    first_due = by_due[0][0] if by_due else 0
    start_late = [(s - d) / 1e6 for d, s in by_due if d - first_due < 100_000_000]
    # Where the late requests were: 10 ms bins of due time holding one over 2 ms late, as
    # (s from the first due, worst ms) - periodic bins point at the client's own periodic
    # work (a flush, a scrape), a wave of neighbouring bins at a slower core.
    worst: dict[int, float] = {}
    for d, s in by_due:
        b = (d - first_due) // 10_000_000
        worst[b] = max(worst.get(b, 0.0), (s - d) / 1e6)
    late_bins = [(b / 100, w) for b, w in sorted(worst.items()) if w > 2.0]
    return {
        "scheduled": float(n),
        "sent_share": len(sent) / n,
        "on_time_share": sum(1 for x in late_ms if x <= 2.0) / n,
        "late_p50_ms": _pct(late_ms, 0.50),
        "late_p99_ms": _pct(late_ms, 0.99),
        "ok_share": ok / n,
        "first_request_s": (min(sent) - start_ns) / 1e9 if sent else float("nan"),
        "first_late_ms": start_late[0] if start_late else float("nan"),
        "late_bins": late_bins,
        "start_late_max_ms": max(start_late, default=float("nan")),
        "exit_code": float(rc),
        # The client's CPU over the replay (run.json: start-up and the summary excluded),
        # as a share of one core.
        "client_cores": health.cpu_utilisation if health is not None else float("nan"),
        "baseline": baseline_check(port, trace, workdir),
    }


def shard_check(
    port: int, workdir: Path, *, streams: int, tokens: int, pairs: int
) -> dict[str, Any]:
    """``pairs`` runs with one worker and with two, interleaved (1, 2, then 2, 1, ...):
    each pair's ratio of CPU-s per million tokens, and their median. One pair alone moves
    by 20% either way on this machine kind; runs of a million tokens or more, and the
    median of paired runs, keep the workers' fixed costs and the noise out of the figure."""
    from traces.io import read_run_info

    trace = workdir / "burst.parquet"
    _write_trace(trace, n=streams, rate=1e6, output_tokens=tokens, seed=2)
    per_mtok: dict[int, list[float]] = {1: [], 2: []}
    exit_codes: list[int] = []
    request_sets = []
    for pair in range(pairs):
        for workers in (1, 2) if pair % 2 == 0 else (2, 1):
            run_dir = workdir / f"w{workers}-{pair}"
            _, rc = _replay(trace, run_dir, port, "--concurrency", str(streams),
                            "--workers", str(workers))  # fmt: skip
            exit_codes.append(rc)
            info = read_run_info(run_dir)
            assert info is not None, run_dir
            assert info.health is not None, run_dir
            table = _rows(run_dir)
            streamed = sum(len(x) for x in table.column("chunk_offsets_us").to_pylist())
            cpu_s = sum(w.cpu_s for w in info.health.workers)
            request_sets.append(sorted(table.column("request_id").to_pylist()))
            per_mtok[workers].append(cpu_s / streamed * 1e6 if streamed else float("nan"))
    ratios = [two / one for one, two in zip(per_mtok[1], per_mtok[2], strict=True)]
    return {
        "pairs": pairs,
        "exit_codes": exit_codes,
        "cpu_s_per_mtok_1": per_mtok[1],
        "cpu_s_per_mtok_2": per_mtok[2],
        "ratios_2_to_1": ratios,
        "ratio_2_to_1": statistics.median(ratios),
        "same_request_set": all(r == request_sets[0] for r in request_sets),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a shorter schedule (about 20 s)")
    parser.add_argument(
        "--smoke", action="store_true", help="with --quick, 400 requests: that it runs"
    )
    parser.add_argument("--json", type=Path, default=None, help="also save the results here")
    parser.add_argument(
        "--pairs",
        type=int,
        default=None,
        help="(e): interleaved 1- and 2-worker runs (default 5; 1 with --quick)",
    )
    parser.add_argument(
        "--rates", default="500", help="(c): open-loop rates, req/s, comma-separated (500)"
    )
    parser.add_argument(
        "--seconds", type=float, default=None, help="(c): seconds of schedule a rate"
    )
    args = parser.parse_args(argv)
    if args.pairs is not None and args.pairs < 1:
        parser.error("--pairs must be at least 1")
    try:
        rates = [float(x) for x in args.rates.split(",")]
    except ValueError:
        parser.error(f"--rates: {args.rates!r} is not a comma-separated list of numbers")
    if not rates or min(rates) <= 0 or (args.seconds is not None and args.seconds <= 0):
        parser.error("--rates and --seconds must be positive")
    import client_ingest as ingest  # beside this script, on sys.path

    seconds = args.seconds or (0.8 if args.smoke else 3.0 if args.quick else 10.0)
    server = ingest._Server()
    try:
        with tempfile.TemporaryDirectory(prefix="replay-bench-") as tmp:
            work = Path(tmp)
            scheds = [
                schedule_check(server.port, work, n=max(1, round(rate * seconds)), rate=rate)
                for rate in rates
            ]
            shard = shard_check(
                server.port,
                work,
                streams=64,
                tokens=4096 if args.quick else 16384,
                pairs=args.pairs or (1 if args.quick else 5),
            )
    finally:
        server.close()
    for rate, sched in zip(rates, scheds, strict=True):
        print(f"(c) open loop, Poisson {rate:g} req/s, {sched['scheduled']:.0f} requests, "
              "4-token outputs")  # fmt: skip
        print(f"    sent {sched['sent_share']:.1%} of scheduled, on time (<= 2 ms) "
              f"{sched['on_time_share']:.1%} [target >= 98%]; lateness p50 "
              f"{sched['late_p50_ms']:.2f} ms, p99 {sched['late_p99_ms']:.2f} ms [target <= 2 ms]; "
              f"ok {sched['ok_share']:.1%}; client CPU {sched['client_cores']:.2f} of a core"
              + (" [target <= 0.2 at 500 req/s]" if rate == 500 else ""))  # fmt: skip
        print(f"    start: first request {sched['first_late_ms']:.2f} ms late, the first 100 ms "
              f"of the schedule at most {sched['start_late_max_ms']:.2f} ms")  # fmt: skip
        bins = sched["late_bins"]
        shown_bins = ", ".join(f"{at:.2f} s {ms:.1f} ms" for at, ms in bins[:12])
        more = ", ..." if len(bins) > 12 else ""
        print(f"    10 ms bins with a request over 2 ms late: {len(bins)}"
              + (f" ({shown_bins}{more})" if bins else ""))  # fmt: skip
        base = sched["baseline"]
        ours_us = sched["client_cores"] * 1e6 / rate
        base_us = base["client_cores"] * 1e6 / rate
        print(f"    baseline, the same schedule from bench/open_loop_raw.py (no prompt, no "
              f"record): answered {base['answered']}, on time {base['on_time_share']:.1%}, "
              f"p99 {base['late_p99_ms']:.2f} ms, CPU {base['client_cores']:.2f} of a core; "
              f"CPU a request {ours_us:.0f} us against {base_us:.0f} us, "
              f"{ours_us / base_us:.2f}x")  # fmt: skip
    print(f"(d) process start to first request: {scheds[0]['first_request_s']:.2f} s "
          "[target < 1 s]")  # fmt: skip
    ones = ", ".join(f"{x:.2f}" for x in shard["cpu_s_per_mtok_1"])
    twos = ", ".join(f"{x:.2f}" for x in shard["cpu_s_per_mtok_2"])
    pairs = ", ".join(f"{x:.2f}" for x in shard["ratios_2_to_1"])
    print(
        f"(e) closed loop, 64 streams, zero delay, {shard['pairs']} interleaved pair(s): "
        "CPU-s per million tokens"
    )
    print(f"    1 worker {ones}; 2 workers {twos}")
    print(f"    ratio 2/1 per pair {pairs}; median {shard['ratio_2_to_1']:.2f} "
          f"[target within 10%]; same request set: {shard['same_request_set']}")  # fmt: skip
    if args.json is not None:
        doc = {
            "schedule": scheds[0],
            "schedules": dict(zip(args.rates.split(","), scheds, strict=True)),
            "shards": shard,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
