"""Hand-built run directories shared by the analyzer tests (on the test path via
pytest's ``pythonpath``; not a test module)."""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.run.options import SessionOptions
from traces.io import write_run_info
from traces.prompts.maker import PromptStrategy
from traces.records import RequestRecord, records_to_batch
from traces.runinfo import (
    Backpressure,
    Capabilities,
    ClockAnchor,
    Endpoint,
    GeneratorHealth,
    GeneratorInfo,
    LagSummary,
    PromptsInfo,
    RunInfo,
    RunLoad,
    RunResult,
    TraceRef,
)


def request_record(i: int, request_id: str, **fields: Any) -> RequestRecord:
    """Row ``i`` of run ``r``: a chat request named ``request_id`` (``x-`` before it as its
    ``x_request_id``) of 100 prompt and 2 output tokens, with ``fields`` set or replacing
    those."""
    identity: dict[str, Any] = {
        "run_id": "r",
        "trace_index": i,
        "request_id": request_id,
        "x_request_id": f"x-{request_id}",
        "workload": "chat",
        "api": "chat",
        "input_tokens": 100,
        "output_tokens": 2,
    }
    return RequestRecord(**(identity | fields))


def lag(p99_ms: float) -> LagSummary:
    """A lag distribution whose p99 (and max) is ``p99_ms``."""
    return LagSummary(samples=100, p50_ms=p99_ms / 4, p99_ms=p99_ms, max_ms=p99_ms)


def health(
    *, schedule_lag_ms: float = 0.2, loop_lag_ms: float = 0.5, cpu: float = 0.1
) -> GeneratorHealth:
    """One worker's health with the given p99 lags and CPU share."""
    return GeneratorHealth(
        schedule_lag_ms=lag(schedule_lag_ms),
        loop_lag_ms=lag(loop_lag_ms),
        cpu_utilisation=cpu,
        cpu_s=cpu * 10,
        client_bound=False,
        warnings=(),
        workers=(),
    )


def run_info(
    *,
    run_id: str = "r",
    base_url: str = "http://127.0.0.1:8000/v1",
    model: str = "m",
    trace_path: str = "trace.parquet",
    trace_source: str | None = None,
    trace_sha256: str = "0" * 64,
    requests: int = 400,
    anchor_wall_ns: int = 1_000_000_000_000,
    duration_s: float | None = 20.0,
    status: str = "completed",
    generator_health: GeneratorHealth | None = None,
) -> RunInfo:
    """A complete ``RunInfo`` as a finished open-loop replay of ``trace_path`` would write
    it (``duration_s`` None: no ``result`` yet)."""
    opts = SessionOptions(trace_path=Path(trace_path), run_dir=Path(run_id), base_url=base_url)
    return RunInfo(
        run_id=run_id,
        generator=GeneratorInfo(name="llm-loadgen", version="0.1.0"),
        config=opts.public_config(),
        endpoint=Endpoint(
            base_url=base_url, model=model, served_models=(model,), capabilities=Capabilities()
        ),
        load=RunLoad(mode="open", time_factor=1.0, requests=requests, workers=1),
        trace=TraceRef(
            path=trace_path,
            sha256=trace_sha256,
            metadata={"schema_version": 1, "kind": "trace"}
            | ({"source": trace_source} if trace_source else {}),
        ),
        prompts=PromptsInfo(
            strategy=PromptStrategy(name="words", block_size=512, seed=0), calibration=None
        ),
        clock=ClockAnchor(
            anchor_wall_ns=anchor_wall_ns,
            anchor_mono_ns=0,
            source="perf_counter_ns (CLOCK_MONOTONIC)",
            assumption="one host: every worker reads the same CLOCK_MONOTONIC",
        ),
        versions={"llm-loadgen": "0.1.0", "python": "3.11"},
        status=status,
        result=None
        if duration_s is None
        else RunResult(
            dispatched=requests,
            rows=requests,
            start_ns=anchor_wall_ns,
            end_ns=anchor_wall_ns + int(duration_s * 1e9),
            duration_s=duration_s,
            by_outcome={"ok": requests},
        ),
        health=generator_health,
    )


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
    held_ms: float = 0.0,
    slip_ms: float | None = None,
) -> Path:
    """A hand-built run: TTFT ~ lognormal around 100 ms (x ``slow`` + ``ttft_shift_ms``),
    20 tokens at ~10 ms x ``slow``; the first ``fail_first`` requests end with ``outcome``.
    ``held_ms``: every request but the first was held that long by a ``--max-inflight 4``
    (the rows' schedule lag, and run.json's ``backpressure``); ``slip_ms``: the simulator's
    reported slip on every ok row."""
    rng = random.Random(seed)
    records = []
    t0 = 1_000_000_000_000
    for i in range(n):
        due = t0 + i * 50_000_000
        sent = due + int((schedule_lag_ms + (held_ms if i else 0.0)) * 1e6)
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
            request_record(
                i,
                f"req-{i}",
                x_request_id=f"x-{i}",
                workload=workloads[i % len(workloads)],
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
                server_slip_ms=None if failed else slip_ms,
            )
        )
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_batches([records_to_batch(records)]), path / "requests.parquet")
    write_run_info(
        path,
        run_info(
            requests=n,
            # The rows' identity (request ids and token counts) depends on n alone, so the
            # trace's hash does too: compare and gate tell these runs' traces apart as they
            # would by their rows.
            trace_sha256=hashlib.sha256(f"make_run n={n}".encode()).hexdigest(),
            anchor_wall_ns=t0,
            generator_health=replace(
                health(schedule_lag_ms=schedule_lag_ms + held_ms, loop_lag_ms=0.5, cpu=0.1),
                backpressure=Backpressure(
                    max_inflight=4,
                    held=n - 1,
                    hold_ms=lag(held_ms),
                    dispatch_lag_ms=lag(schedule_lag_ms),
                )
                if held_ms
                else None,
            ),
        ),
    )
    return path


def make_sweep(
    path: Path, slowness: dict[float, float], lag_ms: dict[float, float] | None = None
) -> Path:
    """A sweep directory whose step at load ``r`` (req/s) is a ``make_run`` of 120 requests
    ``slowness[r]`` times slower, sent ``lag_ms[r]`` late (client-bound above 5 ms)."""
    lags = lag_ms or {}
    steps = []
    for i, (load, slow) in enumerate(sorted(slowness.items())):
        make_run(path / f"step-{i}", n=120, seed=i, slow=slow, schedule_lag_ms=lags.get(load, 0))
        steps.append({"index": i, "dir": f"step-{i}", "label": f"{load:g}/s", "offered": load})
    doc = {"mode": "rate", "load_unit": "req/s", "trace": {"sha256": "abc"}, "steps": steps}
    (path / "sweep.json").write_text(json.dumps(doc))
    return path
