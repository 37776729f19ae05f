"""The open-loop baseline of ``bench/replay_schedule.py`` (c): the least a client can do per
request, measured on the same host, stub server and schedule as ``loadgen replay``.

    .venv/bin/python bench/open_loop_raw.py --port PORT --trace T.parquet --out R.json

Replays the trace's due times (its ``arrival_s``, from a start 0.2 s after the pool is
warm) on uvloop with the replay's own wake-up timer (``loadgen.wakeup``): at each due time
it writes one fixed chat request (only its ``X-Request-Id`` differs) on an idle keep-alive
connection (a new one when none is idle) and reads the streamed response with the raw
reader of ``bench/client_ingest.py`` (stamp on arrival, count the events). No prompt, no
body building, no record, no statistics. Writes lateness (sent - due, ns) of every request,
how many were answered in full, and the process's CPU over the schedule as a share of one
core, so that the replay's CPU per request reads as a ratio to this one: what the host's
speed does to both cancels out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
_WARM_CONNECTIONS = 32
_START_DELAY_NS = 200_000_000


async def _replay(port: int, offsets_ns: list[int], tokens: int) -> dict[str, object]:
    import client_ingest as ingest  # beside this script, on sys.path

    from loadgen.wakeup import make_deadline_timer

    loop = asyncio.get_running_loop()
    body = ingest._request_body(tokens)
    extra = "".join(f"{k}: {v}\r\n" for k, v in ingest._bench_headers(0, False).items())
    prefix = ingest.raw_head_prefix(port, len(body), extra)
    idle: list[ingest._RawConn] = []
    for _ in range(_WARM_CONNECTIONS):
        _, conn = await loop.create_connection(ingest._RawConn, ingest.HOST, port)
        idle.append(conn)
    late: list[int] = []
    answered = 0

    async def one(index: int, due: int) -> None:
        nonlocal answered
        if idle:
            conn = idle.pop()
        else:
            _, conn = await loop.create_connection(ingest._RawConn, ingest.HOST, port)
        sent, reads = await conn.request(prefix + b"raw-%d\r\n\r\n" % index, body)
        late.append(sent - due)
        if reads and reads[-1][1] == tokens + ingest.EXTRA_EVENTS:
            answered += 1
        idle.append(conn)

    timer = make_deadline_timer()
    timer.open()
    tasks: set[asyncio.Task[None]] = set()
    start = time.perf_counter_ns() + _START_DELAY_NS
    await timer.sleep_until(start)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for index, offset in enumerate(offsets_ns):
        due = start + offset
        await timer.sleep_until(due)  # returns at once for one already due: no yield
        task = loop.create_task(one(index, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    while tasks:
        await asyncio.wait(set(tasks))
    cores = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    timer.close()
    for conn in idle:
        if conn.transport is not None:
            conn.transport.close()
    return {"late_ns": late, "answered": answered, "client_cores": cores}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True, help="the stub server's port")
    parser.add_argument("--trace", type=Path, required=True, help="the replay's trace")
    parser.add_argument("--out", type=Path, required=True, help="where the JSON goes")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]
    import client_ingest as ingest

    from traces.io import read_trace_table

    table = read_trace_table(args.trace)
    arrivals = table.column("arrival_s").to_pylist()
    tokens = int(table.column("output_tokens")[0].as_py())
    offsets = [round((a - arrivals[0]) * 1e9) for a in arrivals]
    result, _ = ingest._run_loop(_replay(args.port, offsets, tokens))
    args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
