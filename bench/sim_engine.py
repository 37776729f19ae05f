"""How many concurrent streams and tokens/s one physics-engine simulator process serves on time.

One command::

    .venv/bin/python bench/sim_engine.py [--levels 64,128,256,512] [--max-tokens 200]

Starts ``python -m loadgen.sim --model llama-3.1-8b --gpu h100`` (its own process, one
replica, ``--max-num-seqs`` above the highest level so every stream decodes in one batch),
opens ``level`` streaming completions at once with a minimal raw-asyncio client, then reads
each request's server record (``/debug/requests/{id}``): every content chunk's write time
against the instant the engine scheduled it for (``chunk_due_ns``, the end of its step).
A level is on schedule when the 99th percentile of lateness is within 1 ms. Also prints the
simulator's CPU per emitted token, which bounds tokens/s on one core.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from urllib.parse import urlsplit

import httpx
import orjson

from loadgen.sim.launch import start_sim

LATE_LIMIT_MS = 1.0


async def _one_stream(host: str, port: int, request_id: str, body: bytes) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    head = (
        "POST /v1/completions HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nX-Request-Id: {request_id}\r\nConnection: close\r\n\r\n"
    ).encode()
    writer.write(head + body)
    await writer.drain()
    while await reader.read(65536):
        pass
    writer.close()
    await writer.wait_closed()


def _cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _level(root: str, host: str, port: int, level: int, tokens: int, pid: int) -> None:
    body = orjson.dumps({"prompt": "w " * 200, "max_tokens": tokens, "stream": True})
    ids = [f"e{level}-{i}" for i in range(level)]
    cpu0, t0 = _cpu_s(pid), time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for rid in ids:
            group.create_task(_one_stream(host, port, rid, body))
    wall, cpu = time.perf_counter() - t0, _cpu_s(pid) - cpu0
    late: list[float] = []
    async with httpx.AsyncClient(timeout=30) as client:
        for rid in ids:
            rec = (await client.get(f"{root}/debug/requests/{rid}")).json()
            late += [
                (w - d) / 1e6
                for w, d in zip(rec["chunk_write_ns"], rec["chunk_due_ns"], strict=True)
            ]
    late.sort()
    p99 = late[min(len(late) - 1, int(0.99 * len(late)))]
    verdict = "on schedule" if p99 <= LATE_LIMIT_MS else "LATE"
    print(
        f"{level:>7} {level * tokens / wall:>9.0f} {statistics.median(late):>8.3f} {p99:>8.3f} "
        f"{late[-1]:>8.3f} {cpu / len(late) * 1e6:>10.1f}  {verdict}"
    )


async def _bench(levels: list[int], tokens: int, scale: float) -> None:
    args = ["--model", "llama-3.1-8b", "--gpu", "h100", "--clock-scale", str(scale)]
    args += ["--max-num-seqs", str(max(levels) + 1)]
    with start_sim(args) as sim:
        split = urlsplit(sim.root_url)
        host, port = split.hostname or "127.0.0.1", split.port or sim.port
        print(f"simulator pid {sim.pid}: llama-3.1-8b on 1 x h100, time scale {scale}, "
              f"{tokens} tokens/request")  # fmt: skip
        columns = ("streams", "tok/s", "p50 ms", "p99 ms", "max ms", "CPU us/tok")
        print(" ".join(f"{c:>{w}}" for c, w in zip(columns, (7, 9, 8, 8, 8, 10), strict=True)))
        for level in levels:
            await _level(sim.root_url, host, port, level, tokens, sim.pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="32,64,128,256,512")
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--time-scale", type=float, default=1.0)
    options = parser.parse_args()
    levels = [int(x) for x in options.levels.split(",")]
    asyncio.run(_bench(levels, options.max_tokens, options.time_scale))


if __name__ == "__main__":
    main()
