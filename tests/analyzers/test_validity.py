"""Run validity flags: client-bound, unfaithful, too small."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from runbuilders import health, make_run, run_info

from analyzers.analysis import AnalysisOptions
from analyzers.decompose import DecomposeOptions, decompose
from analyzers.metrics import analyze
from analyzers.validity import ClassCount, assess_validity, min_requests_for
from reports.jsondoc import validity_json
from traces import schema as s
from traces.health import Backpressure, GeneratorHealth, LagSummary, Stall, StallLog
from traces.io import write_run_info
from traces.records import RequestRecord, records_to_batch

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


def test_a_stall_over_50_ms_in_the_stall_log_is_a_caveat_with_its_cause(tmp_path: Path) -> None:
    stalls = StallLog(
        threshold_ms=20.0,
        count=2,
        worst_ms=63.0,
        stalls=(
            Stall(shard=0, start_s=1.5, duration_ms=25.0, cause="gc"),
            Stall(shard=1, start_s=4.25, duration_ms=63.0, cause="host"),
        ),
    )
    generator = replace(
        health(loop_lag_ms=4.0, schedule_lag_ms=0.5),
        loop_lag_ms=LagSummary(samples=10_000, p50_ms=0.3, p99_ms=4.0, max_ms=63.0),
        stalls=stalls,
    )
    run = write_run(tmp_path / "run", [rec(i) for i in range(3)], generator=generator)
    a = analyze(run, AnalysisOptions(percentiles=(50.0,)))
    assert a.validity.stall
    assert a.validity.valid  # a caveat: under 100 ms the run is not client-bound
    (reason,) = [r for r in a.validity.reasons if r.startswith("stall:")]
    assert "1 event-loop stall(s) over 50 ms, the worst 63 ms at 4.2 s (cause: host" in reason
    assert validity_json(a.validity)["stall"] is True
    short = replace(generator, stalls=replace(stalls, stalls=stalls.stalls[:1], worst_ms=25.0))
    b = analyze(
        write_run(tmp_path / "short", [rec(i) for i in range(3)], generator=short),
        AnalysisOptions(percentiles=(50.0,)),
    )
    assert not b.validity.stall


def test_stamp_delay_from_run_json_is_client_bound(tmp_path: Path) -> None:
    # Sends on time and a calm p99 loop lag; bytes waited 400 ms once to be stamped.
    generator = replace(
        health(loop_lag_ms=4.0, schedule_lag_ms=0.5),
        stamp_delay_ms=LagSummary(samples=3000, p50_ms=0.1, p99_ms=3.0, max_ms=400.0),
    )
    run = write_run(tmp_path / "run", [rec(i) for i in range(3)], generator=generator)
    a = analyze(run, AnalysisOptions(percentiles=(50.0,)))
    assert a.health.stamp_delay_max_ms == 400.0
    assert a.validity.client_bound
    assert [r for r in a.validity.reasons if "bytes waited 400 ms > 100 ms to be stamped" in r]
    busy = replace(
        generator, stamp_delay_ms=LagSummary(samples=3000, p50_ms=2, p99_ms=35.0, max_ms=60)
    )
    b = analyze(
        write_run(tmp_path / "busy", [rec(i) for i in range(3)], generator=busy),
        AnalysisOptions(percentiles=(50.0,)),
    )
    assert [r for r in b.validity.reasons if "stamp delay p99 35.0 ms" in r]
    calm = replace(
        generator, stamp_delay_ms=LagSummary(samples=3000, p50_ms=0.1, p99_ms=1, max_ms=9)
    )
    c = analyze(
        write_run(tmp_path / "calm", [rec(i) for i in range(3)], generator=calm),
        AnalysisOptions(percentiles=(50.0,)),
    )
    assert c.validity.valid


def test_a_max_inflight_hold_is_backpressure_not_client_bound(tmp_path: Path) -> None:
    # The rows' lag is 200 ms (the cap's hold); the client's own was 0.4 ms.
    held = LagSummary(samples=99, p50_ms=150.0, p99_ms=200.0, max_ms=210.0)
    generator = replace(
        health(schedule_lag_ms=200.0),
        backpressure=Backpressure(
            max_inflight=8,
            held=99,
            hold_ms=held,
            dispatch_lag_ms=LagSummary(samples=100, p50_ms=0.1, p99_ms=0.4, max_ms=0.5),
        ),
    )
    records = [rec(i, lag_ms=200.0 if i else 0.1) for i in range(100)]
    a = analyze(
        write_run(tmp_path / "run", records, generator), AnalysisOptions(percentiles=(50.0,))
    )
    assert a.validity.backpressure
    assert not a.validity.client_bound
    assert a.validity.valid
    assert a.validity.reasons == (
        "backpressure: 99 requests waited for --max-inflight 8; p99 wait 200.0 ms: the offered "
        "load was not the trace's",
    )
    # The client late beyond the hold is client-bound all the same.
    late = replace(
        generator,
        backpressure=replace(
            generator.backpressure,  # type: ignore[type-var]
            dispatch_lag_ms=LagSummary(samples=100, p50_ms=3, p99_ms=12.0, max_ms=20),
        ),
    )
    b = analyze(write_run(tmp_path / "late", records, late), AnalysisOptions(percentiles=(50.0,)))
    assert b.validity.backpressure
    assert b.validity.client_bound
    assert "beyond the --max-inflight wait" in b.validity.reasons[1]


@pytest.mark.parametrize(
    ("slip_ms", "ttft_ms", "flagged"),
    [
        (1.0, 10.0, False),  # under 5 ms: within the 10% / 5 ms the decomposition is held to
        (30.0, 10.0, True),
        (30.0, 2000.0, False),  # 1.5% of a 2 s TTFT
        (150.0, 2000.0, True),
    ],
)
def test_simulator_slip_flags_the_run_everywhere(
    tmp_path: Path, slip_ms: float, ttft_ms: float, flagged: bool
) -> None:
    records = [
        rec(
            i,
            first_token_ns=T0 + i * 100 * MS + int(ttft_ms * MS),
            end_ns=T0 + i * 100 * MS + int(ttft_ms * MS),
            server_ttft_ms=ttft_ms,
            server_slip_ms=slip_ms,
        )
        for i in range(100)
    ]
    run = write_run(tmp_path / "run", records)
    a = analyze(run, AnalysisOptions(percentiles=(50.0,)))
    assert a.validity.sim_slip == flagged, a.validity.reasons
    assert a.validity.valid == (not flagged)
    if flagged:
        assert (
            f"simulator slip: it wrote chunks p99 {slip_ms:.1f} ms later" in a.validity.reasons[0]
        )
        assert validity_json(a.validity)["sim_slip"] is True


@pytest.mark.parametrize(("slip_ms", "flagged"), [(1.0, False), (30.0, True)])
def test_decompose_carries_the_simulator_slip(
    tmp_path: Path, slip_ms: float, flagged: bool
) -> None:
    # decompose builds its own validity from the rows it splits: the flag reaches it too.
    run = make_run(tmp_path / "run", slip_ms=slip_ms)
    d = decompose(run, None, DecomposeOptions(percentiles=(50.0,)))
    assert d.validity.sim_slip == flagged, d.validity.reasons


def test_runs_without_slip_or_stamp_delay_are_read_as_before(tmp_path: Path) -> None:
    # A run.json of version 3 (no stamp delay) and rows without server_slip_ms.
    run = write_run(tmp_path / "run", [rec(i) for i in range(3)], generator=health())
    table = pq.read_table(run / s.REQUESTS_FILE).drop_columns([s.SERVER_SLIP_MS])
    pq.write_table(table, run / s.REQUESTS_FILE)
    doc = json.loads((run / s.RUN_JSON).read_text())
    doc["schema_version"] = 3
    (run / s.RUN_JSON).write_text(json.dumps(doc))
    a = analyze(run, AnalysisOptions(percentiles=(50.0,)))
    assert a.health.stamp_delay_p99_ms is None
    assert a.health.cap is None
    assert a.validity.valid
