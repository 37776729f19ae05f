"""Typed values for one row of each table, and their conversion to and from Arrow.

``TraceRequest`` is one workload row; ``RequestRecord`` is one run row. Both are frozen,
slotted, keyword-only dataclasses; no dict or tuple crosses a module boundary, with one
exception: ``RunRow``, the run row as the replay's hot path makes it, is a typed named tuple
of ``RequestRecord``'s fields, because building and taking apart the dataclass cost the
client more than the rest of the row together (see ``RunRow``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

import pyarrow as pa

from traces import schema as s
from traces.errors import shown


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageSpec:
    """An image to attach to a request, in pixels."""

    width: int
    height: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceRequest:
    """One request of a workload trace (schema v1). ``index`` is its row number."""

    index: int
    request_id: str
    arrival_s: float
    workload: str = "text"
    api: str = s.API_CHAT
    input_tokens: int
    output_tokens: int
    prefix_blocks: tuple[int, ...] | None = None
    images: tuple[ImageSpec, ...] | None = None
    image_tokens: int | None = None
    prompt: str | None = None
    messages: str | None = None
    session_id: str | None = None
    turn: int | None = None
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    min_tokens: int | None = None
    ignore_eos: bool | None = None
    parent: str | None = None
    branch: str | None = None
    think_s: float | None = None
    tools: str | None = None
    """The JSON text of the request's tool definitions (``schema.TOOLS``), or None."""


def _column_values(column: pa.ChunkedArray) -> list[Any]:
    """A column's values as Python objects. Dictionary columns (``workload``, ``api``) are
    decoded first: their ``to_pylist`` boxes every row through a dictionary scalar, about
    20 times slower, and a replay reads its trace before the first request is sent."""
    if pa.types.is_dictionary(column.type):
        column = pa.chunked_array(
            [chunk.dictionary_decode() for chunk in column.chunks], type=column.type.value_type
        )
    values: list[Any] = column.to_pylist()
    return values


def trace_requests_from_table(table: pa.Table) -> list[TraceRequest]:
    """Convert a validated trace table into ``TraceRequest`` values, in row order."""
    cols = {name: _column_values(table.column(name)) for name in table.column_names}
    n = table.num_rows
    out: list[TraceRequest] = []
    empty: list[None] = [None] * n
    images_col = cols.get(s.IMAGES, empty)
    blocks_col = cols.get(s.PREFIX_BLOCKS, empty)
    for i in range(n):
        imgs = images_col[i]
        blocks = blocks_col[i]
        out.append(
            TraceRequest(
                index=i,
                request_id=cols[s.REQUEST_ID][i],
                arrival_s=cols[s.ARRIVAL_S][i],
                workload=cols.get(s.WORKLOAD, empty)[i] or "text",
                api=cols.get(s.API, empty)[i] or s.API_CHAT,
                input_tokens=cols[s.INPUT_TOKENS][i],
                output_tokens=cols[s.OUTPUT_TOKENS][i],
                prefix_blocks=tuple(blocks) if blocks is not None else None,
                images=(
                    tuple(ImageSpec(width=im["width"], height=im["height"]) for im in imgs)
                    if imgs
                    else None
                ),
                image_tokens=cols.get(s.IMAGE_TOKENS, empty)[i],
                prompt=cols.get(s.PROMPT, empty)[i],
                messages=cols.get(s.MESSAGES, empty)[i],
                session_id=cols.get(s.SESSION_ID, empty)[i],
                turn=cols.get(s.TURN, empty)[i],
                slo_ttft_ms=cols.get(s.SLO_TTFT_MS, empty)[i],
                slo_tpot_ms=cols.get(s.SLO_TPOT_MS, empty)[i],
                temperature=cols.get(s.TEMPERATURE, empty)[i],
                top_p=cols.get(s.TOP_P, empty)[i],
                seed=cols.get(s.SEED, empty)[i],
                min_tokens=cols.get(s.MIN_TOKENS, empty)[i],
                ignore_eos=cols.get(s.IGNORE_EOS, empty)[i],
                parent=cols.get(s.PARENT, empty)[i],
                branch=cols.get(s.BRANCH, empty)[i],
                think_s=cols.get(s.THINK_S, empty)[i],
                tools=cols.get(s.TOOLS, empty)[i],
            )
        )
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRecord:
    """One row of the run table: what happened to one dispatched request.

    Every ``*_ns`` is epoch nanoseconds from the run's single monotonic clock; ``None``
    means the event did not happen (e.g. no new connection, no first token).
    ``chunk_offsets_us`` holds each content chunk's arrival relative to ``sent_ns``, the
    request's first action on the wire (its first byte written, or the connect it made).
    """

    run_id: str
    trace_index: int
    request_id: str
    x_request_id: str
    worker: int = 0
    workload: str
    api: str
    input_tokens: int
    output_tokens: int
    n_images: int = 0
    image_tokens: int | None = None
    session_id: str | None = None
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    warmup: bool = False
    due_ns: int
    sent_ns: int | None = None
    connect_start_ns: int | None = None
    connected_ns: int | None = None
    request_written_ns: int | None = None
    headers_ns: int | None = None
    first_byte_ns: int | None = None
    first_token_ns: int | None = None
    first_reasoning_ns: int | None = None
    end_ns: int | None = None
    chunk_offsets_us: Sequence[int] = ()
    chunk_tokens: Sequence[int] | None = None
    reasoning_offsets_us: Sequence[int] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    outcome: str
    http_status: int | None = None
    error: str | None = None
    finish_reason: str | None = None
    server_queue_ms: float | None = None
    server_prefill_ms: float | None = None
    server_transfer_ms: float | None = None
    server_first_token_ms: float | None = None
    server_ttft_ms: float | None = None
    server_decode_ms: float | None = None
    server_instance: str | None = None
    server_slip_ms: float | None = None
    server_inference_ms: float | None = None
    turn: int | None = None
    parent: str | None = None
    context_tokens: int | None = None
    drain: bool = False
    items: int | None = None
    server_decode_wait_ms: float | None = None
    tool_call_chunks: int | None = None
    first_tool_call_ns: int | None = None


