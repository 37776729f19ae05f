"""Rules a workload trace must satisfy; the first broken rule names its row and column."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from traces import schema as s
from traces.errors import SchemaError, ValidationError


def _first_true(mask: pa.ChunkedArray | pa.Array) -> int | None:
    """Index of the first true value of a boolean array (nulls count as false)."""
    filled = pc.fill_null(mask, False)
    if not pc.any(filled).as_py():
        return None
    return int(pc.index(filled, True).as_py())


def check_columns(table: pa.Table, where: str) -> None:
    """Raise ``SchemaError`` when a required column is missing or has an unusable type."""
    missing = [c for c in s.TRACE_REQUIRED if c not in table.column_names]
    if missing:
        raise SchemaError(
            f"{where}: missing required column(s) {', '.join(missing)}; "
            f"a trace needs {', '.join(s.TRACE_REQUIRED)}"
        )
    for name in table.column_names:
        if name not in s.TRACE_SCHEMA.names:
            continue
        want = s.TRACE_SCHEMA.field(name).type
        got = table.schema.field(name).type
        if got == want:
            continue
        if pa.types.is_dictionary(want) and (
            pa.types.is_string(got) or pa.types.is_large_string(got)
        ):
            continue
        if pa.types.is_integer(want) and pa.types.is_integer(got):
            continue
        if pa.types.is_floating(want) and (pa.types.is_floating(got) or pa.types.is_integer(got)):
            continue
        if pa.types.is_string(want) and pa.types.is_large_string(got):
            continue
        if pa.types.is_dictionary(got) and pa.types.is_dictionary(want):
            continue
        if got == pa.null():
            continue
        raise SchemaError(f"{where}: column {name!r} has type {got}, expected {want}")


def validate_trace(table: pa.Table, where: str) -> None:
    """Check a trace table (already in ``TRACE_SCHEMA``) and raise on the first bad value."""
    n = table.num_rows
    if n == 0:
        raise ValidationError(f"{where}: the trace has no rows")
    for col in (s.REQUEST_ID, s.ARRIVAL_S, s.INPUT_TOKENS, s.OUTPUT_TOKENS, s.WORKLOAD, s.API):
        bad = _first_true(pc.is_null(table.column(col)))
        if bad is not None:
            raise ValidationError(
                f"{where}: row {bad}, column {col!r}: value is null", row=bad, column=col
            )
    arrival = table.column(s.ARRIVAL_S)
    bad = _first_true(pc.or_(pc.less(arrival, 0.0), pc.is_nan(arrival)))
    if bad is not None:
        raise ValidationError(
            f"{where}: row {bad}, column {s.ARRIVAL_S!r}: negative or NaN arrival time "
            f"{arrival[bad].as_py()}",
            row=bad,
            column=s.ARRIVAL_S,
        )
    if n > 1:
        values = arrival.combine_chunks()
        dec = pc.less(values.slice(1), values.slice(0, n - 1))
        bad = _first_true(dec)
        if bad is not None:
            row = bad + 1
            raise ValidationError(
                f"{where}: row {row}, column {s.ARRIVAL_S!r}: arrival time "
                f"{values[row].as_py()} is before the previous row's {values[row - 1].as_py()}",
                row=row,
                column=s.ARRIVAL_S,
            )
    for col in (s.INPUT_TOKENS, s.OUTPUT_TOKENS):
        bad = _first_true(pc.less_equal(table.column(col), 0))
        if bad is not None:
            raise ValidationError(
                f"{where}: row {bad}, column {col!r}: length must be positive, "
                f"got {table.column(col)[bad].as_py()}",
                row=bad,
                column=col,
            )
    apis = pc.cast(table.column(s.API), pa.string())
    bad = _first_true(pc.invert(pc.is_in(apis, value_set=pa.array(sorted(s.APIS)))))
    if bad is not None:
        raise ValidationError(
            f"{where}: row {bad}, column {s.API!r}: unknown api {apis[bad].as_py()!r} "
            f"(expected one of {', '.join(sorted(s.APIS))})",
            row=bad,
            column=s.API,
        )
    ids = table.column(s.REQUEST_ID)
    if pc.count_distinct(ids).as_py() != n:
        counts = pc.value_counts(ids)
        dup = next(v["values"] for v in counts.to_pylist() if v["counts"] > 1)
        row = _first_true(pc.equal(ids, dup)) or 0
        raise ValidationError(
            f"{where}: row {row}, column {s.REQUEST_ID!r}: duplicate request id {dup!r}",
            row=row,
            column=s.REQUEST_ID,
        )
