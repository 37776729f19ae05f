"""``loadgen.rows`` builds a run row positionally (``RunRow``, for its cost): every value
lands in its own field, and the row converts to the same Arrow batch as the record of the
same values built by name."""

from __future__ import annotations

import orjson

from loadgen.client import PreparedRequest
from loadgen.http.stamping import Progress
from loadgen.openai.timings import ServerTimings
from loadgen.redact import Scrubber
from loadgen.rows import RowBuilder
from loadgen.stream.state import StreamState
from traces import schema as s
from traces.records import (
    RECORD_FIELDS,
    ImageSpec,
    RequestRecord,
    RunRow,
    TraceRequest,
    records_to_batch,
    rows_to_batch,
    run_row,
)

SENT = 1_000_000
"""A request sent at 1 ms: its events' offsets are whole microseconds."""


def _event(obj: object) -> bytes:
    return orjson.dumps(obj)


def _row() -> RunRow:
    """One request whose every field has a value of its own (the ``*_ns`` all differ)."""
    trace = TraceRequest(
        index=7,
        request_id="q7",
        arrival_s=0.5,
        workload="image",
        input_tokens=11,
        output_tokens=13,
        images=(ImageSpec(width=64, height=64), ImageSpec(width=32, height=32)),
        image_tokens=17,
        session_id="s1",
        turn=2,
        parent="q6",
        slo_ttft_ms=19.0,
        slo_tpot_ms=23.0,
    )
    job = PreparedRequest(
        trace=trace,
        x_request_id="x-q7",
        path="/v1/chat/completions",
        body=b"{}",
        warmup=True,
        context_tokens=29,
    )
    progress = Progress(lambda: 0)
    progress.sent_ns = SENT
    progress.connect_start_ns = SENT + 1_000
    progress.connected_ns = SENT + 2_000
    progress.written_ns = SENT + 3_000
    progress.headers_ns = SENT + 4_000
    progress.first_byte_ns = SENT + 5_000
    progress.status = 200
    state = StreamState(SENT)
    delta = {"index": 0, "delta": {"reasoning_content": "hm"}}
    state.add(SENT + 6_000, _event({"choices": [delta]}))
    state.add(SENT + 7_000, _event({"choices": [{"index": 0, "delta": {"content": "a"}}]}))
    call = {"index": 0, "function": {"arguments": "{}"}}
    state.add(SENT + 8_000, _event({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}))
    usage = {
        "prompt_tokens": 31,
        "completion_tokens": 37,
        "prompt_tokens_details": {"cached_tokens": 41},
        "completion_tokens_details": {"reasoning_tokens": 43},
    }
    stop = {"index": 0, "delta": {}, "finish_reason": "stop"}
    state.add(SENT + 9_000, _event({"choices": [stop], "usage": usage}))
    state.add(SENT + 9_000, b"[DONE]")
    timings = ServerTimings(
        queue_ms=1.5,
        prefill_ms=2.5,
        transfer_ms=3.5,
        first_token_ms=4.5,
        ttft_ms=5.5,
        decode_ms=6.5,
        instance="i-1",
        slip_ms=7.5,
        inference_ms=8.5,
        decode_wait_ms=9.5,
    )
    builder = RowBuilder(run_id="run-1", worker=3, scrubber=Scrubber(), stream=True)
    return builder.build(
        job, SENT - 500, SENT - 100, SENT + 10_000, progress, state, s.OUTCOME_OK, None, timings
    )


EXPECTED = RequestRecord(
    run_id="run-1",
    trace_index=7,
    request_id="q7",
    x_request_id="x-q7",
    worker=3,
    workload="image",
    api=s.API_CHAT,
    input_tokens=11,
    output_tokens=13,
    n_images=2,
    image_tokens=17,
    session_id="s1",
    slo_ttft_ms=19.0,
    slo_tpot_ms=23.0,
    warmup=True,
    due_ns=SENT - 500,
    sent_ns=SENT,
    connect_start_ns=SENT + 1_000,
    connected_ns=SENT + 2_000,
    request_written_ns=SENT + 3_000,
    headers_ns=SENT + 4_000,
    first_byte_ns=SENT + 5_000,
    first_token_ns=SENT + 7_000,
    first_reasoning_ns=SENT + 6_000,
    end_ns=SENT + 10_000,
    chunk_offsets_us=[7, 8],
    chunk_tokens=None,
    reasoning_offsets_us=[6],
    prompt_tokens=31,
    completion_tokens=37,
    cached_tokens=41,
    reasoning_tokens=43,
    outcome=s.OUTCOME_OK,
    http_status=200,
    error=None,
    finish_reason="stop",
    server_queue_ms=1.5,
    server_prefill_ms=2.5,
    server_transfer_ms=3.5,
    server_first_token_ms=4.5,
    server_ttft_ms=5.5,
    server_decode_ms=6.5,
    server_instance="i-1",
    server_slip_ms=7.5,
    server_inference_ms=8.5,
    turn=2,
    parent="q6",
    context_tokens=29,
    drain=False,
    items=None,
    server_decode_wait_ms=9.5,
    tool_call_chunks=1,
    first_tool_call_ns=SENT + 8_000,
)


def test_every_value_lands_in_its_field() -> None:
    row = _row()
    expected = run_row(EXPECTED)
    wrong = [
        f"{name}: {got!r}, expected {want!r}"
        for name, got, want in zip(RECORD_FIELDS, row, expected, strict=True)
        if got != want
    ]
    assert not wrong, wrong


def test_the_row_and_the_record_make_the_same_batch() -> None:
    assert rows_to_batch([_row()]).equals(records_to_batch([EXPECTED]))


def test_a_batch_built_with_a_call_between_columns_is_the_same_batch() -> None:
    calls: list[int] = []
    batch = rows_to_batch([_row(), _row()], between=lambda: calls.append(1))
    assert batch.equals(records_to_batch([EXPECTED, EXPECTED]))
    assert len(calls) == len(RECORD_FIELDS)


def test_run_row_keeps_the_record_fields_in_order() -> None:
    assert RunRow._fields == RECORD_FIELDS
    assert run_row(EXPECTED)._asdict() == {n: getattr(EXPECTED, n) for n in RECORD_FIELDS}
    assert rows_to_batch([]).num_rows == 0
