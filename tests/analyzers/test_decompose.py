"""TTFT decomposition on hand-built runs whose true split is known."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzers.decompose import (
    TERMS,
    BudgetModel,
    DecomposeOptions,
    decompose,
    request_terms,
)
from analyzers.decompose.columns import OVERSHOOT_MS, SERVER_SIDE_MS, TOTAL_MS, term_col
from analyzers.errors import AnalyzerError
from reports.jsondoc import decomposition_json
from traces import schema as s
from traces.records import RequestRecord, records_to_batch

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
NET_MS = 0.5


def rec(
    i: int,
    *,
    prompt: int = 1000,
    queue_ms: float = 0.0,
    prefill_ms: float | None = None,
    first_ms: float = 5.0,
    gap_ms: float = 100.0,
    **kw: Any,
) -> RequestRecord:
    """A request whose server spent queue + prefill (10 ms + 50 µs/token) + first token."""
    prefill = prefill_ms if prefill_ms is not None else 10.0 + 0.05 * prompt
    due = T0 + int(i * gap_ms * MS)
    sent = due + MS // 10
    written = sent + MS
    ttft = queue_ms + prefill + first_ms
    first = written + int((NET_MS + ttft) * MS)
    base: dict[str, Any] = {
        "run_id": "r",
        "trace_index": i,
        "request_id": f"q{i}",
        "x_request_id": f"r-q{i}",
        "workload": "long" if prompt >= 1000 else "short",
        "api": "chat",
        "input_tokens": prompt,
        "output_tokens": 2,
        "due_ns": due,
        "sent_ns": sent,
        "request_written_ns": written,
        "headers_ns": written + MS // 4,
        "first_byte_ns": written + MS // 4,
        "first_token_ns": first,
        "end_ns": first + 5 * MS,
        "chunk_offsets_us": [(first - sent) // 1000, (first - sent) // 1000 + 5000],
        "chunk_tokens": [1, 1],
        "prompt_tokens": prompt,
        "completion_tokens": 2,
        "cached_tokens": 0,
        "outcome": s.OUTCOME_OK,
        "server_queue_ms": queue_ms,
        "server_prefill_ms": prefill,
        "server_transfer_ms": 0.0,
        "server_first_token_ms": first_ms,
        "server_ttft_ms": ttft,
    }
    base.update(kw)
    return RequestRecord(**base)


def write_run(path: Path, records: list[RequestRecord]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_batches([records_to_batch(records)]), path / s.REQUESTS_FILE)
    return path


LENGTHS = (100, 500, 1000, 2000)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    records = [rec(i, prompt=LENGTHS[i % 4], queue_ms=3.0 * (i % 3)) for i in range(40)]
    return write_run(tmp_path / "run", records)


@pytest.fixture(scope="module")
def budget() -> BudgetModel:
    return BudgetModel.from_catalog("llama-3.1-8b", "h200")


def test_visible_server_timings_are_the_terms(run: Path) -> None:
    t = request_terms(run, None, DecomposeOptions())
    f = t.frame.sort("due_ns")
    truth = pl.read_parquet(run / s.REQUESTS_FILE).sort(s.DUE_NS)
    for term, column in [
        ("queue", s.SERVER_QUEUE_MS),
        ("prefill", s.SERVER_PREFILL_MS),
        ("first_token", s.SERVER_FIRST_TOKEN_MS),
    ]:
        diff = (f.get_column(term_col(term)) - truth.get_column(column)).abs().max()
        assert isinstance(diff, float)
        assert diff < 1.0
    assert f.get_column(term_col("network")).to_list() == pytest.approx([NET_MS] * 40, abs=1e-3)
    assert f.get_column(term_col("client_delay")).to_list() == pytest.approx([0.1] * 40)
    assert f.get_column(term_col("write")).to_list() == pytest.approx([1.0] * 40)
    assert {x.term: x.source for x in t.sources}["prefill"] == "server"
    # The parts add up to the whole, request by request.
    parts = sum(f.get_column(term_col(x)) for x in TERMS) + f.get_column(OVERSHOOT_MS)
    assert (parts - f.get_column(TOTAL_MS)).abs().max() < 1e-6  # type: ignore[operator]


def test_tail_composition_adds_up(run: Path) -> None:
    d = decompose(run, None, DecomposeOptions(percentiles=(50.0, 90.0)))
    assert [c.workload for c in d.classes] == ["long", "short"]
    for c in (d.overall, *d.classes):
        for tail in c.tails:
            total = sum(x.tail_mean_ms or 0.0 for x in tail.terms) + tail.overshoot_mean_ms
            assert tail.tail_mean_ttft_ms == pytest.approx(total)
            assert tail.tail_requests >= 1
    top = d.overall.tails[-1]
    assert top.term("prefill").tail_mean_ms == pytest.approx(10 + 0.05 * 2000)


def test_hidden_timings_need_a_budget(run: Path) -> None:
    with pytest.raises(AnalyzerError, match="needs a budget"):
        decompose(run, None, DecomposeOptions(hide_server_timings=True))


@pytest.mark.parametrize("load_aware", [True, False])
def test_hidden_timings_use_budget_and_remainder(
    run: Path, budget: BudgetModel, load_aware: bool
) -> None:
    t = request_terms(
        run, budget, DecomposeOptions(hide_server_timings=True, load_aware=load_aware)
    )
    sources = {x.term: x.source for x in t.sources}
    predicted = "schedule" if load_aware else "budget"
    assert sources == {
        "client_delay": "measured",
        "connect": "measured",
        "write": "measured",
        "network": "headers",
        "queue": "remainder",
        "prefill": predicted,
        "transfer": predicted,
        "decode_wait": predicted,
        "first_token": predicted,
    }
    assert t.prediction.startswith("schedule replay of 40" if load_aware else "batch-1")
    assert t.network.source == "first_byte"
    assert t.network.value_ms == pytest.approx(0.25)
    f = t.frame
    assert (f.get_column(term_col("queue")) >= 0).all()
    parts = sum(f.get_column(term_col(x)) for x in TERMS) + f.get_column(OVERSHOOT_MS)
    assert (parts - f.get_column(TOTAL_MS)).abs().max() < 1e-6  # type: ignore[operator]
    # Requests 100 ms apart never share a step: the replay's prefill is the batch-1 budget.
    assert f.get_column(term_col("prefill")).to_list() == pytest.approx(
        f.get_column("budget_prefill_ms").to_list(), rel=1e-9
    )
    queue_budget = f.get_column("budget_queue_ms")
    assert (queue_budget.null_count() == 0) if load_aware else (queue_budget.null_count() == 40)


def test_network_is_each_requests_own(tmp_path: Path, budget: BudgetModel) -> None:
    # Hidden timings: each request's round trip is its response head's, not one constant;
    # its tail does not land in the queue. A request without an early head or a fresh
    # connection gets the run's estimate, and says so.
    records = []
    for i in range(12):
        r = rec(i, prompt=LENGTHS[i % 4])
        extra = (i // 4) * MS  # this request's path is slower by 0-2 ms, both ways
        written = r.request_written_ns
        assert written is not None
        assert r.first_token_ns is not None
        records.append(
            replace(
                r,
                headers_ns=written + MS // 2 + extra,
                first_byte_ns=written + MS // 2 + extra,
                first_token_ns=r.first_token_ns + extra,
            )
        )
    run = write_run(tmp_path / "run", records)
    t = request_terms(run, budget, DecomposeOptions(hide_server_timings=True, load_aware=False))
    f = t.frame.sort(s.DUE_NS)
    assert f.get_column(term_col("network")).to_list() == pytest.approx(
        [0.5 + i // 4 for i in range(12)]
    )
    assert {x.term: x.source for x in t.sources}["network"] == "headers"
    assert t.unidentified == ()
    # The server-side time left after network and predictions is the same for all: the
    # slower paths did not grow the queue.
    queue = f.get_column(term_col("queue")) + f.get_column(OVERSHOOT_MS)
    spread = (
        f.with_columns(queue.alias("q"))
        .group_by("prompt_tokens_used")
        .agg((pl.col("q").max() - pl.col("q").min()).alias("spread"))
    )
    assert spread.get_column("spread").max() < 1e-6  # type: ignore[operator]


def test_heads_held_back_by_the_server_are_not_the_network(tmp_path: Path) -> None:
    # A server that writes its head when it starts the request (llama.cpp: when a slot
    # takes it): the head's delay is the queue, so it is not read as the network.
    records = []
    for i in range(12):
        r = rec(i, prompt=LENGTHS[i % 4], queue_ms=10.0 * i)
        written = r.request_written_ns
        assert written is not None
        records.append(
            replace(r, headers_ns=written + int(10.0 * i * MS), first_byte_ns=r.first_token_ns)
        )
    run = write_run(tmp_path / "run", records)
    budget = BudgetModel.from_catalog("llama-3.1-8b", "h200")
    t = request_terms(run, budget, DecomposeOptions(hide_server_timings=True, load_aware=False))
    assert {x.term: x.source for x in t.sources}["network"] == "estimate"
    network = t.frame.get_column(term_col("network"))
    assert network.max() == network.min()


def test_negative_terms_are_unidentified_not_zero(tmp_path: Path) -> None:
    # Request 0: the server claims a TTFT longer than the client's server-side time (its
    # clock disagrees); request 1: it reports a negative prefill. Neither is booked as 0
    # or folded into another term.
    records = [rec(i) for i in range(4)]
    records[0] = replace(records[0], server_ttft_ms=1e3)
    records[1] = replace(records[1], server_prefill_ms=-3.0)
    run = write_run(tmp_path / "run", records)
    t = request_terms(run, None, DecomposeOptions())
    f = t.frame.sort(s.DUE_NS)
    network = f.get_column(term_col("network")).to_list()
    prefill = f.get_column(term_col("prefill")).to_list()
    assert network[0] is None
    assert network[1:] == pytest.approx([NET_MS] * 3, abs=1e-3)
    assert prefill[1] is None
    assert None not in prefill[2:]
    for term in TERMS:
        values = f.get_column(term_col(term)).drop_nulls()
        assert (values >= 0).all(), term
    gaps = {u.term: (u.requests, u.reason) for u in t.unidentified}
    assert gaps["network"][0] == 1
    assert "clocks disagree" in gaps["network"][1]
    assert gaps["prefill"] == (1, "the server reported a negative prefill")
    assert {x.term: x.source for x in t.sources}["network"] == "server"


def test_a_replay_too_long_falls_back_to_batch_1(run: Path, budget: BudgetModel) -> None:
    options = DecomposeOptions(hide_server_timings=True, max_replay_steps=3)
    t = request_terms(run, budget, options)
    assert t.prediction.startswith("batch-1 predictions (the schedule replay stopped after 3")
    assert {x.term: x.source for x in t.sources}["prefill"] == "budget"
    assert t.frame.get_column("budget_queue_ms").null_count() == t.frame.height


def test_load_aware_prefill_of_prompts_sharing_steps(tmp_path: Path) -> None:
    # Three 1500-token prompts sent together to an engine with 2048-token steps: the second
    # and third are prefilled in chunks alongside the others, so their prefill lasts
    # several steps of a full batch, far beyond the batch-1 budget (what a batch-1
    # prediction would book as queue).

    budget = BudgetModel.from_catalog("llama-3.1-8b", "h100")
    budget = replace(budget, deployment=replace(budget.deployment, chunk_tokens=2048))
    records = [rec(0, prompt=1500, gap_ms=0.0, request_id=f"q{i}") for i in range(3)]
    records = [replace(r, x_request_id=f"x{i}", trace_index=i) for i, r in enumerate(records)]
    run = write_run(tmp_path / "run", records)
    hidden = DecomposeOptions(hide_server_timings=True)
    aware = request_terms(run, budget, hidden).frame.sort(s.REQUEST_ID)
    batch1 = request_terms(run, budget, replace(hidden, load_aware=False)).frame
    alone = batch1.get_column(term_col("prefill")).to_list()
    assert alone == pytest.approx([alone[0]] * 3)
    prefill = sorted(aware.get_column(term_col("prefill")).to_list())
    # Even the first prompt shares its one step with a chunk of the second.
    assert prefill[0] > 1.2 * alone[0]
    assert prefill[2] > 1.8 * alone[0]  # spread over two full steps
    # The replay's queue prediction: the third waits for the first step to end.
    queue = sorted(aware.get_column("budget_queue_ms").to_list())
    assert queue[:2] == pytest.approx([0.0, 0.0], abs=1e-6)
    assert queue[2] == pytest.approx(prefill[0], rel=1e-6)
    # With timings hidden, the queue term is what the measured time leaves.
    assert (aware.get_column(term_col("queue")) >= 0).all()


def test_overshooting_prediction_is_clamped_and_flagged(
    tmp_path: Path, budget: BudgetModel
) -> None:
    # 2000 tokens prefilled in 0.1 ms: faster than any budget allows.
    records = [rec(i, prompt=2000, prefill_ms=0.1, first_ms=0.1) for i in range(5)]
    run = write_run(tmp_path / "run", records)
    d = decompose(run, budget, DecomposeOptions(hide_server_timings=True, percentiles=(50.0,)))
    assert d.overall.overshoots == 5
    assert d.overall.tails[0].term("queue").tail_mean_ms == 0.0
    assert d.overall.tails[0].overshoot_mean_ms < 0
    assert any("overshoot" in v for v in d.verdicts)


def test_calibration_recovers_the_prefill_line(run: Path, budget: BudgetModel) -> None:
    seen = decompose(run, budget, DecomposeOptions(calibrate=True))
    cal = seen.calibration
    assert cal is not None
    assert cal.measured == "server"
    assert cal.b_us_per_token == pytest.approx(50.0, rel=1e-6)
    assert cal.a_ms == pytest.approx(10.0, abs=1e-6)
    assert cal.fraction_of_peak is not None
    assert 0 < cal.fraction_of_peak <= 1
    # Hidden timings: the measured prefill is what network and first token leave, so the
    # queue must be idle (as at low load) for the fit to see prefill alone.
    idle = write_run(run.parent / "idle", [rec(i, prompt=LENGTHS[i % 4]) for i in range(20)])
    hidden = decompose(idle, budget, DecomposeOptions(calibrate=True, hide_server_timings=True))
    cal = hidden.calibration
    assert cal is not None
    assert cal.measured == "derived"
    assert cal.b_us_per_token == pytest.approx(50.0, rel=0.01)
    # Replayed at the calibrated efficiency by default, else the fitted line at batch 1.
    assert {x.term: x.source for x in hidden.sources}["prefill"] == "schedule"
    assert hidden.prediction.endswith("at the calibrated efficiency")
    # The replay stretches the calibrated line: by 1 for a request alone, a little for the
    # short prompts that arrive while the previous 2000-token one is still in its step.
    f = request_terms(idle, budget, DecomposeOptions(calibrate=True, hide_server_timings=True))
    stretch = f.frame.get_column(term_col("prefill")) / f.frame.get_column("budget_prefill_ms")
    assert stretch.min() == pytest.approx(1.0, rel=1e-9)
    assert stretch.max() < 1.05  # type: ignore[operator]
    batch1 = decompose(
        idle,
        budget,
        DecomposeOptions(calibrate=True, hide_server_timings=True, load_aware=False),
    )
    assert {x.term: x.source for x in batch1.sources}["prefill"] == "calibrated"
    assert batch1.prediction == "batch-1 budget (calibrated)"


def test_calibration_leaves_out_a_request_that_others_joined_before_its_first_token(
    tmp_path: Path, budget: BudgetModel
) -> None:
    """A burst's first request is sent into an idle server (alone at send) and the rest of
    the burst reaches it before its first token: its prompt shared their steps (llama.cpp:
    267 ms for a 256-token prompt that takes 44 ms alone), so it is no low-load sample."""
    idle = [rec(i, prompt=LENGTHS[i % 4], gap_ms=200.0) for i in range(20)]
    # Five requests 0.5 ms apart: the first's prefill stretched to 300 ms by the others.
    burst = [
        rec(20 + k, prompt=LENGTHS[k % 4], prefill_ms=300.0, queue_ms=60.0 * k, gap_ms=200.0)
        for k in range(5)
    ]
    shift: tuple[str, ...] = ("due_ns", "sent_ns", "request_written_ns", "headers_ns")
    shift += ("first_byte_ns", "first_token_ns", "end_ns")
    burst = [
        replace(r, **{f: getattr(r, f) - k * (200 * MS - MS // 2) for f in shift})
        for k, r in enumerate(burst)
    ]
    run = write_run(tmp_path / "run", idle + burst)
    cal = decompose(run, budget, DecomposeOptions(calibrate=True)).calibration
    assert cal is not None
    assert cal.samples == 20
    assert cal.b_us_per_token == pytest.approx(50.0, rel=1e-6)
    assert cal.a_ms == pytest.approx(10.0, abs=1e-6)


def test_slo_verdicts_name_the_queue(tmp_path: Path) -> None:
    records = [rec(i, prompt=100, queue_ms=300.0 if i % 10 == 9 else 0.0) for i in range(50)]
    run = write_run(tmp_path / "run", records)
    d = decompose(run, None, DecomposeOptions(slo_ttft_ms=100.0, percentiles=(50.0, 99.0)))
    (brk,) = d.overall.slo_breaks
    assert brk.percentile == 99.0
    assert brk.term == "queue"
    assert brk.term_ms == pytest.approx(300.0)
    assert any("queue breaks it" in v for v in d.verdicts)
    assert d.overall.max_prompt_tokens is None  # no budget, no calibration


def test_max_prompt_from_the_calibrated_line(run: Path, budget: BudgetModel) -> None:
    d = decompose(run, budget, DecomposeOptions(slo_ttft_ms=60.0, calibrate=True))
    others = 0.1 + 1.0 + NET_MS + 5.0  # client delay, write, network, first token
    expected = (60.0 - others - 10.0) / 0.05
    assert d.overall.max_prompt_tokens == pytest.approx(expected, abs=2)


def test_queueing_load_verdict(tmp_path: Path) -> None:
    calm = [rec(i, prompt=100, gap_ms=500.0) for i in range(4)]  # 2 req/s in [0, 2) s
    busy = [
        rec(i, prompt=100, gap_ms=100.0, queue_ms=200.0, trace_index=i, request_id=f"b{i}")
        for i in range(20, 40)
    ]  # 10 req/s in [2, 4) s
    run = write_run(tmp_path / "run", calm + busy)
    d = decompose(run, None, DecomposeOptions(window_s=1.0, percentiles=(50.0,)))
    assert d.queue_dominates_at_per_s == pytest.approx(10.0)
    assert [w.arrival_rate_per_s for w in d.load] == [2.0, 2.0, 10.0, 10.0]
    assert any("from 10.0 req/s" in v for v in d.verdicts)


def test_json_has_units_in_keys(run: Path) -> None:
    doc = decomposition_json(decompose(run, None, DecomposeOptions(percentiles=(50.0,))))
    tail = doc["overall"]["tails"][0]
    assert set(tail["terms"]) == set(TERMS)
    assert "tail_mean_ms" in tail["terms"]["prefill"]
    assert doc["network"]["value_ms"] == pytest.approx(NET_MS, abs=1e-3)
    assert doc["validity"]["too_small"] is False
    assert SERVER_SIDE_MS not in doc


def test_calibration_on_samples_that_queued_fits_the_speed_from_the_whole_run(
    tmp_path: Path,
) -> None:
    """One slot, requests arriving faster than it serves them from the start: even the
    "low-load" requests waited, so a line fitted to their server-side time is several
    times too slow (llama.cpp's slots in tests/realserver). The replay at that line says
    its samples waited, and the efficiency is refitted so that the replay of the whole run
    explains it: the prefill and the queue come back to the truth."""
    from analyzers.budget.engine.timeline import Arrival, EngineShape, replay_schedule

    told = BudgetModel.from_catalog("llama-3.1-8b", "h200", first_token_in_prefill=True)
    told = replace(told, max_num_seqs=1)
    lengths = (2000, 1000, 500, 100)
    arrivals = [
        Arrival(key=i, arrival_s=i * 0.04, prompt_tokens=lengths[i % 4], output_tokens=2)
        for i in range(40)
    ]
    truth_deploy = replace(told.deployment, prefill_efficiency=0.3)
    shape = EngineShape(model=told.model, deployment=truth_deploy, max_num_seqs=1)
    truth = replay_schedule(arrivals, shape, second_token=True)
    records = []
    for a in arrivals:
        p = truth[a.key]
        records.append(
            rec(
                a.key,
                prompt=a.prompt_tokens,
                queue_ms=p.queue_s * 1e3,
                prefill_ms=p.prefill_s * 1e3,
                first_ms=0.0,
                gap_ms=40.0,
            )
        )
    run = write_run(tmp_path / "queued", records)
    hidden = request_terms(run, told, DecomposeOptions(calibrate=True, hide_server_timings=True))
    cal = hidden.calibration
    assert cal is not None
    assert cal.efficiency_from_load
    assert cal.a_ms is None  # the low-load quadratic, fitted to waits, is dropped
    assert cal.fraction_of_peak == pytest.approx(0.3, rel=0.1)
    got = hidden.frame.sort(s.REQUEST_ID)
    want = pl.read_parquet(run / s.REQUESTS_FILE).sort(s.REQUEST_ID)
    for term, column in (("prefill", s.SERVER_PREFILL_MS), ("queue", s.SERVER_QUEUE_MS)):
        for q in (0.5, 0.99):
            inferred = got.get_column(term_col(term)).quantile(q, "linear")
            true = want.get_column(column).quantile(q, "linear")
            assert isinstance(inferred, float)
            assert isinstance(true, float)
            assert inferred == pytest.approx(true, rel=0.1), (term, q)
    # With server timings the fit is on clean samples and nothing is refitted.
    seen = request_terms(run, told, DecomposeOptions(calibrate=True))
    assert seen.calibration is not None
    assert not seen.calibration.efficiency_from_load
