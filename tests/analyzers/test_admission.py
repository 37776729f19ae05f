"""A slot engine's prompt starts read from the run's steps (``analyzers.decompose.admission``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from runbuilders import request_record

from analyzers.decompose import BudgetModel, DecomposeOptions, request_terms
from analyzers.decompose.admission import HANDOVER_NS, PROMPT_MS, prompt_starts
from analyzers.decompose.columns import term_col
from analyzers.decompose.load import ROW
from traces import schema as s
from traces.records import RequestRecord, records_to_batch

MS = 1_000_000
T0 = 1_700_000_000 * 1_000_000_000
H = HANDOVER_NS / MS

Case = tuple[float, float, int, list[float]]
"""A request: (arrival, end, prompt tokens, its chunks' arrivals: the first is its first
token), ms on the client's clock."""


def _prompt_ms(cases: dict[str, Case], **kw: object) -> dict[str, float]:
    frame = pl.DataFrame(
        {
            ROW: list(range(len(cases))),
            "arrival_ns": [int(a * MS) for a, _, _, _ in cases.values()],
            "first_ns": [int(chunks[0] * MS) for _, _, _, chunks in cases.values()],
            "end_ns": [int(e * MS) for _, e, _, _ in cases.values()],
            "steps_ns": [[int(c * MS) for c in chunks] for _, _, _, chunks in cases.values()],
            "tokens": [n for _, _, n, _ in cases.values()],
        },
        schema_overrides={ROW: pl.UInt32},
    )
    got = prompt_starts(frame, **kw).sort(ROW)  # type: ignore[arg-type]
    return dict(zip(cases, got.get_column(PROMPT_MS).to_list(), strict=True))


def test_a_request_on_an_idle_engine_began_on_arrival() -> None:
    # Nothing ran before A: its step began when it reached the queue, the handover after
    # it arrived; B arrived while A's step ran and was taken by the next one.
    cases = {"A": (10.0, 200.0, 256, [60.0, 200.0]), "B": (20.0, 260.0, 256, [140.0, 260.0])}
    assert _prompt_ms(cases, slots=4) == pytest.approx({"A": 50.0 - H, "B": 80.0})
    assert _prompt_ms(cases, slots=4, handover_ns=0) == pytest.approx({"A": 50.0, "B": 80.0})
    # C and D reach an idle engine 4 ms apart and share its first step: it began once both
    # were there (the engine had not begun at C's arrival, or D would have waited a step).
    pair = {"C": (0.0, 90.0, 256, [60.0, 90.0]), "D": (4.0, 91.0, 256, [60.5, 91.0])}
    assert _prompt_ms(pair, slots=4) == pytest.approx({"C": 56.0 - H, "D": 56.5 - H})


def test_the_prompts_of_one_step_began_where_the_step_before_ended() -> None:
    # G generates (a token every step). X and Y arrive during the step that ends at 100 ms;
    # the next step takes both and samples both first tokens at 160 ms, so both prompts
    # took 60 ms, however long they waited, and whichever slot each held.
    cases = {
        "G": (0.0, 400.0, 16, [40.0, 100.0, 160.0, 220.0, 400.0]),
        "X": (50.0, 230.0, 512, [160.0, 220.0]),
        "Y": (70.0, 240.0, 256, [161.0, 221.0]),
    }
    got = _prompt_ms(cases, slots=4, batch_tokens=2048)
    assert got == pytest.approx({"G": 40.0 - H, "X": 60.0, "Y": 61.0})


# Four slots, a batch of 2,048 tokens, G generating throughout. E and F (1,024 tokens
# each) arrive during the step that ends at 100 ms, then P (1,100) and Q (512). The step
# from 100 ms takes E whole and the first 1,023 tokens of F (G's token takes one): the
# batch is full, so F finishes in the next step, with P and Q, which enter there. First
# tokens: E at the end of the first step (500 ms), F, P and Q at the end of the second
# (700 ms), F's first (the engine sends its slots' tokens in the order it batched them):
# P did not fit the first step's room either, but F came before it.
BATCHED: dict[str, Case] = {
    "G": (0.0, 800.0, 16, [40.0, 100.0, 500.0, 700.0, 800.0]),
    "E": (50.0, 720.0, 1024, [500.0, 700.0]),
    "F": (51.0, 760.0, 1024, [700.1, 750.0]),
    "P": (52.0, 770.0, 1100, [700.2, 750.1]),
    "Q": (53.0, 780.0, 512, [700.3, 750.2]),
}


def test_a_prompt_that_did_not_fit_its_step_began_a_step_earlier() -> None:
    got = _prompt_ms(BATCHED, slots=4, batch_tokens=2048)
    assert got == pytest.approx({"G": 40.0 - H, "E": 400.0, "F": 600.1, "P": 200.2, "Q": 200.3})
    # Without the batch, no prompt is split: F read as begun with P and Q.
    unbounded = _prompt_ms(BATCHED, slots=4)
    assert unbounded["F"] == pytest.approx(200.1)
    # A batch with room for E and F whole: F would have finished at 500 ms, so it was not
    # there: none of the three fits what the step left, and none is moved.
    assert _prompt_ms(BATCHED, slots=4, batch_tokens=4096) == unbounded
    # With the slots all taken in the first step (G, E and two more), F could not begin.
    assert _prompt_ms(BATCHED, slots=2, batch_tokens=2048) == unbounded


