"""Wake-up benchmark: what the open loop's waits for due times cost, before and after.

    .venv/bin/python bench/wakeup.py [--rates 500,2000,5000] [--seconds 3] [--rounds 3]

Drives the replay's own wait (``Replayer._sleep_until``) through a Poisson schedule at each
rate, each due request spawning one task (as a dispatch does), with two wake-up mechanisms
in interleaved rounds in this one process: ``spin`` (what the replay did before: the loop's
timer, then yielding for the last 1.2 ms) and ``timer`` (``loadgen.wakeup``: a timerfd at
the absolute due time). No HTTP: the figures are the waiting's own cost, the part the
mechanism changes. Reports CPU (process CPU-s per wall-s) per 1,000 req/s of schedule,
share sent within 2 ms and p99 lateness (wake-up - due), medians over the rounds, and the
load average, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen.clock import Clock
from loadgen.live import LiveStats
from loadgen.replay import LoadShape, Replayer
from loadgen.wakeup import DeadlineTimer, make_deadline_timer

SPIN_NS = 1_200_000


class LegacySpinTimer:
    """The replay's wait before ``loadgen.wakeup``: the loop's timer until 1.2 ms before the
    due time, then ``sleep(0)`` until it."""

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    async def sleep_until(self, due_ns: int) -> None:
        while True:
            remaining = due_ns - time.perf_counter_ns()
            if remaining <= 0:
                return
            if remaining > SPIN_NS:
                await asyncio.sleep((remaining - SPIN_NS) / 1e9)
            else:
                await asyncio.sleep(0)


async def _one_round(
    timer: DeadlineTimer, rate: float, seconds: float, seed: int
) -> dict[str, float]:
    clock = Clock()
    replayer = Replayer(
        requests=[],
        shape=LoadShape(),
        client=None,  # type: ignore[arg-type]  # never reached: the bench only waits
        preparer=None,  # type: ignore[arg-type]
        sink=lambda record: None,
        stats=LiveStats(clock.now_ns),
        clock=clock,
        timer=timer,
    )
    rng = random.Random(seed)
    n = int(rate * seconds)
    t, offsets = 0.0, []
    for _ in range(n):
        offsets.append(int(t * 1e9))
        t += rng.expovariate(rate)
    timer.open()
    late: list[int] = []
    tasks: set[asyncio.Task[None]] = set()

    async def request() -> None:
        await asyncio.sleep(0)

    try:
        start = clock.now_ns() + 20_000_000
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for off in offsets:
            due = start + off
            await replayer._sleep_until(due)  # the replay's own wait
            late.append(clock.now_ns() - due)
            task = asyncio.create_task(request())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        timer.close()
    late_ms = sorted(x / 1e6 for x in late)
    return {
        "cpu_per_krps": cpu / wall / (rate / 1000),
        "cpu": cpu / wall,
        "on_time": sum(1 for x in late_ms if x <= 2.0) / len(late_ms),
        "p99_ms": late_ms[int(0.99 * (len(late_ms) - 1))],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="500,2000,5000")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the medians here")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    results: dict[tuple[str, float], list[dict[str, float]]] = {}
    load_before = os.getloadavg()[0]
    for rnd in range(args.rounds):
        for rate in rates:
            kinds = ["spin", "timer"] if rnd % 2 == 0 else ["timer", "spin"]
            for kind in kinds:
                timer = LegacySpinTimer() if kind == "spin" else make_deadline_timer()
                row = asyncio.run(_one_round(timer, rate, args.seconds, seed=rnd))
                results.setdefault((kind, rate), []).append(row)
    print(f"load average (1 min) before {load_before:.2f}, after {os.getloadavg()[0]:.2f}")
    print(
        f"{'rate':>6} {'kind':>6} {'CPU/core':>9} {'CPU per 1k req/s':>17} "
        f"{'<=2ms':>7} {'p99 ms':>7}"
    )
    doc: dict[str, object] = {"load_before": load_before, "rows": []}
    for rate in rates:
        for kind in ("spin", "timer"):
            rows = results[(kind, rate)]
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            doc["rows"].append({"rate": rate, "kind": kind, **med})  # type: ignore[attr-defined]
            print(
                f"{rate:>6.0f} {kind:>6} {med['cpu']:>9.3f} {med['cpu_per_krps']:>17.3f} "
                f"{med['on_time']:>7.1%} {med['p99_ms']:>7.3f}"
            )
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
