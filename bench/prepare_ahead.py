"""Bodies built off the event loop: schedule lag of a trace mixing 1M-token prompts and
16-image requests, with the body preparer (``loadgen.prepare.ahead``) against every body
built on the loop (``--prepare-ahead-mib 0``), interleaved in the same run:

    .venv/bin/python bench/prepare_ahead.py [--requests 60] [--pairs 1]

The trace: requests at ``--rate`` (5/s) at even gaps, cycling through a 1M-token prompt, a
short prompt, a request with 16 images (``--image-side`` pixels square, PNG), and two short
prompts. The stub server of ``bench/client_ingest.py`` (its own process pinned to CPU 1)
reads every body and streams 16 tokens; ``loadgen replay`` runs as a subprocess pinned to
CPU 0, and its preparer process (a child) with it. Per run: schedule lag (sent - due) p50,
p99 and max over every request, the requests' outcomes, and run.json's
``health.prepare_ahead`` (bodies, peak look-ahead, waits). Target: p99 <= 2 ms with the
preparer. Load on the host (other processes on CPU 0) shows as lag in both modes: run it on
an idle machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
CLIENT_CPU = 0
HUGE_TOKENS = 1_000_000
IMAGES = 16
CYCLE = ("huge", "short", "images", "short", "short")


def write_trace(path: Path, *, n: int, rate: float, side: int) -> dict[str, int]:
    """The mixed trace; returns how many requests of each kind it holds."""
    import pyarrow as pa

    from traces import schema as s
    from traces.io import write_trace as write

    kinds = [CYCLE[i % len(CYCLE)] for i in range(n)]
    image = {"width": side, "height": side}
    write(
        pa.table(
            {
                "request_id": [f"r{i}" for i in range(n)],
                "arrival_s": [i / rate for i in range(n)],
                "input_tokens": [HUGE_TOKENS if k == "huge" else 200 for k in kinds],
                "output_tokens": [16] * n,
                "images": pa.array(
                    [[image] * IMAGES if k == "images" else None for k in kinds],
                    type=pa.list_(s.IMAGE_TYPE),
                ),
            }
        ),
        path,
    )
    return {k: kinds.count(k) for k in CYCLE}


def _pin_client() -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {CLIENT_CPU})


def _children(pid: int) -> set[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(x) for x in text.split()}


def replay(trace: Path, run_dir: Path, port: int, ahead_mib: int, preparer_cpu: int | None) -> int:
    """Run ``loadgen replay``; with ``preparer_cpu``, its child processes (the preparer)
    are moved to that CPU as they appear."""
    cmd = [
        sys.executable, "-m", "loadgen.cli.root", "replay", str(trace),
        "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "bench",
        "-o", str(run_dir), "--no-progress", "--no-scrape-metrics",
        "--prepare-ahead-mib", str(ahead_mib),
    ]  # fmt: skip
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, preexec_fn=_pin_client, stdout=out, stderr=subprocess.STDOUT
        )
        pinned: set[int] = set()
        while proc.poll() is None:
            if preparer_cpu is not None:
                for child in _children(proc.pid) - pinned:
                    with contextlib.suppress(OSError):
                        os.sched_setaffinity(child, {preparer_cpu})
                    pinned.add(child)
            time.sleep(0.02)
        if proc.returncode != 0:
            out.seek(0)
            print(out.read()[-4000:], file=sys.stderr)
    return proc.returncode


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))] if values else 0.0


def measure(run_dir: Path, rc: int) -> dict[str, Any]:
    from traces.io import read_run_info, read_run_table

    table = read_run_table(run_dir)
    sent = table.column("sent_ns").to_pylist()
    due = table.column("due_ns").to_pylist()
    lag_ms = [(a - d) / 1e6 for a, d in zip(sent, due, strict=True) if a is not None]
    outcomes = table.column("outcome").to_pylist()
    info = read_run_info(run_dir)
    health = info.health if info is not None else None
    ahead = health.prepare_ahead if health is not None else None
    stalls = health.stalls if health is not None else None
    return {
        "exit_code": rc,
        "requests": len(outcomes),
        "ok": sum(1 for o in outcomes if o == "ok"),
        "lag_p50_ms": round(_pct(lag_ms, 0.50), 3),
        "lag_p99_ms": round(_pct(lag_ms, 0.99), 3),
        "lag_max_ms": round(max(lag_ms, default=0.0), 3),
        "stalls": stalls.count if stalls is not None else 0,
        "stall_causes": dict(Counter(x.cause for x in stalls.stalls)) if stalls is not None else {},
        "prepare_ahead": None
        if ahead is None
        else {
            "reason": ahead.reason,
            "bodies": ahead.bodies,
            "mib": ahead.mib,
            "peak_mib": ahead.peak_mib,
            "waits": ahead.waits,
            "wait_ms": ahead.wait_ms,
            "start_ms": ahead.start_ms,
        },
    }


def loop_cost(side: int, count: int) -> dict[str, dict[str, float]]:
    """The event loop's own CPU time (``thread_time``: not the time the host gave to
    others) per body, in this process: building it (``Preparer.body``, what the loop did
    before) against taking it from the preparer process (a map, or the bytes of a small
    one). Medians over ``count`` bodies of each kind."""
    import asyncio

    from loadgen.prepare.ahead import AheadBodies
    from loadgen.prepare.preparer import Preparer
    from traces.prompts.maker import PromptMaker
    from traces.records import ImageSpec, TraceRequest
    from traces.runinfo import Capabilities

    preparer = Preparer(prompts=PromptMaker(), model="m", run_id="b", capabilities=Capabilities())
    images = tuple(ImageSpec(width=side, height=side) for _ in range(IMAGES))
    kinds = {"1M-token prompt": (HUGE_TOKENS, None), f"{IMAGES} images": (200, images)}
    out: dict[str, dict[str, float]] = {}
    for name, (tokens, imgs) in kinds.items():
        reqs = [
            TraceRequest(index=i, request_id=f"{name}-{i}", arrival_s=0.0, output_tokens=16,
                         input_tokens=tokens, images=imgs)
            for i in range(2 * count)
        ]  # fmt: skip
        built = []
        for req in reqs[:count]:
            t0 = time.thread_time_ns()
            preparer.body(req)
            built.append((time.thread_time_ns() - t0) / 1e6)

        async def take(rest: list[TraceRequest]) -> list[float]:
            ahead = AheadBodies(preparer, rest, [True] * len(rest), bound_bytes=1 << 30,
                                reason="bench")  # fmt: skip
            await ahead.start()
            try:
                times = []
                for k in range(len(rest)):
                    # Thread time: a wait for the body (an idle loop) costs next to none.
                    t0 = time.thread_time_ns()
                    await ahead.take(k)
                    times.append((time.thread_time_ns() - t0) / 1e6)
                return times
            finally:
                ahead.close()

        taken = asyncio.run(take(reqs[count:]))
        out[name] = {
            "build_ms": round(statistics.median(built), 3),
            "take_ms": round(statistics.median(taken), 3),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=60, help="trace length (default 60)")
    parser.add_argument("--rate", type=float, default=5.0, help="requests per second (5)")
    parser.add_argument("--image-side", type=int, default=512, help="image side, px (512)")
    parser.add_argument("--pairs", type=int, default=1, help="inline/ahead run pairs (1)")
    parser.add_argument(
        "--ahead-mib", type=int, default=256, help="--prepare-ahead-mib of the ahead runs"
    )
    parser.add_argument(
        "--preparer-cpu",
        type=int,
        default=None,
        help="move the preparer process to this CPU (default: it shares the client's)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also save the results here")
    parser.add_argument(
        "--loop-bodies", type=int, default=3, help="bodies of each kind timed for (b) (3)"
    )
    args = parser.parse_args(argv)
    if args.requests < 1 or args.pairs < 1 or args.ahead_mib < 1:
        parser.error("--requests, --pairs and --ahead-mib must be at least 1")
    import client_ingest as ingest  # beside this script, on sys.path

    server = ingest._Server()
    runs: dict[str, list[dict[str, Any]]] = {"inline": [], "ahead": []}
    try:
        with tempfile.TemporaryDirectory(prefix="prepare-ahead-bench-") as tmp:
            work = Path(tmp)
            trace = work / "mixed.parquet"
            kinds = write_trace(trace, n=args.requests, rate=args.rate, side=args.image_side)
            for pair in range(args.pairs):
                order = ("inline", "ahead") if pair % 2 == 0 else ("ahead", "inline")
                for mode in order:
                    run_dir = work / f"{mode}-{pair}"
                    mib = 0 if mode == "inline" else args.ahead_mib
                    rc = replay(trace, run_dir, server.port, mib, args.preparer_cpu)
                    runs[mode].append(measure(run_dir, rc))
    finally:
        server.close()
    print(
        f"{args.requests} requests at {args.rate:g}/s: {kinds['huge']} of {HUGE_TOKENS:,} "
        f"tokens, {kinds['images']} with {IMAGES} images of {args.image_side}x"
        f"{args.image_side}, {kinds['short']} short; client on CPU {CLIENT_CPU}, stub "
        "server on the other, preparer on CPU "
        f"{CLIENT_CPU if args.preparer_cpu is None else args.preparer_cpu}"
    )
    for mode in ("inline", "ahead"):
        for k, r in enumerate(runs[mode]):
            extra = ""
            if r["prepare_ahead"] is not None:
                p = r["prepare_ahead"]
                extra = (
                    f"; preparer: {p['bodies']} bodies, {p['mib']:.0f} MiB, peak "
                    f"{p['peak_mib']:.0f} MiB ahead, {p['waits']} waits "
                    f"({p['wait_ms']:.0f} ms), start {p['start_ms']:.0f} ms"
                )
            print(
                f"  {mode:6} #{k}: schedule lag p50 {r['lag_p50_ms']:.2f} ms, p99 "
                f"{r['lag_p99_ms']:.2f} ms, max {r['lag_max_ms']:.2f} ms; ok {r['ok']}/"
                f"{r['requests']}, stalls {r['stalls']} {r['stall_causes']}, exit "
                f"{r['exit_code']}{extra}"
            )
    inline_p99 = statistics.median(r["lag_p99_ms"] for r in runs["inline"])
    ahead_p99 = statistics.median(r["lag_p99_ms"] for r in runs["ahead"])
    ratio = inline_p99 / ahead_p99 if ahead_p99 > 0 else float("inf")
    verdict = "met" if ahead_p99 <= 2.0 else "NOT met"
    print(
        f"p99 schedule lag (median of {args.pairs}): ahead {ahead_p99:.2f} ms [target <= 2 ms: "
        f"{verdict}], inline {inline_p99:.2f} ms ({ratio:.0f}x)"
    )
    cost = loop_cost(args.image_side, max(1, args.loop_bodies))
    print("(b) the loop's own CPU per body (thread time, median): built on the loop / taken")
    for name, c in cost.items():
        ratio = c["build_ms"] / c["take_ms"] if c["take_ms"] > 0 else float("inf")
        print(f"    {name}: {c['build_ms']:.1f} ms / {c['take_ms']:.3f} ms ({ratio:,.0f}x)")
    if args.json is not None:
        args.json.write_text(
            json.dumps({"kinds": kinds, "runs": runs, "loop_cost": cost}, indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