class RunRow(NamedTuple):
    """One row of the run table as the replay makes it: ``RequestRecord``'s fields, in
    its order, as a typed named tuple.

    Why a second type: a frozen dataclass of 53 fields costs the event loop several
    microseconds per request to build (one ``object.__setattr__`` per field) and the
    recorder as much again to take apart (one ``getattr`` per field); a named tuple is
    built in one step and a batch of them turns into columns with ``zip``
    (``bench/record_cost.py`` measures both). ``RequestRecord`` stays the value for
    everything else: the offline engine, readers, tests. Every field is required (built
    positionally, by ``loadgen.rows``); ``run_row`` converts a record.
    """

    run_id: str
    trace_index: int
    request_id: str
    x_request_id: str
    worker: int
    workload: str
    api: str
    input_tokens: int
    output_tokens: int
    n_images: int
    image_tokens: int | None
    session_id: str | None
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    warmup: bool
    due_ns: int
    sent_ns: int | None
    connect_start_ns: int | None
    connected_ns: int | None
    request_written_ns: int | None
    headers_ns: int | None
    first_byte_ns: int | None
    first_token_ns: int | None
    first_reasoning_ns: int | None
    end_ns: int | None
    chunk_offsets_us: Sequence[int]
    chunk_tokens: Sequence[int] | None
    reasoning_offsets_us: Sequence[int]
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    reasoning_tokens: int | None
    outcome: str
    http_status: int | None
    error: str | None
    finish_reason: str | None
    server_queue_ms: float | None
    server_prefill_ms: float | None
    server_transfer_ms: float | None
    server_first_token_ms: float | None
    server_ttft_ms: float | None
    server_decode_ms: float | None
    server_instance: str | None
    server_slip_ms: float | None
    server_inference_ms: float | None
    turn: int | None
    parent: str | None
    context_tokens: int | None
    drain: bool
    items: int | None
    server_decode_wait_ms: float | None
    tool_call_chunks: int | None
    first_tool_call_ns: int | None


RECORD_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))
if RunRow._fields != RECORD_FIELDS:  # pragma: no cover - a field added to one type only
    raise TypeError("RunRow and RequestRecord must have the same fields in the same order")
_RECORD_VALUES = attrgetter(*RECORD_FIELDS)


