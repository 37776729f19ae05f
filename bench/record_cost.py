"""Record cost benchmark: what a finished request's run row costs the client, from its
stream's state to ``requests.parquet``: a frozen record per request (before), a named tuple
(``traces.records.RunRow``, now) and per-column lists (a prototype).

    .venv/bin/python bench/record_cost.py [--requests 20000] [--rounds 7] [--tokens 32]
                                          [--json out.json]

Every request is a finished chat stream (``--tokens`` content chunks, a finish chunk, a
usage chunk, ``[DONE]``), its ``StreamState`` and ``Progress`` filled once beforehand. Each
way of recording then takes all of them, in interleaved rounds in this one process, under
the replay's collector settings (``loadgen.collector``):

* ``common``: only what every way computes (the stream's summary, ``loadgen.fit``, the
  scrubbing): the floor the others are measured against.
* ``record`` (what the replay did before): the row built as one frozen ``RequestRecord``
  of 53 fields by name (``LegacyRows``, the former ``RowBuilder.build``); the replay's sink
  looks at it (``drain``), ``LiveStats`` accounts it, the recorder queues it; the
  recorder's thread turns every 2,000 into an Arrow batch with one ``getattr`` per field
  per row (``legacy_batch``, the former ``records_to_batch``), appends it to the journal,
  and closing merges the journal into ``requests.parquet``.
* ``rows`` (what the replay does now): ``RowBuilder.build`` makes a ``RunRow``, positionally;
  the same sink, ``LiveStats`` and the ``RunRecorder`` itself, whose thread turns each
  batch into columns with ``zip`` (``rows_to_batch``).
* ``columns``: the brief's columnar alternative, a prototype: each ``RunRow``'s values
  appended to one list per column (no object kept per request), the lists handed to the
  writer thread every 2,000 rows, one ``pa.array`` each.

Cost is process CPU time (every thread, so the recorder's too) per request, the median
over the rounds; the ``record part`` of a way is its cost minus ``common``'s. Every way's
``requests.parquet`` is checked equal to the ``record`` way's first. The load average is
printed, since the machine may be shared: compare the ways of one run, not figures across
runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen.client import PreparedRequest
from loadgen.collector import steady_collector
from loadgen.fit import fit_columns
from loadgen.http.stamping import Progress
from loadgen.live import LiveStats
from loadgen.openai.timings import ServerTimings
from loadgen.redact import Scrubber
from loadgen.rows import RowBuilder
from loadgen.run.recorder import RunRecorder, merge_parts
from loadgen.stream.feed import add_read
from loadgen.stream.state import StreamState
from traces import schema as s
from traces.io import file_metadata
from traces.records import RECORD_FIELDS, RequestRecord, RunRow, TraceRequest

FLUSH_ROWS = 2000
"""The recorder's default ``flush_rows``."""
WAYS: tuple[str, ...] = ("common", "record", "rows", "columns")
_TYPES = [s.RUN_SCHEMA.field(name).type for name in RECORD_FIELDS]
_STOP = object()
# ``loadgen.rows``'s constants, for ``LegacyRows``.
_TOOL_CALL_APIS = frozenset({s.API_CHAT, s.API_COMPLETIONS})
_NO_TIMINGS = ServerTimings()
_UNFINISHED = {
    s.API_RESPONSES: "stream ended without response.completed or response.incomplete",
    s.API_EMBEDDINGS: "the embeddings reply ended before its body",
}


# --------------------------------------------------------------------------------------------
# Inputs


