"""A slot engine's admissions read from the run (``analyzers.decompose.admission``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from runbuilders import request_record

from analyzers.decompose import BudgetModel, DecomposeOptions, request_terms
from analyzers.decompose.admission import SLOT_MS, slot_admissions
from analyzers.decompose.columns import term_col
from analyzers.decompose.load import ROW
from traces import schema as s
from traces.records import RequestRecord, records_to_batch

MS = 1_000_000
T0 = 1_700_000_000 * 1_000_000_000

# One slot, served out of arrival order: A alone; B and C wait for A's slot, and the
# engine takes C first (llama.cpp's HTTP threads hand requests over out of order).
# name: (arrival, admitted, first token, end), ms
ONE_SLOT = {
    "A": (0.0, 0.0, 50.0, 100.0),
    "B": (10.0, 150.0, 250.0, 300.0),
    "C": (20.0, 100.0, 130.0, 150.0),
}


def _requests(
    cases: dict[str, tuple[float, float, float, float]],
    prior: float,
    works: dict[str, float] | None = None,
    floor: float = 0.0,
) -> pl.DataFrame:
    """The matching's input for ``cases``, with each request's work (admission to first
    token) predicted ``prior`` times its true length (or as ``works`` says, ms), at least
    ``floor`` ms, and tokens at first and end only."""
    told = works or {}
    return pl.DataFrame(
        {
            ROW: list(range(len(cases))),
            "arrival_ns": [int(a * MS) for a, _, _, _ in cases.values()],
            "first_ns": [int(f * MS) for _, _, f, _ in cases.values()],
            "end_ns": [int(e * MS) for _, _, _, e in cases.values()],
            "work_ns": [
                int(told.get(name, (f - adm) * prior) * MS)
                for name, (_, adm, f, _) in cases.items()
            ],
            "floor_ns": [int(floor * MS)] * len(cases),
            "steps_ns": [[int(f * MS), int(e * MS)] for _, _, f, e in cases.values()],
        },
        schema_overrides={ROW: pl.UInt32},
    )


def _slot_ms(cases: dict[str, tuple[float, float, float, float]], **kw: Any) -> list[float]:
    prior = kw.pop("prior", 1.0)
    got = slot_admissions(_requests(cases, prior), **kw).sort(ROW)
    return [float(x) for x in got.get_column(SLOT_MS).to_list()]


def _truth(cases: dict[str, tuple[float, float, float, float]]) -> list[float]:
    return [f - adm for _, adm, f, _ in cases.values()]


@pytest.mark.parametrize("prior", [0.7, 1.0, 1.3])
def test_out_of_order_admissions_follow_the_slot_releases(prior: float) -> None:
    # In arrival order (B at A's end) C would have begun after its own first token; the
    # releases, taken in the order of the first tokens nearest a prediction 30% off, give
    # each request its own admission exactly.
    assert _slot_ms(ONE_SLOT, slots=1, prior=prior) == pytest.approx(_truth(ONE_SLOT))


def test_a_request_arriving_during_anothers_step_is_admitted_at_its_end() -> None:
    # Three slots. B arrives at 40 ms to a free slot while A's prompt step runs (until A's
    # first token at 100 ms): the engine takes it into the next step. C arrives to a free
    # slot while that step runs, but its first token comes within 5 ms of B's: it took part
    # in that step, admitted on arrival.
    cases = {
        "A": (0.0, 0.0, 100.0, 300.0),
        "B": (40.0, 100.0, 180.0, 200.0),
        "C": (120.0, 120.0, 182.0, 400.0),
    }
    assert _slot_ms(cases, slots=3) == pytest.approx(_truth(cases))


def test_a_release_too_close_to_the_first_token_did_not_admit_it() -> None:
    # Three slots, X holding one throughout. C waited for A's slot and shared its steps
    # (280 ms to its first token); the prediction says 40 ms, as alone, which puts B's
    # release (10 ms before C's first token) nearest. A prompt takes at least about its
    # time alone: with a floor of 20 ms that release is out, and D gets it.
    cases = {
        "A": (0.0, 0.0, 50.0, 100.0),
        "B": (0.0, 0.0, 50.0, 370.0),
        "X": (0.0, 0.0, 50.0, 600.0),
        "C": (10.0, 100.0, 380.0, 390.0),
        "D": (20.0, 370.0, 420.0, 430.0),
    }

    def slot_ms(floor: float) -> list[float]:
        frame = _requests(cases, 1.0, works={"C": 40.0}, floor=floor)
        got = slot_admissions(frame, slots=3).sort(ROW)
        return [float(x) for x in got.get_column(SLOT_MS).to_list()]

    assert slot_ms(0.0)[3:] == pytest.approx([10.0, 30.0])  # without it: both misread
    assert slot_ms(20.0) == pytest.approx(_truth(cases))


def test_time_scale_divides_the_admission_to_first_token() -> None:
    assert _slot_ms(ONE_SLOT, slots=1, time_scale=4.0) == pytest.approx(
        [t / 4 for t in _truth(ONE_SLOT)]
    )


def test_no_free_slot_before_the_first_token_is_null() -> None:
    # Two requests on one slot whose first tokens both precede either's end: the data do
    # not fit a one-slot engine, and the second gets no admission.
    cases = {"A": (0.0, 0.0, 50.0, 100.0), "B": (10.0, 10.0, 60.0, 120.0)}
    got = slot_admissions(_requests(cases, 1.0), slots=1).sort(ROW)
    assert got.get_column(SLOT_MS).to_list() == [50.0, None]


def _record(
    name: str, i: int, arrival: float, admitted: float, first: float, end: float
) -> RequestRecord:
    """A streamed request of the one-slot engine above, written at ``arrival``, its head
    read 0.2 ms later (a server that answers on receipt: the request's network), with the
    engine's own queue and prefill."""
    written = T0 + int(arrival * MS)
    first_ns = T0 + int(first * MS)
    end_ns = T0 + int(end * MS)
    sent = written - MS // 10
    return request_record(
        i,
        name,
        input_tokens=1000,
        due_ns=sent,
        sent_ns=sent,
        request_written_ns=written,
        headers_ns=written + MS // 5,
        first_byte_ns=written + MS // 5,
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


def test_decomposition_of_a_slot_engine_reads_the_prefill_from_its_releases(
    tmp_path: Path,
) -> None:
    records = [_record(n, i, *times) for i, (n, times) in enumerate(ONE_SLOT.items())]
    run = tmp_path / "run"
    run.mkdir()
    pq.write_table(pa.Table.from_batches([records_to_batch(records)]), run / s.REQUESTS_FILE)
    budget = replace(
        BudgetModel.from_catalog("llama-3.1-8b", "h100", first_token_in_prefill=True),
        max_num_seqs=1,
    )
    hidden = DecomposeOptions(hide_server_timings=True)
    own = request_terms(run, None, DecomposeOptions()).frame.sort(s.REQUEST_ID)
    truth = own.get_column(term_col("prefill")).to_list()
    assert truth == pytest.approx([50.0, 100.0, 30.0])

    slots = request_terms(run, replace(budget, slot_admission=True), hidden)
    assert {x.term: x.source for x in slots.sources}["prefill"] == "slots"
    frame = slots.frame.sort(s.REQUEST_ID)
    # Within the 0.2 ms of network: the arrival is taken as written plus the network.
    assert frame.get_column(term_col("prefill")).to_list() == pytest.approx(truth, abs=0.25)
    assert frame.get_column(term_col("queue")).to_list() == pytest.approx(
        own.get_column(term_col("queue")).to_list(), abs=0.25
    )
    # The replay, FIFO at the budget's speed, gives the budget's prefill instead.
    replayed = request_terms(run, budget, hidden).frame.sort(s.REQUEST_ID)
    assert replayed.get_column(term_col("prefill")).to_list() != pytest.approx(truth, abs=5.0)
