"""Rules a workload trace must satisfy; the first broken rule names its row and column.

Two kinds of rule: the table's (required values present, arrivals ordered, ids unique),
here, and each value's (``traces.values.find_bad_value``), which ``validate_trace``
applies too. docs/traces.md lists the rules. Imports pyarrow and ``traces`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from traces import schema as s
from traces.errors import SchemaError, ValidationError
from traces.values import (
    MAX_TOKENS,
    SHOWN,
    bad_arrival,
    bad_size,
    find_bad_value,
    first_true,
    show_value,
)


def check_columns(table: pa.Table, where: str) -> None:
    """Raise ``SchemaError`` when a required column is missing or has an unusable type."""
    missing = [c for c in s.TRACE_REQUIRED if c not in table.column_names]
    if missing:
        raise SchemaError(
            f"{where}: missing required column(s) {', '.join(missing)}; "
            f"a trace needs {', '.join(s.TRACE_REQUIRED)}"
        )
    seen: set[str] = set()
    for name in table.column_names:
        if name in seen:
            raise SchemaError(f"{where}: column {name!r} appears more than once")
        seen.add(name)
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
        bad = first_true(pc.is_null(table.column(col)))
        if bad is not None:
            raise ValidationError(
                f"{where}: row {bad}, column {col!r}: value is null", row=bad, column=col
            )
    arrival = table.column(s.ARRIVAL_S)
    bad = first_true(pc.or_(pc.less(arrival, 0.0), pc.invert(pc.is_finite(arrival))))
    if bad is not None:
        raise ValidationError(
            f"{where}: row {bad}, column {s.ARRIVAL_S!r}: negative, NaN or infinite arrival time "
            f"{arrival[bad].as_py()}",
            row=bad,
            column=s.ARRIVAL_S,
        )
    if n > 1:
        values = arrival.combine_chunks()
        dec = pc.less(values.slice(1), values.slice(0, n - 1))
        bad = first_true(dec)
        if bad is not None:
            row = bad + 1
            raise ValidationError(
                f"{where}: row {row}, column {s.ARRIVAL_S!r}: arrival time "
                f"{values[row].as_py()} is before the previous row's {values[row - 1].as_py()}",
                row=row,
                column=s.ARRIVAL_S,
            )
    for col in (s.INPUT_TOKENS, s.OUTPUT_TOKENS):
        bad = first_true(pc.less_equal(table.column(col), 0))
        if bad is not None:
            raise ValidationError(
                f"{where}: row {bad}, column {col!r}: length must be positive, "
                f"got {table.column(col)[bad].as_py()}",
                row=bad,
                column=col,
            )
    # Bounds of what a replay can build and schedule; table rules, not value rules: an
    # importer's batch still has source times (not yet re-zeroed) and unclipped counts.
    for found in (
        bad_arrival(arrival),
        bad_size(s.INPUT_TOKENS, table.column(s.INPUT_TOKENS)),
        bad_size(s.OUTPUT_TOKENS, table.column(s.OUTPUT_TOKENS)),
    ):
        if found is not None:
            raise ValidationError(
                f"{where}: row {found.row}, column {found.column!r}: {found.problem}",
                row=found.row,
                column=found.column,
            )
    apis = pc.cast(table.column(s.API), pa.string())
    bad = first_true(pc.invert(pc.is_in(apis, value_set=pa.array(sorted(s.APIS)))))
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
        row = first_true(pc.equal(ids, dup)) or 0
        raise ValidationError(
            f"{where}: row {row}, column {s.REQUEST_ID!r}: duplicate request id {dup!r}",
            row=row,
            column=s.REQUEST_ID,
        )
    found = find_bad_value(table)
    if found is not None:
        raise ValidationError(
            f"{where}: row {found.row}, column {found.column!r}: {found.problem}",
            row=found.row,
            column=found.column,
        )
    check_parents(table, where)


def _fail(where: str, row: int, column: str, problem: str) -> ValidationError:
    return ValidationError(
        f"{where}: row {row}, column {column!r}: {problem}", row=row, column=column
    )


def check_parents(table: pa.Table, where: str) -> None:
    """The session links: a ``branch`` is ``fork`` or ``spawn`` and has a ``parent``; a
    ``parent`` is the request id of an earlier row, of the same session unless the row
    branches (a sub-agent's first turn starts a session of its own); ``think_s`` is a
    finite number of seconds >= 0."""
    names = set(table.column_names)
    if s.THINK_S in names:
        think = table.column(s.THINK_S)
        bad = first_true(pc.or_(pc.less(think, 0.0), pc.invert(pc.is_finite(think))))
        if bad is not None:
            problem = f"think time {think[bad].as_py()} is not a finite number >= 0"
            raise _fail(where, bad, s.THINK_S, problem)
    if s.BRANCH in names and table.column(s.BRANCH).null_count < table.num_rows:
        branch = pc.cast(table.column(s.BRANCH), pa.string())
        known = pc.is_in(branch, value_set=pa.array(sorted(s.BRANCHES)))
        bad = first_true(pc.and_(pc.is_valid(branch), pc.invert(known)))
        if bad is not None:
            problem = (
                f"unknown branch {branch[bad].as_py()!r} "
                f"(expected one of {', '.join(sorted(s.BRANCHES))}, or null)"
            )
            raise _fail(where, bad, s.BRANCH, problem)
        if s.PARENT not in names:
            raise _fail(where, first_true(pc.is_valid(branch)) or 0, s.BRANCH, "no parent")
        bad = first_true(pc.and_(pc.is_valid(branch), pc.is_null(table.column(s.PARENT))))
        if bad is not None:
            raise _fail(where, bad, s.BRANCH, "a branching turn needs a parent")
    if s.PARENT not in names or table.column(s.PARENT).null_count == table.num_rows:
        return
    parent = table.column(s.PARENT)
    at = pc.index_in(parent, value_set=table.column(s.REQUEST_ID).combine_chunks())
    rows = pa.array(range(table.num_rows), type=pa.int32())
    # A parent that is no row, or not an earlier one (null ``at`` where ``parent`` is set).
    earlier = pc.fill_null(pc.less(at, rows), False)
    bad = first_true(pc.and_(pc.is_valid(parent), pc.invert(earlier)))
    if bad is not None:
        problem = (
            f"parent {show_value(str(parent[bad].as_py()))} is not the request id of an earlier row"
        )
        raise _fail(where, bad, s.PARENT, problem)
    continues = pc.is_valid(parent)
    if s.BRANCH in names:
        continues = pc.and_(continues, pc.is_null(table.column(s.BRANCH)))
    sessions = table.column(s.SESSION_ID).combine_chunks()
    theirs = pc.take(sessions, pc.fill_null(at, 0))
    same = pc.fill_null(pc.equal(sessions, theirs), False)
    bad = first_true(pc.and_(continues, pc.invert(same)))
    if bad is not None:
        problem = (
            f"parent {show_value(str(parent[bad].as_py()))} is of another session (or none): "
            "a turn continues its own session unless its branch is fork or spawn"
        )
        raise _fail(where, bad, s.PARENT, problem)


DEFAULT_BLOCK_SIZE: Final = 512
"""Tokens a ``prefix_blocks`` id stands for when the trace's metadata does not say."""


def block_size_of(metadata: Mapping[str, object], where: str) -> int:
    """The trace's ``block_size`` (file metadata): an integer 1..``MAX_TOKENS``, or the
    default when absent. The prompt maker builds a whole block's text at once, so a huge
    one would stop the replay midway; anything else is refused with one line."""
    value = metadata.get("block_size")
    if value is None:
        return DEFAULT_BLOCK_SIZE
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        shown = show_value(str(value)) if isinstance(value, str) else str(value)[:SHOWN]
        raise ValidationError(
            f"{where}: metadata 'block_size' must be an integer 1..{MAX_TOKENS:,} (tokens a "
            f"prefix block id stands for), got {shown}",
            column="block_size",
        )
    return value