def _event(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def stream_body(tokens: int) -> bytes:
    """A vLLM-shaped chat stream: ``tokens`` content chunks, finish, usage, ``[DONE]``."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    body = b"".join(
        _event(head | {"choices": [{"index": 0, "delta": {"content": " tok"}}]})
        for _ in range(tokens)
    )
    body += _event(head | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    usage = {"prompt_tokens": 100, "completion_tokens": tokens, "total_tokens": 100 + tokens}
    body += _event(head | {"choices": [], "usage": usage})
    return body + b"data: [DONE]\n\n"


class Inputs:
    """What the client holds when each of ``n`` requests ends."""

    def __init__(self, n: int, tokens: int) -> None:
        body = stream_body(tokens)
        self.jobs: list[PreparedRequest] = []
        self.progress: list[Progress] = []
        self.states: list[StreamState] = []
        for i in range(n):
            trace = TraceRequest(
                index=i,
                request_id=f"q{i}",
                arrival_s=i / 1000,
                input_tokens=100,
                output_tokens=tokens,
                slo_ttft_ms=500.0,
            )
            self.jobs.append(
                PreparedRequest(
                    trace=trace, x_request_id=f"run-1-q{i}", path="/v1/chat/completions", body=b""
                )
            )
            sent = 1_000_000_000 + i * 1_000_000
            progress = Progress(time.perf_counter_ns)
            progress.sent_ns = sent
            progress.written_ns = sent + 20_000
            progress.headers_ns = sent + 900_000
            progress.first_byte_ns = sent + 910_000
            progress.status = 200
            state = StreamState(sent)
            add_read(state, sent + 1_000_000, body)
            self.progress.append(progress)
            self.states.append(state)


# --------------------------------------------------------------------------------------------
# Before: a frozen record per request


@dataclass(frozen=True, slots=True, kw_only=True)
class LegacyRows:
    """``RowBuilder`` as it was: the same checks, the row built as a ``RequestRecord``."""

    run_id: str
    worker: int
    scrubber: Scrubber
    stream: bool

    def build(
        self,
        job: PreparedRequest,
        due_ns: int,
        sent_ns: int,
        end_ns: int,
        progress: Progress,
        state: StreamState,
        outcome: str,
        error: str | None,
        header_timings: ServerTimings | None = None,
    ) -> RequestRecord:
        """The row of one finished (or cancelled) request: its outcome checked against
        what the stream carried (a ``protocol_error`` when a value fails its column or the
        stream did not finish), the server's strings scrubbed."""
        parsed = state.summary()
        fit = fit_columns(parsed, progress.status)
        if outcome == s.OUTCOME_OK:
            problem = parsed.error or fit.problem
            if problem is not None:
                outcome, error = s.OUTCOME_PROTOCOL_ERROR, problem
            elif not parsed.done and parsed.finish_reason is None:
                outcome, error = (
                    s.OUTCOME_PROTOCOL_ERROR,
                    _UNFINISHED.get(
                        job.trace.api, "stream ended without [DONE] or a finish_reason"
                    ),
                )
        req = job.trace
        usage = fit.usage
        timings = parsed.timings or header_timings or _NO_TIMINGS
        return RequestRecord(
            run_id=self.run_id,
            trace_index=req.index,
            request_id=req.request_id,
            x_request_id=job.x_request_id,
            worker=self.worker,
            workload=req.workload,
            api=req.api,
            input_tokens=req.input_tokens,
            output_tokens=req.output_tokens,
            n_images=len(req.images or ()),
            image_tokens=req.image_tokens,
            session_id=req.session_id,
            slo_ttft_ms=req.slo_ttft_ms,
            slo_tpot_ms=req.slo_tpot_ms,
            warmup=job.warmup,
            due_ns=due_ns,
            sent_ns=progress.sent_ns if progress.sent_ns is not None else sent_ns,
            connect_start_ns=progress.connect_start_ns,
            connected_ns=progress.connected_ns,
            request_written_ns=progress.written_ns,
            headers_ns=progress.headers_ns,
            first_byte_ns=progress.first_byte_ns,
            first_token_ns=parsed.first_token_ns,
            first_reasoning_ns=parsed.first_reasoning_ns,
            end_ns=end_ns,
            chunk_offsets_us=fit.content_offsets_us,
            chunk_tokens=fit.chunk_tokens,
            reasoning_offsets_us=fit.reasoning_offsets_us,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=usage.cached_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            outcome=outcome,
            http_status=fit.status,
            error=self.scrubber.scrub_optional(error),
            finish_reason=self.scrubber.scrub_optional(parsed.finish_reason),
            server_queue_ms=timings.queue_ms,
            server_prefill_ms=timings.prefill_ms,
            server_transfer_ms=timings.transfer_ms,
            server_first_token_ms=timings.first_token_ms,
            server_ttft_ms=timings.ttft_ms,
            server_decode_ms=timings.decode_ms,
            server_instance=self.scrubber.scrub_optional(timings.instance),
            server_slip_ms=timings.slip_ms,
            server_inference_ms=timings.inference_ms,
            turn=req.turn,
            parent=req.parent,
            context_tokens=job.context_tokens,
            items=parsed.items,
            server_decode_wait_ms=timings.decode_wait_ms,
            tool_call_chunks=(
                parsed.tool_call_chunks if self.stream and req.api in _TOOL_CALL_APIS else None
            ),
            first_tool_call_ns=parsed.first_tool_call_ns,
        )


def legacy_batch(records: list[RequestRecord]) -> pa.RecordBatch:
    """``records_to_batch`` as it was: one ``getattr`` per field per record."""
    arrays = [
        pa.array([getattr(r, name) for r in records], type=type_)
        for name, type_ in zip(RECORD_FIELDS, _TYPES, strict=True)
    ]
    for field, array in zip(s.RUN_SCHEMA, arrays, strict=True):
        if array.null_count and not field.nullable:
            raise ValueError(f"{field.name}: null where a value is required")
    return pa.RecordBatch.from_arrays(arrays, schema=s.RUN_SCHEMA)


def _columns_batch(columns: Sequence[Sequence[Any]]) -> pa.RecordBatch:
    arrays = [pa.array(c, type=t) for c, t in zip(columns, _TYPES, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=s.RUN_SCHEMA)


class BatchWriter:
    """The recorder's thread, journal and merge for the ways that are not ``RunRecorder``:
    ``put`` one record (``legacy_batch`` every ``FLUSH_ROWS``) or, with ``columns``, a whole
    batch of columns."""

    def __init__(self, run_dir: Path, *, columns: bool) -> None:
        self._dir = run_dir
        parts = run_dir / s.PARTS_DIR
        parts.mkdir(parents=True, exist_ok=True)
        self._metadata = file_metadata("run")
        self._sink = pa.OSFile(str(parts / s.JOURNAL_FILE), "wb")
        self._journal = pa.ipc.new_stream(self._sink, s.RUN_SCHEMA.with_metadata(self._metadata))
        self._columns = columns
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._rows = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def put(self, item: object) -> None:
        self._queue.put(item)

    def _run(self) -> None:
        pending: list[RequestRecord] = []
        while True:
            item = self._queue.get()
            if item is _STOP:
                if pending:
                    self._append(legacy_batch(pending))
                return
            if self._columns:
                self._append(_columns_batch(cast(list[list[Any]], item)))
                continue
            pending.append(cast(RequestRecord, item))
            if len(pending) >= FLUSH_ROWS:
                self._append(legacy_batch(pending))
                pending = []

    def _append(self, batch: pa.RecordBatch) -> None:
        self._journal.write_batch(batch)
        self._sink.flush()
        self._rows += batch.num_rows

    def close(self) -> Path:
        self._queue.put(_STOP)
        self._thread.join()
        self._journal.close()
        self._sink.close()
        return merge_parts(self._dir, self._metadata, expected_rows=self._rows)


# --------------------------------------------------------------------------------------------
# The ways, each over all requests


_DUE_NS = 999_000_000
_END_OFFSET_NS = 2_000_000


class _Sink:
    """The replay's ``_record``: the ``drain`` check, the recorder, the live statistics."""

    def __init__(self, add: Callable[[Any], None]) -> None:
        self.stats = LiveStats(time.perf_counter_ns)
        self.dispatch_end: int | None = None  # a run without ``duration_s``
        self._add = add

    def record(self, record: RequestRecord) -> None:
        end = self.dispatch_end
        if end is not None and record.end_ns is not None and record.end_ns > end:
            record = replace(record, drain=True)
        self._add(record)
        self.stats.on_record(cast(RunRow, record))  # it reads the same attributes

    def row(self, row: RunRow) -> None:
        end = self.dispatch_end
        if end is not None and row.end_ns is not None and row.end_ns > end:
            row = row._replace(drain=True)
        self._add(row)
        self.stats.on_record(row)


def run_common(inputs: Inputs, rows: RowBuilder, run_dir: Path) -> int:
    scrub = rows.scrubber.scrub_optional
    done = 0
    for state, progress in zip(inputs.states, inputs.progress, strict=True):
        parsed = state.summary()
        fit_columns(parsed, progress.status)
        scrub(parsed.finish_reason)
        done += 1
    return done


def run_record(inputs: Inputs, rows: RowBuilder, run_dir: Path) -> int:
    writer = BatchWriter(run_dir, columns=False)
    sink = _Sink(writer.put)
    build = LegacyRows(
        run_id=rows.run_id, worker=rows.worker, scrubber=rows.scrubber, stream=rows.stream
    ).build
    for job, progress, state in zip(inputs.jobs, inputs.progress, inputs.states, strict=True):
        sent = progress.sent_ns or 0
        sink.record(
            build(job, _DUE_NS, sent, sent + _END_OFFSET_NS, progress, state, s.OUTCOME_OK, None)
        )
    writer.close()
    return sink.stats.done


def run_rows(inputs: Inputs, rows: RowBuilder, run_dir: Path) -> int:
    recorder = RunRecorder(run_dir, flush_rows=FLUSH_ROWS, flush_interval_s=60.0)
    sink = _Sink(recorder.add)
    build = rows.build
    for job, progress, state in zip(inputs.jobs, inputs.progress, inputs.states, strict=True):
        sent = progress.sent_ns or 0
        sink.row(
            build(job, _DUE_NS, sent, sent + _END_OFFSET_NS, progress, state, s.OUTCOME_OK, None)
        )
    recorder.close()
    return sink.stats.done


def run_columns(inputs: Inputs, rows: RowBuilder, run_dir: Path) -> int:
    writer = BatchWriter(run_dir, columns=True)
    columns: list[list[Any]] = [[] for _ in RECORD_FIELDS]
    appends = [c.append for c in columns]
    stats = LiveStats(time.perf_counter_ns)
    build = rows.build
    for job, progress, state in zip(inputs.jobs, inputs.progress, inputs.states, strict=True):
        sent = progress.sent_ns or 0
        row = build(job, _DUE_NS, sent, sent + _END_OFFSET_NS, progress, state, s.OUTCOME_OK, None)
        _append_row(appends, row)
        stats.on_record(row)
        if len(columns[0]) >= FLUSH_ROWS:
            writer.put(columns)
            columns = [[] for _ in RECORD_FIELDS]
            appends = [c.append for c in columns]
    if columns[0]:
        writer.put(columns)
    writer.close()
    return stats.done


def _unrolled_appender() -> Callable[[list[Callable[[Any], None]], RunRow], None]:
    """One ``append`` call per column, unrolled (what hand-written columnar code would do;
    a loop over the columns would add its own cost)."""
    lines = [f"    a[{i}](row[{i}])" for i in range(len(RECORD_FIELDS))]
    namespace: dict[str, Any] = {}
    exec("def append_row(a, row):\n" + "\n".join(lines), namespace)
    appender: Callable[[list[Callable[[Any], None]], RunRow], None] = namespace["append_row"]
    return appender


_append_row = _unrolled_appender()

RUNNERS: dict[str, Callable[[Inputs, RowBuilder, Path], int]] = {
    "common": run_common,
    "record": run_record,
    "rows": run_rows,
    "columns": run_columns,
}


def _timed(way: str, inputs: Inputs, rows: RowBuilder) -> float:
    """Process CPU µs per request of one way over every input (the writer thread included)."""
    with tempfile.TemporaryDirectory(prefix="record-cost-") as tmp, steady_collector():
        start = time.process_time_ns()
        done = RUNNERS[way](inputs, rows, Path(tmp))
        cpu_ns = time.process_time_ns() - start
        if way != "common":
            got = pq.read_metadata(Path(tmp) / s.REQUESTS_FILE).num_rows
            if got != len(inputs.jobs):
                raise AssertionError(f"{way}: {got} rows written of {len(inputs.jobs)}")
    if done != len(inputs.jobs):
        raise AssertionError(f"{way}: {done} requests of {len(inputs.jobs)}")
    return cpu_ns / done / 1000


def check_same_rows(inputs: Inputs, rows: RowBuilder) -> None:
    """Every way writes what the record path writes (the comparison means nothing
    otherwise)."""
    tables = {}
    for way in ("record", "rows", "columns"):
        with tempfile.TemporaryDirectory(prefix="record-cost-") as tmp:
            RUNNERS[way](inputs, rows, Path(tmp))
            tables[way] = pq.read_table(Path(tmp) / s.REQUESTS_FILE)
    for way in ("rows", "columns"):
        if not tables[way].equals(tables["record"]):
            raise AssertionError(f"{way} does not write the record path's rows")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--tokens", type=int, default=32, help="content chunks per stream")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    inputs = Inputs(args.requests, args.tokens)
    rows = RowBuilder(run_id="run-1", worker=0, scrubber=Scrubber.of(values=["sk-x"]), stream=True)
    check_same_rows(Inputs(FLUSH_ROWS + 7, args.tokens), rows)
    samples: dict[str, list[float]] = {w: [] for w in WAYS}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for way in WAYS if r % 2 == 0 else tuple(reversed(WAYS)):
            samples[way].append(_timed(way, inputs, rows))
        load.append(os.getloadavg()[0])
    med = {w: statistics.median(v) for w, v in samples.items()}
    base = med["common"]
    print(
        f"record cost: {args.requests:,} requests x {args.tokens} chunks, {args.rounds} "
        f"interleaved rounds, flush every {FLUSH_ROWS:,} rows; load average "
        f"{min(load):.1f}-{max(load):.1f} on {os.cpu_count()} CPUs"
    )
    print(f"{'way':<8} {'us/request':>11} {'record part':>12} {'vs record':>10} {'spread':>15}")
    for way in WAYS:
        part = med[way] - base
        ratio = part / (med["record"] - base) if way != "common" else float("nan")
        spread = f"{min(samples[way]):.1f}-{max(samples[way]):.1f}"
        print(f"{way:<8} {med[way]:>11.2f} {part:>12.2f} {ratio:>10.3f} {spread:>15}")
    # Paired per round: the saving of each way against the record path of the same round.
    for way in ("rows", "columns"):
        saved = [a - b for a, b in zip(samples["record"], samples[way], strict=True)]
        print(
            f"  {way}: saves {statistics.median(saved):.2f} us/request "
            f"(paired median; rounds {min(saved):.2f}-{max(saved):.2f})"
        )
    if args.json is not None:
        doc = {"args": vars(args) | {"json": str(args.json)}, "samples_us": samples, "load": load}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