def run_row(record: RequestRecord) -> RunRow:
    """``record`` as a ``RunRow``."""
    return RunRow._make(_RECORD_VALUES(record))


def records_to_batch(records: Iterable[RequestRecord]) -> pa.RecordBatch:
    """Build one Arrow record batch in ``RUN_SCHEMA`` from run records (``rows_to_batch``
    of their rows)."""
    return rows_to_batch([run_row(r) for r in records])


def rows_to_batch(
    rows: Sequence[RunRow], *, between: Callable[[], object] | None = None
) -> pa.RecordBatch:
    """Build one Arrow record batch in ``RUN_SCHEMA`` from run rows. Raises what Arrow
    raises for a value its column cannot hold, and ``ValueError`` for a null where the
    column takes none (Arrow builds such a batch, and only the Parquet writer refuses it).

    ``between``, if given, is called after each column: a thread converting rows beside an
    event loop passes a short sleep, which lets the GIL go between columns (a column of
    2,000 rows takes at most about 0.2 ms; a whole batch, several ms)."""
    arrays = []
    for index, field in enumerate(s.RUN_SCHEMA):
        arrays.append(pa.array(list(map(itemgetter(index), rows)), type=field.type))
        if between is not None:
            between()
    for field, array in zip(s.RUN_SCHEMA, arrays, strict=True):
        if array.null_count and not field.nullable:
            raise ValueError(f"{field.name}: null where a value is required")
    return pa.RecordBatch.from_arrays(arrays, schema=s.RUN_SCHEMA)


def int_bounds(type_: pa.DataType) -> tuple[int, int]:
    """The least and greatest value of an Arrow integer type."""
    bits = type_.bit_width
    if pa.types.is_signed_integer(type_):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _int_check(type_: pa.DataType) -> Callable[[object], str | None]:
    lo, hi = int_bounds(type_)

    def check(value: object) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{shown(value)} is not an integer"
        if not lo <= value <= hi:
            return f"{shown(value)} does not fit {type_}"
        return None

    return check


def _float_check(type_: pa.DataType) -> Callable[[object], str | None]:
    # Arrow takes a Python int into a float column only where it is exactly representable.
    exact = 1 << (24 if type_ == pa.float32() else 53)

    def check(value: object) -> str | None:
        if isinstance(value, float):
            return None
        if isinstance(value, int) and not isinstance(value, bool) and -exact <= value <= exact:
            return None
        return f"{shown(value)} is not a {type_} number"

    return check


def _type_check(type_: type, what: str) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        return None if isinstance(value, type_) else f"{shown(value)} is not {what}"

    return check


def _list_check(item: Callable[[object], str | None]) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            return f"{shown(value)} is not a list"
        for i, element in enumerate(value):
            problem = item(element)
            if problem is not None:
                return f"item {i}: {problem}"
        return None

    return check


def _value_check(type_: pa.DataType) -> Callable[[object], str | None]:
    if pa.types.is_integer(type_):
        return _int_check(type_)
    if pa.types.is_floating(type_):
        return _float_check(type_)
    if pa.types.is_boolean(type_):
        return _type_check(bool, "a boolean")
    if pa.types.is_string(type_):
        return _type_check(str, "a string")
    if pa.types.is_list(type_):
        return _list_check(_value_check(type_.value_type))
    raise TypeError(f"no check for Arrow type {type_}")  # a column type added to RUN_SCHEMA


_RECORD_CHECKS = tuple(
    (name, s.RUN_SCHEMA.field(name).nullable, _value_check(s.RUN_SCHEMA.field(name).type))
    for name in RECORD_FIELDS
)


def record_problem(record: RequestRecord | RunRow) -> str | None:
    """The first value of ``record`` its run-table column cannot hold, as ``field: what``
    (a null in a column that takes none, a wrong type, an integer beyond the column's
    range); None when ``records_to_batch`` takes every value. Checks each list item in
    Python: for tests and for diagnosing a batch that failed, not for every row."""
    for name, nullable, check in _RECORD_CHECKS:
        value = getattr(record, name)
        if value is None:
            if not nullable:
                return f"{name}: null where a value is required"
            continue
        problem = check(value)
        if problem is not None:
            return f"{name}: {problem}"
    return None
