"""Hostile-server benchmark: what one request against each scenario of
``tests/support/hostile.py`` costs the client. One command:

    .venv/bin/python bench/client_hostile.py [--quick] [--only NAME ...] [--json out.json]

Each row is one request by the replay's client (``StreamingClient`` over the fast
transport, on uvloop where installed, the C feed where built) in a process of its own, so
that its peak RSS (``VmHWM``) is that request's alone; the server runs on a thread of the
benchmark's own process. Printed per row: the outcome and status recorded, the wall time,
the client's CPU time (its event loop does nothing else: the loop time the request took),
the longest stall of the loop (how late every other stream's reads would have been
stamped), and the peak RSS above the RSS just before the request. The full sizes are
issue 19's (a 16 MiB line, a 200 MiB error body, ...); ``--quick`` shrinks them for the
smoke test. A ``/2`` row is the next row at half the size: the ``ratio`` column is the
CPU time at the full size over the time at half (linear framing: about 2, quadratic: 4).
Both sizes are within the default limit on an event (32 MiB); the 100 MiB line is beyond
it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    label: str
    scenario: str
    size: int
    timeout_s: float
    double_of: str | None = None
    """The row this one doubles the size of (its ratio is printed)."""


def _rows(quick: bool) -> list[Row]:
    if quick:
        line, cr, body, endless, timeout = 4 * MIB, 4 * MIB, 16 * MIB, 256 * MIB, 10.0
    else:
        line, cr, body, endless, timeout = 16 * MIB, 16 * MIB, 200 * MIB, 4096 * MIB, 25.0
    rows = [
        Row(label="endless_error", scenario="endless_error", size=endless, timeout_s=timeout),
        Row(label="huge_error", scenario="huge_error", size=body, timeout_s=60.0),
        Row(label="long_line /2", scenario="long_line", size=line // 2, timeout_s=60.0),
        Row(
            label="long_line",
            scenario="long_line",
            size=line,
            timeout_s=60.0,
            double_of="long_line /2",
        ),
        Row(label="cr_only /2", scenario="cr_only", size=cr // 2, timeout_s=60.0),
        Row(label="cr_only", scenario="cr_only", size=cr, timeout_s=60.0, double_of="cr_only /2"),
    ]
    if not quick:
        rows.append(
            Row(label="long_line 100M", scenario="long_line", size=100 * MIB, timeout_s=60.0)
        )
    for name in ("close_delimited", "http10", "garbage", "redirect", "continue", "bad_chunk"):
        rows.append(Row(label=name, scenario=name, size=0, timeout_s=10.0))
    rows.append(Row(label="endless_head", scenario="endless_head", size=body, timeout_s=timeout))
    return rows


# ---------------------------------------------------------------- one request, in a child
def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def child_main(url: str, timeout_s: float, out: Path) -> int:
    import httpx

    from loadgen.client import PreparedRequest, StreamingClient
    from loadgen.clock import Clock
    from loadgen.http.pool import FastTransport
    from traces.records import RunRow, TraceRequest

    async def main() -> dict[str, Any]:
        clock = Clock()
        transport = FastTransport(clock.now_ns, max_connections=4)
        limits = httpx.Timeout(timeout_s)
        records: list[RunRow] = []
        stall_ns = 0
        ticking = True

        async def ticker() -> None:
            nonlocal stall_ns
            last = time.perf_counter_ns()
            while ticking:
                await asyncio.sleep(0.001)
                now = time.perf_counter_ns()
                stall_ns = max(stall_ns, now - last)
                last = now

        async with httpx.AsyncClient(transport=transport, timeout=limits) as http:
            client = StreamingClient(
                http,
                base_url=url + "/v1",
                now_ns=clock.now_ns,
                run_id="bench",
                timeout_s=timeout_s,
                transport=transport,
            )
            trace = TraceRequest(
                index=0, request_id="h0", arrival_s=0.0, input_tokens=1, output_tokens=1
            )
            job = PreparedRequest(
                trace=trace, x_request_id="bench-h0", path="/chat/completions", body=b"{}"
            )
            ready = client.ready(job)
            tick = asyncio.create_task(ticker())
            await asyncio.sleep(0.01)
            base_kb = _status_kb("VmRSS")
            cpu0, wall0 = time.process_time(), time.perf_counter()
            await client.execute(ready, clock.now_ns(), records.append)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            ticking = False
            await tick
        (rec,) = records
        return {
            "outcome": rec.outcome,
            "http_status": rec.http_status,
            "error": (rec.error or "")[:160],
            "chunks": len(rec.chunk_offsets_us or ()),
            "wall_s": wall,
            "cpu_s": cpu,
            "max_stall_ms": stall_ns / 1e6,
            "base_rss_mb": base_kb / 1024,
            "peak_rss_mb": _status_kb("VmHWM") / 1024,
        }

    try:
        import uvloop
    except ImportError:
        result = asyncio.run(main())
    else:
        result = uvloop.run(main())
    out.write_text(json.dumps(result))
    return 0


# ---------------------------------------------------------------- the driver
def run_row(row: Row, out_dir: Path) -> dict[str, Any]:
    from hostile import SCENARIOS, hostile_server_thread

    out = out_dir / f"{re.sub(r'[^A-Za-z0-9]+', '_', row.label)}.json"
    with hostile_server_thread(SCENARIOS[row.scenario], row.size) as (url, log):
        child = ["--child", url, "--timeout", str(row.timeout_s), "--out", str(out)]
        proc = subprocess.run(
            [sys.executable, __file__, *child],
            capture_output=True,
            text=True,
            timeout=row.timeout_s + 60,
            check=False,
        )
        written = log.written
    if proc.returncode != 0:
        return {"label": row.label, "failed": (proc.stdout + proc.stderr)[-2000:]}
    result: dict[str, Any] = json.loads(out.read_text())
    return {**asdict(row), **result, "server_written_mb": written / MIB}


def _print(results: list[dict[str, Any]]) -> None:
    head = (
        f"{'scenario':<16}{'size MiB':>9}  {'outcome':<15}{'status':>6}{'wall s':>8}"
        f"{'loop CPU s':>11}{'stall ms':>10}{'peak RSS MB':>12}{'+RSS MB':>9}{'ratio':>7}"
    )
    print(head)
    by_label = {r["label"]: r for r in results}
    for r in results:
        if "failed" in r:
            print(f"{r['label']:<16} FAILED: {r['failed'].splitlines()[-1:]}")
            continue
        ratio = ""
        base = by_label.get(r["double_of"] or "")
        if base is not None and "failed" not in base and base["cpu_s"] > 0:
            ratio = f"{r['cpu_s'] / base['cpu_s']:.1f}"
        print(
            f"{r['label']:<16}{r['size'] / MIB:>9.0f}  {r['outcome']:<15}"
            f"{r['http_status'] if r['http_status'] is not None else '-':>6}"
            f"{r['wall_s']:>8.2f}{r['cpu_s']:>11.2f}{r['max_stall_ms']:>10.0f}"
            f"{r['peak_rss_mb']:>12.0f}{r['peak_rss_mb'] - r['base_rss_mb']:>9.0f}{ratio:>7}"
        )
    for r in results:
        if "failed" not in r and r["error"]:
            print(f"  {r['label']}: {r['error'][:120]}")


def driver_main(args: argparse.Namespace) -> int:
    import tempfile

    sys.path.insert(0, str(REPO_ROOT / "tests" / "support"))
    rows = [r for r in _rows(args.quick) if not args.only or r.scenario in args.only]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            results.append(run_row(row, Path(tmp)))
    _print(results)
    if args.json is not None:
        doc = {"quick": args.quick, "python": sys.version.split()[0], "rows": results}
        args.json.write_text(json.dumps(doc, indent=2))
    return 1 if any("failed" in r for r in results) else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="smaller sizes (about 20 s in all)")
    p.add_argument("--only", nargs="*", default=None, metavar="NAME", help="these scenarios")
    p.add_argument("--json", type=Path, default=None, help="also save the results here")
    hidden = argparse.SUPPRESS
    p.add_argument("--child", default=None, metavar="URL", help=hidden)
    p.add_argument("--timeout", type=float, default=25.0, help=hidden)
    p.add_argument("--out", type=Path, default=None, help=hidden)
    args = p.parse_args(argv)
    if args.child is not None:
        if args.out is None:
            p.error("--child needs --out")
        return child_main(args.child, args.timeout, args.out)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    return driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
