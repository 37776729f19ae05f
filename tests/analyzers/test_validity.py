"""Run validity flags: client-bound, unfaithful, too small."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from runbuilders import health, run_info

from analyzers.metrics import AnalysisOptions, analyze
from analyzers.validity import ClassCount, assess_validity, min_requests_for
from traces import schema as s
from traces.io import write_run_info
from traces.records import RequestRecord, records_to_batch
from traces.runinfo import GeneratorHealth, LagSummary

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def rec(i: int, lag_ms: float = 0.0, **kw: Any) -> RequestRecord:
    due = T0 + i * 100 * MS
    sent = due + int(lag_ms * MS)
    base: dict[str, Any] = {
        "run_id": "r",
        "trace_index": i,
        "request_id": f"q{i}",
        "x_request_id": f"r-q{i}",
        "workload": "text",
        "api": "chat",
        "input_tokens": 10,
        "output_tokens": 1,
        "due_ns": due,
        "sent_ns": sent,
        "first_token_ns": sent + 10 * MS,
        "end_ns": sent + 10 * MS,
        "chunk_offsets_us": [10_000],
        "prompt_tokens": 10,
        "outcome": s.OUTCOME_OK,
    }
    base.update(kw)
    return RequestRecord(**base)


def write_run(
    path: Path, records: list[RequestRecord], generator: GeneratorHealth | None = None
) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_batches([records_to_batch(records)]), path / s.REQUESTS_FILE)
    if generator is not None:
        write_run_info(path, run_info(requests=len(records), generator_health=generator))
    return path


@pytest.mark.parametrize(
    ("p", "n"), [(50, 2), (90, 10), (95, 20), (99, 100), (99.9, 1000), (99.99, 10000)]
)
def test_min_requests_for(p: float, n: int) -> None:
    assert min_requests_for(p) == n


def test_nothing_wrong_is_valid() -> None:
    v = assess_validity(
        schedule_lag_p99_ms=1.0,
        loop_lag_p99_ms=2.0,
        prompt_error_median=0.01,
        class_counts=[ClassCount(workload="text", requests=200)],
        percentiles=(50.0, 99.0),
    )
    assert v.valid
    assert v.reasons == ()


def test_each_flag_has_a_reason() -> None:
    v = assess_validity(
        schedule_lag_p99_ms=12.0,
        loop_lag_p99_ms=50.0,
        prompt_error_median=0.2,
        class_counts=[ClassCount(workload="long", requests=40)],
        percentiles=(50.0, 99.0),
    )
    assert v.client_bound
    assert v.unfaithful
    assert v.too_small
    assert not v.valid
    assert [f.kind for f in v.flags] == ["client_bound", "client_bound", "unfaithful", "too_small"]
    assert "schedule lag p99 12.0 ms" in v.reasons[0]
    assert "event-loop lag p99 50.0 ms" in v.reasons[1]
    assert "20.0%" in v.reasons[2]
    assert "p99 of 'long' rest on 40 requests (p99 needs >= 100)" in v.reasons[3]


def test_run_with_late_sends_is_client_bound(tmp_path: Path) -> None:
    records = [rec(i, lag_ms=30.0 if i % 10 == 0 else 0.1) for i in range(100)]
    a = analyze(write_run(tmp_path / "run", records), AnalysisOptions(percentiles=(50.0,)))
    assert a.validity.client_bound
    assert not a.validity.too_small
    assert not a.validity.unfaithful
    on_time = [rec(i, lag_ms=0.2) for i in range(100)]
    b = analyze(write_run(tmp_path / "ok", on_time), AnalysisOptions(percentiles=(50.0,)))
    assert b.validity.valid


def test_event_loop_lag_from_run_json(tmp_path: Path) -> None:
    generator = health(loop_lag_ms=80.0, schedule_lag_ms=0.5)
    run = write_run(tmp_path / "run", [rec(i) for i in range(3)], generator=generator)
    a = analyze(run, AnalysisOptions(percentiles=(50.0,)))
    assert a.health.loop_lag_p99_ms == 80.0
    assert a.validity.client_bound
    assert "event-loop lag" in a.validity.reasons[0]


def test_one_long_event_loop_stall_from_run_json_is_client_bound(tmp_path: Path) -> None:
    # The p99 loop lag is fine; one 2 s stall late-stamped every chunk that arrived in it.
    generator = replace(
        health(loop_lag_ms=4.0, schedule_lag_ms=0.5),
        loop_lag_ms=LagSummary(samples=10_000, p50_ms=0.3, p99_ms=4.0, max_ms=2000.0),
    )
    run = write_run(tmp_path / "run", [rec(i) for i in range(3)], generator=generator)
    a = analyze(run, AnalysisOptions(percentiles=(50.0,)))
    assert a.health.loop_lag_max_ms == 2000.0
    assert a.validity.client_bound
    assert [r for r in a.validity.reasons if "stall of 2000 ms" in r]
    calm = replace(generator, loop_lag_ms=LagSummary(samples=10, p50_ms=0.3, p99_ms=4, max_ms=50))
    b = analyze(
        write_run(tmp_path / "calm", [rec(i) for i in range(3)], generator=calm),
        AnalysisOptions(percentiles=(50.0,)),
    )
    assert not b.validity.client_bound