def test_a_prompt_longer_than_a_step_began_steps_earlier() -> None:
    # A 5,000-token prompt on a batch of 2,048, beside G's one token a step: three steps
    # (2,047 + 2,047 + 906 tokens), from the step that starts at 50 ms.
    cases = {
        "G": (0.0, 400.0, 16, [50.0, 100.0, 150.0, 200.0, 400.0]),
        "L": (10.0, 300.0, 5000, [200.0, 300.0]),
    }
    got = _prompt_ms(cases, slots=4, batch_tokens=2048)
    assert got == pytest.approx({"G": 50.0 - H, "L": 150.0})
    assert _prompt_ms(cases, slots=4)["L"] == pytest.approx(50.0)  # unbounded: one step


def test_time_scale_divides_the_start_to_first_token() -> None:
    plain = _prompt_ms(BATCHED, slots=4, batch_tokens=2048)
    scaled = _prompt_ms(BATCHED, slots=4, batch_tokens=2048, time_scale=4.0)
    assert scaled == pytest.approx({k: v / 4 for k, v in plain.items()})


def _record(
    name: str,
    i: int,
    arrival: float,
    admitted: float,
    first: float,
    end: float,
    *,
    head_at_start: bool,
) -> RequestRecord:
    """A streamed request of a one-slot engine, written at ``arrival`` on a fresh
    connection (a 0.2 ms handshake: its network), with the engine's own queue and
    prefill; its response head read when the slot started its prompt (``head_at_start``:
    as llama-server writes it) or with its first token."""
    written = T0 + int(arrival * MS)
    first_ns = T0 + int(first * MS)
    end_ns = T0 + int(end * MS)
    sent = written - 3 * MS // 10
    head = T0 + int(admitted * MS) if head_at_start else first_ns
    return request_record(
        i,
        name,
        input_tokens=1000,
        due_ns=sent,
        sent_ns=sent,
        connect_start_ns=sent,
        connected_ns=sent + MS // 5,
        request_written_ns=written,
        headers_ns=head,
        first_byte_ns=head,
        first_token_ns=first_ns,
        end_ns=end_ns,
        chunk_offsets_us=[(first_ns - sent) // 1000, (end_ns - sent) // 1000],
        chunk_tokens=[1, 1],
        prompt_tokens=1000,
        completion_tokens=2,
        cached_tokens=0,
        outcome=s.OUTCOME_OK,
        server_queue_ms=admitted - arrival,
        server_prefill_ms=first - admitted,
        server_transfer_ms=0.0,
        server_first_token_ms=0.0,
        server_ttft_ms=first - arrival,
    )


# One slot, served out of arrival order: A alone, its prompt started 1.2 ms after it was
# written (its 0.2 ms of network, then the engine's HTTP thread: ``HANDOVER_NS``); B and C
# wait for A's slot, and the engine takes C first (llama.cpp's HTTP threads hand requests
# over out of order). name: (written, prompt start, first token, end), ms
ENGINE = {
    "A": (0.0, 1.2, 50.0, 100.0),
    "B": (10.0, 150.0, 250.0, 300.0),
    "C": (20.0, 100.0, 130.0, 150.0),
}
SLOT_BUDGET = replace(
    BudgetModel.from_catalog("llama-3.1-8b", "h100", first_token_in_prefill=True),
    max_num_seqs=1,
)
HIDDEN = DecomposeOptions(hide_server_timings=True)


def _engine_run(tmp_path: Path, *, head_at_start: bool) -> Path:
    records = [
        _record(n, i, *times, head_at_start=head_at_start)
        for i, (n, times) in enumerate(ENGINE.items())
    ]
    run = tmp_path / "run"
    run.mkdir()
    pq.write_table(pa.Table.from_batches([records_to_batch(records)]), run / s.REQUESTS_FILE)
    return run


def _own(run: Path) -> pl.DataFrame:
    own = request_terms(run, None, DecomposeOptions()).frame.sort(s.REQUEST_ID)
    assert own.get_column(term_col("prefill")).to_list() == pytest.approx([48.8, 100.0, 30.0])
    return own


def test_a_slot_engine_s_prefill_is_read_from_its_response_heads(tmp_path: Path) -> None:
    # llama-server writes a streamed response's head when a slot starts the prompt: each
    # head to its first token is the prompt's time, exact, however the requests queued.
    run = _engine_run(tmp_path, head_at_start=True)
    own = _own(run)
    got = request_terms(run, replace(SLOT_BUDGET, slot_admission=True), HIDDEN)
    assert {x.term: x.source for x in got.sources}["prefill"] == "headers"
    assert "prefill read from the response heads" in got.prediction
    frame = got.frame.sort(s.REQUEST_ID)
    truth = own.get_column(term_col("prefill")).to_list()
    assert frame.get_column(term_col("prefill")).to_list() == pytest.approx(truth, abs=1e-6)
    # The heads are not the network: the handshake is (0.2 ms, where the engine's own
    # clock, which took the request as written, says 0).
    assert frame.get_column(term_col("network")).to_list() == pytest.approx([0.2] * 3)
    assert frame.get_column(term_col("queue")).to_list() == pytest.approx(
        own.get_column(term_col("queue")).to_list(), abs=0.25
    )
    # Several replicas, prompts over half the batch: the heads still read each prompt.
    told = replace(SLOT_BUDGET.deployment, chunk_tokens=1024)
    wide = replace(SLOT_BUDGET, slot_admission=True, replicas=2, deployment=told)
    assert {x.term: x.source for x in request_terms(run, wide, HIDDEN).sources}[
        "prefill"
    ] == "headers"


def test_decomposition_of_a_slot_engine_reads_the_prefill_from_its_steps(
    tmp_path: Path,
) -> None:
    # The same engine with its heads written with the first tokens: the steps are read.
    run = _engine_run(tmp_path, head_at_start=False)
    own = _own(run)
    truth = own.get_column(term_col("prefill")).to_list()
    slots = request_terms(run, replace(SLOT_BUDGET, slot_admission=True), HIDDEN)
    assert {x.term: x.source for x in slots.sources}["prefill"] == "steps"
    frame = slots.frame.sort(s.REQUEST_ID)
    # Within the 0.2 ms of network: the arrival is taken as written plus the network.
    assert frame.get_column(term_col("prefill")).to_list() == pytest.approx(truth, abs=0.25)
    assert frame.get_column(term_col("queue")).to_list() == pytest.approx(
        own.get_column(term_col("queue")).to_list(), abs=0.25
    )
    assert "prefill read from the run's steps (1 slot(s)" in slots.prediction
    # The replay, FIFO at the budget's speed, gives the budget's prefill instead.
    replayed = request_terms(run, SLOT_BUDGET, HIDDEN).frame.sort(s.REQUEST_ID)
    assert replayed.get_column(term_col("prefill")).to_list() != pytest.approx(truth, abs=5.0)
    # Two replicas would interleave their steps in the run: not read, and said so.
    two = request_terms(run, replace(SLOT_BUDGET, slot_admission=True, replicas=2), HIDDEN)
    assert {x.term: x.source for x in two.sources}["prefill"] == "schedule"
    assert "prefill not read from the run's steps: 2 replicas interleave them" in two.prediction
    # Prompts of 1,000 tokens fill more than half a 1,024-token batch: not read either; a
    # batch of 2,048 holds two of them, and the steps are read.
    for batch, read in ((1024, False), (2048, True)):
        told = replace(SLOT_BUDGET.deployment, chunk_tokens=batch)
        budget = replace(SLOT_BUDGET, slot_admission=True, deployment=told)
        got = request_terms(run, budget, HIDDEN)
        assert ({x.term: x.source for x in got.sources}["prefill"] == "steps") is read
        why = "prompts of up to 1000 tokens, over half its 1024-token batch, share it"
        assert (why in got.prediction) is not read


def test_a_slot_engine_s_heads_are_never_its_network(tmp_path: Path) -> None:
    # At low load a slot engine's head delays (its queue) need not track its server-side
    # times, so the run alone would take them for round trips (150 ms, 80 ms here). Told
    # the engine, the network is each request's handshake and the heads start the prompts.
    engine = {
        "A": (0.0, 1.2, 300.0, 320.0),
        "B": (400.0, 550.0, 600.0, 610.0),
        "C": (700.0, 701.2, 1300.0, 1310.0),
        "D": (1400.0, 1480.0, 1490.0, 1500.0),
    }
    records = [
        _record(n, i, *times, head_at_start=True) for i, (n, times) in enumerate(engine.items())
    ]
    run = tmp_path / "run"
    run.mkdir()
    pq.write_table(pa.Table.from_batches([records_to_batch(records)]), run / s.REQUESTS_FILE)
    unknown = request_terms(run, SLOT_BUDGET, HIDDEN).frame.sort(s.REQUEST_ID)
    assert unknown.get_column(term_col("network")).to_list() == pytest.approx(
        [1.2, 150.0, 1.2, 80.0]
    )
    told = request_terms(run, replace(SLOT_BUDGET, slot_admission=True), HIDDEN).frame
    told = told.sort(s.REQUEST_ID)
    assert told.get_column(term_col("network")).to_list() == pytest.approx([0.2] * 4)
    assert told.get_column(term_col("prefill")).to_list() == pytest.approx(
        [298.8, 50.0, 598.8, 10.0]
    )
    assert told.get_column(term_col("queue")).to_list() == pytest.approx([1.0, 149.8, 1.0, 79.8])
