"""Synthetic run directories for the report tests, written with pyarrow."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from runbuilders import run_info

from traces import schema as s
from traces.io import write_run_info

T0 = 1_800_000_000_000_000_000


def write_synthetic_run(
    directory: Path, *, requests: int, chunks: int = 8, seed: int = 1, slow: float = 1.0
) -> Path:
    """A run of ``requests`` rows at 50 req/s, two classes, ``chunks`` content chunks each,
    some failures; ``slow`` scales the server's latencies. Returns the run directory."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    cols: dict[str, list[object]] = {
        k: []
        for k in (
            s.RUN_ID, s.REQUEST_ID, s.WORKLOAD, s.INPUT_TOKENS, s.OUTPUT_TOKENS, s.DUE_NS,
            s.SENT_NS, s.REQUEST_WRITTEN_NS, s.FIRST_BYTE_NS, s.FIRST_TOKEN_NS, s.END_NS,
            s.CHUNK_OFFSETS_US, s.PROMPT_TOKENS, s.COMPLETION_TOKENS, s.CACHED_TOKENS,
            s.OUTCOME, s.SERVER_QUEUE_MS, s.SERVER_PREFILL_MS, s.SERVER_TRANSFER_MS,
            s.SERVER_FIRST_TOKEN_MS, s.SERVER_TTFT_MS,
        )
    }  # fmt: skip
    due = T0
    for i in range(requests):
        due += int(rng.expovariate(50.0) * 1e9)
        sent = due + int(rng.expovariate(1 / 0.3) * 1e6)
        prompt = rng.randint(200, 4000)
        queue, prefill, first = rng.expovariate(1 / 5.0) * slow, prompt * 0.01 * slow, 8.0
        net = 0.5
        ttft_ms = net + queue + prefill + first
        tpot_us = int(rng.uniform(9_000, 14_000) * slow)
        ft_us = int((0.1 + ttft_ms) * 1000)
        offsets = [ft_us + k * tpot_us for k in range(chunks)]
        failed = i % 97 == 5
        cols[s.RUN_ID].append("synthetic")
        cols[s.REQUEST_ID].append(f"r{i}")
        cols[s.WORKLOAD].append("long" if i % 5 == 0 else "text")
        cols[s.INPUT_TOKENS].append(prompt)
        cols[s.OUTPUT_TOKENS].append(chunks)
        cols[s.DUE_NS].append(due)
        cols[s.SENT_NS].append(sent)
        cols[s.REQUEST_WRITTEN_NS].append(sent + 100_000)
        cols[s.FIRST_BYTE_NS].append(sent + ft_us * 1000 - 50_000)
        cols[s.FIRST_TOKEN_NS].append(sent + ft_us * 1000)
        cols[s.END_NS].append(sent + (offsets[-1] + 500) * 1000)
        cols[s.CHUNK_OFFSETS_US].append(offsets)
        cols[s.PROMPT_TOKENS].append(prompt + (1 if i % 3 == 0 else 0))
        cols[s.COMPLETION_TOKENS].append(chunks)
        cols[s.CACHED_TOKENS].append(0)
        cols[s.OUTCOME].append("http_error" if failed else "ok")
        cols[s.SERVER_QUEUE_MS].append(queue)
        cols[s.SERVER_PREFILL_MS].append(prefill)
        cols[s.SERVER_TRANSFER_MS].append(0.0)
        cols[s.SERVER_FIRST_TOKEN_MS].append(first)
        cols[s.SERVER_TTFT_MS].append(queue + prefill + first)
    fields = {f.name: f for f in s.RUN_SCHEMA}
    table = pa.table(
        {k: pa.array(v, type=fields[k].type) for k, v in cols.items()},
    )
    pq.write_table(table, directory / s.REQUESTS_FILE)
    info = run_info(
        run_id=f"synthetic-{seed}",
        # Credentials in the URL: the report must show it without them.
        base_url="http://user:secret@127.0.0.1:8000/v1?key=abc",
        trace_source="synth",
        requests=requests,
        anchor_wall_ns=T0,
        duration_s=(due - T0) / 1e9,
    )
    write_run_info(directory, info)
    return directory


@pytest.fixture(scope="session")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 600-request run."""
    return write_synthetic_run(tmp_path_factory.mktemp("runs") / "a", requests=600)


@pytest.fixture(scope="session")
def slower_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same trace served 30% slower."""
    return write_synthetic_run(tmp_path_factory.mktemp("runs") / "b", requests=600, slow=1.3)
