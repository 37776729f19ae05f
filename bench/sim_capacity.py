"""How many concurrent streams and tokens/s one simulator process serves on schedule.

One command::

    .venv/bin/python bench/sim_capacity.py [--levels 50,100,200,400,800] [--max-tokens 100]

Starts ``python -m loadgen.sim`` (its own process), then for each concurrency level opens that
many streaming completions at once from this process with a minimal raw-asyncio HTTP client,
and afterwards reads every request's server-side record (``/debug/requests/{id}``) to compare
each content chunk's write time with its schedule
``received + ttft + j * itl * tokens_per_chunk``. A level is "on schedule" when the 99th
percentile of lateness is within 1 ms. Prints one row per level and the capacity.
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

TTFT_MS = 20.0
ITL_MS = 10.0
LATE_LIMIT_MS = 1.0


async def _one_stream(host: str, port: int, request_id: str, body: bytes) -> int:
    """Send one streaming request over a fresh connection; return bytes read."""
    reader, writer = await asyncio.open_connection(host, port)
    head = (
        "POST /v1/completions HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"X-Request-Id: {request_id}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    writer.write(head + body)
    await writer.drain()
    total = 0
    while chunk := await reader.read(65536):
        total += len(chunk)
    writer.close()
    await writer.wait_closed()
    return total


async def _run_level(host: str, port: int, level: int, max_tokens: int) -> tuple[float, list[str]]:
    body = orjson.dumps({"prompt": "hello world", "max_tokens": max_tokens, "stream": True})
    ids = [f"lvl{level}-{i}" for i in range(level)]
    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for rid in ids:
            group.create_task(_one_stream(host, port, rid, body))
    return time.perf_counter() - start, ids


async def _lateness_ms(root_url: str, ids: list[str], tokens_per_chunk: int) -> list[float]:
    late: list[float] = []
    limit = asyncio.Semaphore(32)

    async def fetch(client: httpx.AsyncClient, rid: str) -> None:
        async with limit:
            record = (await client.get(f"{root_url}/debug/requests/{rid}")).json()
        first = record["received_ns"] + TTFT_MS * 1e6
        for j, write_ns in enumerate(record["chunk_write_ns"]):
            late.append((write_ns - (first + j * ITL_MS * tokens_per_chunk * 1e6)) / 1e6)

    async with httpx.AsyncClient(timeout=30.0) as client, asyncio.TaskGroup() as group:
        for rid in ids:
            group.create_task(fetch(client, rid))
    return late


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` (Linux /proc; else 0)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _bench(levels: list[int], max_tokens: int, tokens_per_chunk: int) -> None:
    args = ["--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)]
    args += ["--tokens-per-chunk", str(tokens_per_chunk)]
    with start_sim(args) as sim:
        split = urlsplit(sim.root_url)
        host, port = split.hostname or "127.0.0.1", split.port or sim.port
        print(f"simulator pid {sim.pid}: ttft {TTFT_MS} ms, itl {ITL_MS} ms, "
              f"{tokens_per_chunk} token(s)/chunk, {max_tokens} tokens/request")  # fmt: skip
        print(
            f"{'streams':>8} {'tok/s':>9} {'chunks':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
            f"{'sim CPU us/chunk':>17}"
        )
        capacity = (0, 0.0)
        cpu_per_chunk_us: list[float] = []
        for level in levels:
            cpu_before = _cpu_s(sim.pid)
            wall_s, ids = await _run_level(host, port, level, max_tokens)
            cpu_s = _cpu_s(sim.pid) - cpu_before
            late = await _lateness_ms(sim.root_url, ids, tokens_per_chunk)
            tokens_s = level * max_tokens / wall_s
            p99 = _quantile(late, 0.99)
            print(
                f"{level:>8} {tokens_s:>9.0f} {len(late):>8} {statistics.median(late):>8.3f} "
                f"{p99:>8.3f} {max(late):>8.3f} {cpu_s / len(late) * 1e6:>17.1f}"
            )
            cpu_per_chunk_us.append(cpu_s / len(late) * 1e6)
            if p99 <= LATE_LIMIT_MS:
                capacity = max(capacity, (level, tokens_s))
        print(
            f"capacity: {capacity[0]} concurrent streams, {capacity[1]:.0f} tokens/s "
            f"with p99 chunk lateness <= {LATE_LIMIT_MS} ms"
        )
        if cpu_per_chunk_us:
            per_chunk = statistics.median(cpu_per_chunk_us)
            print(
                f"sim CPU per chunk (incl. connection setup): {per_chunk:.1f} us -> at most "
                f"{1e6 / per_chunk:.0f} chunks/s on one fully available core"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="50,100,200,400,800,1600")
    parser.add_argument("--max-tokens", type=int, default=100)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    options = parser.parse_args()
    levels = [int(x) for x in options.levels.split(",")]
    asyncio.run(_bench(levels, options.max_tokens, options.tokens_per_chunk))


if __name__ == "__main__":
    main()
