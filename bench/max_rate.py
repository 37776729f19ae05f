"""Closed-loop rate ceiling benchmark: does ``loadgen replay --concurrency N --max-rate R``
dispatch at R? One command, each rate beside its target:

    .venv/bin/python bench/max_rate.py [--quick] [--json out.json]

Uses the stub server of ``bench/client_ingest.py`` (raw asyncio, its own process pinned to
CPU 1, zero delay, 4-token outputs); ``loadgen replay`` runs as a real subprocess pinned to
CPU 0 with ``--concurrency 64`` (``--concurrency``), enough slots that the ceiling, not the
slots, is what binds at every rate asked. The achieved rate is (n - 1) over the time from
the replay's start (``run.json``) to the last request's ``sent_ns`` (the run's own table):
slot k is due k / R after the start, so the rate asked is the most it can be. The target
is within 1% of the rate asked. Also from ``run.json``: the client's CPU (share of a core
during the replay: the pacing costs nothing while it waits), the p99 schedule lag (sent
minus the slot) and the p99 event-loop lag, which says when the machine, not the pacing,
held the client back.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CLIENT_CPU = 0
CONCURRENCY = 64
TARGET_ERROR_PCT = 1.0
RATES: tuple[float, ...] = (1.0, 50.0, 200.0, 1000.0, 5000.0)
SECONDS = {False: 5.0, True: 2.0}
"""Seconds of dispatching per rate, full and ``--quick``."""
SLOW_SECONDS = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RateResult:
    asked_per_s: float
    requests: int
    achieved_per_s: float
    error_pct: float
    ok_share: float
    cpu_utilisation: float
    """The replay's CPU time over its wall time (1.0 = one core busy)."""
    schedule_lag_p99_ms: float
    loop_lag_p99_ms: float
    exit_code: int


def _write_trace(path: Path, n: int) -> None:
    import pyarrow as pa

    from traces.io import write_trace

    # Closed loop ignores arrival times; every request is the same small one.
    write_trace(
        pa.table(
            {
                "request_id": [f"r{i}" for i in range(n)],
                "arrival_s": [0.0] * n,
                "input_tokens": [16] * n,
                "output_tokens": [4] * n,
            }
        ),
        path,
    )


def _pin_client() -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {CLIENT_CPU})


def measure(port: int, workdir: Path, *, rate: float, n: int, concurrency: int) -> RateResult:
    """One closed-loop replay of ``n`` requests at ``--max-rate rate``."""
    from traces.io import read_run_table

    trace = workdir / f"r{rate:g}.parquet"
    run_dir = workdir / f"run-{rate:g}"
    _write_trace(trace, n)
    cmd = [
        sys.executable, "-m", "loadgen.cli.root", "replay", str(trace),
        "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "bench",
        "-o", str(run_dir), "--no-progress", "--header", "x-bench-itl-ms: 0",
        "--concurrency", str(concurrency), "--max-rate", f"{rate:g}",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=REPO_ROOT, preexec_fn=_pin_client, capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
    info = json.loads((run_dir / "run.json").read_text())
    table = read_run_table(run_dir)
    sent = sorted(s for s in table.column("sent_ns").to_pylist() if s is not None)
    span_s = (sent[-1] - info["result"]["start_ns"]) / 1e9 if sent else 0.0
    achieved = (len(sent) - 1) / span_s if span_s > 0 else float("nan")
    ok = sum(1 for o in table.column("outcome").to_pylist() if o == "ok")
    health = info["health"]
    return RateResult(
        asked_per_s=rate,
        requests=n,
        achieved_per_s=achieved,
        error_pct=(achieved / rate - 1.0) * 100.0,
        ok_share=ok / n,
        cpu_utilisation=float(health["cpu_utilisation"]),
        schedule_lag_p99_ms=float(health["schedule_lag_ms"]["p99_ms"]),
        loop_lag_p99_ms=float(health["loop_lag_ms"]["p99_ms"]),
        exit_code=proc.returncode,
    )


def requests_for(rate: float, seconds: float) -> int:
    """Requests for ``seconds`` of dispatching at ``rate``; at least 3 (two gaps), and at
    most ``SLOW_SECONDS`` of them below 2 req/s, so 1 req/s stays short."""
    if rate < 2:
        seconds = min(seconds, SLOW_SECONDS)
    return max(3, round(rate * seconds) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2 s per rate instead of 5 s")
    parser.add_argument(
        "--smoke", action="store_true", help="0.5 s per rate: that it runs, not a figure"
    )
    parser.add_argument(
        "--concurrency", type=int, default=CONCURRENCY, help=f"slots (default {CONCURRENCY})"
    )
    parser.add_argument("--json", type=Path, default=None, help="also save the results here")
    args = parser.parse_args(argv)
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    seconds = 0.5 if args.smoke else SECONDS[args.quick]
    import client_ingest as ingest  # beside this script, on sys.path

    server = ingest._Server()
    results: list[RateResult] = []
    try:
        with tempfile.TemporaryDirectory(prefix="max-rate-bench-") as tmp:
            for rate in RATES:
                n = requests_for(rate, seconds)
                results.append(
                    measure(server.port, Path(tmp), rate=rate, n=n, concurrency=args.concurrency)
                )
    finally:
        server.close()
    print(
        f"closed loop, --concurrency {args.concurrency}, 4-token outputs, zero delay: "
        f"achieved rate against --max-rate [target within {TARGET_ERROR_PCT:g}%]"
    )
    print(
        f"{'asked/s':>9} {'requests':>9} {'achieved/s':>11} {'error %':>8} {'ok':>7} "
        f"{'client CPU':>10} {'sched lag p99':>13} {'loop lag p99':>12}  exit"
    )
    for r in results:
        print(
            f"{r.asked_per_s:>9g} {r.requests:>9d} {r.achieved_per_s:>11.2f} "
            f"{r.error_pct:>+8.2f} {r.ok_share:>7.1%} {r.cpu_utilisation:>10.0%} "
            f"{r.schedule_lag_p99_ms:>10.2f} ms {r.loop_lag_p99_ms:>9.2f} ms  {r.exit_code}"
        )
    if args.json is not None:
        doc = {"concurrency": args.concurrency, "rates": [asdict(r) for r in results]}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
