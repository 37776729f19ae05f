"""Hand-built run directories shared by the analyzer tests (on the test path via
pytest's ``pythonpath``; not a test module)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.run.runinfo import write_run_json
from traces.records import RequestRecord, records_to_batch


def make_run(
    path: Path,
    *,
    n: int = 400,
    seed: int = 0,
    slow: float = 1.0,
    ttft_shift_ms: float = 0.0,
    outcome: str = "ok",
    fail_first: int = 0,
    transfer_ms: float = 0.0,
    schedule_lag_ms: float = 0.0,
    workloads: tuple[str, ...] = ("text",),
) -> Path:
    """A hand-built run: TTFT ~ lognormal around 100 ms (x ``slow`` + ``ttft_shift_ms``),
    20 tokens at ~10 ms x ``slow``; the first ``fail_first`` requests end with ``outcome``."""
    rng = random.Random(seed)
    records = []
    t0 = 1_000_000_000_000
    for i in range(n):
        due = t0 + i * 50_000_000
        sent = due + int(schedule_lag_ms * 1e6)
        queue = rng.lognormvariate(math.log(40), 0.5) * slow
        prefill = 50.0 * slow
        first = 10.0 * slow
        server_ttft = queue + prefill + transfer_ms + first
        ttft = server_ttft + 1.0 + ttft_shift_ms
        gaps = [rng.lognormvariate(math.log(10), 0.2) * slow for _ in range(19)]
        offsets = [int(ttft * 1000)]
        for g in gaps:
            offsets.append(offsets[-1] + int(g * 1000))
        failed = i < fail_first
        written = sent + 500_000
        records.append(
            RequestRecord(
                run_id="r",
                trace_index=i,
                request_id=f"req-{i}",
                x_request_id=f"x-{i}",
                workload=workloads[i % len(workloads)],
                api="chat",
                input_tokens=100,
                output_tokens=20,
                due_ns=due,
                sent_ns=sent,
                request_written_ns=written,
                first_byte_ns=None if failed else sent + offsets[0] * 1000,
                first_token_ns=None if failed else sent + offsets[0] * 1000,
                end_ns=sent + (5_000_000 if failed else offsets[-1] * 1000 + 1000),
                chunk_offsets_us=[] if failed else offsets,
                prompt_tokens=None if failed else 100,
                completion_tokens=None if failed else 20,
                outcome=outcome if failed else "ok",
                http_status=None if failed else 200,
                server_queue_ms=None if failed else queue,
                server_prefill_ms=None if failed else prefill,
                server_transfer_ms=None if failed else transfer_ms,
                server_first_token_ms=None if failed else first,
                server_ttft_ms=None if failed else server_ttft + ttft_shift_ms,
            )
        )
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_batches([records_to_batch(records)]), path / "requests.parquet")
    write_run_json(
        path,
        {
            "run_id": "r",
            "trace": {"path": "trace.parquet"},
            "health": {
                "schedule_lag_ms": {"p99_ms": schedule_lag_ms},
                "loop_lag_ms": {"p99_ms": 0.5},
                "cpu_utilisation": 0.1,
                "client_bound": False,
            },
        },
    )
    return path
