"""Pure transformations of trace tables: slice, scale, merge, and their provenance.

Every function takes conformed trace tables (``traces.io.read_trace_table``) and returns a
new table; none reads or writes files. ``extend_provenance`` appends the operation to the
input's provenance, so an output file tells how it was made from which sources.

Imports pyarrow and ``traces`` only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from traces import schema as s
from traces.errors import TransformError, ValidationError

_RESERVED = ("schema_version", "kind")


@dataclass(frozen=True, slots=True, kw_only=True)
class Slice:
    """Which rows ``slice_trace`` keeps. Times are seconds on the input's ``arrival_s`` axis."""

    start_s: float | None = None
    end_s: float | None = None
    first: int | None = None
    workload: str | None = None
    rezero: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Scaled:
    """A rescaled trace and the factor applied to every inter-arrival gap."""

    table: pa.Table
    factor: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """One input of ``merge_traces``: its table and a label used as id prefix on collisions."""

    table: pa.Table
    label: str


def extend_provenance(meta: Mapping[str, Any], operation: Mapping[str, Any]) -> dict[str, Any]:
    """The input's provenance with ``operation`` appended to its ``transforms`` list."""
    out = {k: v for k, v in meta.items() if k not in _RESERVED}
    history = list(out.get("transforms", []))
    history.append(dict(operation))
    out["transforms"] = history
    return out


def _set(table: pa.Table, name: str, values: pa.Array | pa.ChunkedArray) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, values)


def slice_trace(table: pa.Table, spec: Slice) -> pa.Table:
    """Keep rows with ``start_s <= arrival_s < end_s`` of class ``workload``, then the first N.

    With ``rezero`` the output's first row arrives at 0 s (all gaps unchanged).
    """
    if spec.first is not None and spec.first <= 0:
        raise TransformError(f"--first must be positive, got {spec.first}")
    arrival = table.column(s.ARRIVAL_S)
    mask = pa.chunked_array([pa.array([True] * table.num_rows)])
    if spec.start_s is not None:
        mask = pc.and_(mask, pc.greater_equal(arrival, spec.start_s))
    if spec.end_s is not None:
        mask = pc.and_(mask, pc.less(arrival, spec.end_s))
    if spec.workload is not None:
        mask = pc.and_(
            mask, pc.equal(pc.cast(table.column(s.WORKLOAD), pa.string()), spec.workload)
        )
    out = table.filter(mask)
    if spec.first is not None:
        out = out.slice(0, spec.first)
    if out.num_rows == 0:
        raise TransformError("the slice is empty: no request matches --start/--end/--workload")
    if spec.rezero:
        out = _set(
            out, s.ARRIVAL_S, pc.subtract(out.column(s.ARRIVAL_S), out.column(s.ARRIVAL_S)[0])
        )
    return drop_dangling_parents(out)


def drop_dangling_parents(table: pa.Table) -> pa.Table:
    """``parent`` (and ``branch``) nulled where the parent is no longer a row of ``table``:
    a turn whose parent was cut starts its session (its prompt still carries the history)."""
    if s.PARENT not in table.column_names:
        return table
    parent = table.column(s.PARENT)
    if parent.null_count == table.num_rows:
        return table
    kept = pc.is_in(parent, value_set=table.column(s.REQUEST_ID).combine_chunks())
    cut = pc.and_(pc.is_valid(parent), pc.invert(kept))
    if not pc.any(cut).as_py():
        return table
    table = _set(table, s.PARENT, pc.if_else(cut, pa.scalar(None, parent.type), parent))
    if s.BRANCH in table.column_names:
        branch = table.column(s.BRANCH)
        table = _set(table, s.BRANCH, pc.if_else(cut, pa.scalar(None, branch.type), branch))
    return table


def mean_rate(table: pa.Table) -> float | None:
    """(rows - 1) / (last - first arrival), in requests/s; None for a zero duration."""
    arrival = table.column(s.ARRIVAL_S)
    duration = float(pc.max(arrival).as_py() - pc.min(arrival).as_py())
    return (table.num_rows - 1) / duration if duration > 0 else None


def scale_trace(
    table: pa.Table, *, time_scale: float | None = None, rate: float | None = None
) -> Scaled:
    """Multiply every inter-arrival gap by one factor, which keeps burstiness (the gaps' CV).

    Give ``time_scale`` (the factor: 2 = half as fast) or ``rate``, a target mean rate in
    requests/s (factor = current mean rate / rate). The first arrival keeps its offset.
    """
    if (time_scale is None) == (rate is None):
        raise TransformError("give exactly one of --time-scale and --rate")
    if time_scale is not None:
        if not time_scale > 0:
            raise TransformError(f"--time-scale must be positive, got {time_scale}")
        factor = time_scale
    else:
        assert rate is not None
        if not rate > 0:
            raise TransformError(f"--rate must be positive, got {rate}")
        current = mean_rate(table)
        if current is None:
            raise TransformError("the trace has zero duration: its rate cannot be rescaled")
        factor = current / rate
    arrival = table.column(s.ARRIVAL_S)
    first = arrival[0]
    scaled = pc.add(pc.multiply(pc.subtract(arrival, first), factor), first)
    return Scaled(table=_set(table, s.ARRIVAL_S, scaled), factor=factor)


def _offset_blocks(blocks: pa.ChunkedArray, offset: int) -> pa.Array:
    combined = blocks.combine_chunks()
    if offset == 0:
        return combined
    values = pc.add(combined.values, offset)
    return pa.ListArray.from_arrays(combined.offsets, values, mask=combined.is_null())


def merge_traces(sources: Sequence[Source], *, share_prefix_blocks: bool = False) -> pa.Table:
    """Merge traces into one ordered by arrival (ties keep input order).

    Request ids stay as they are unless two inputs share one; then every id (and session
    id) is prefixed with ``<label>/``. Prefix block ids of each input are shifted past the
    previous inputs' ids so that unrelated traces do not appear to share prefixes, unless
    ``share_prefix_blocks`` says their ids come from one hash space.
    """
    if not sources:
        raise TransformError("nothing to merge")
    ids = pa.chunked_array([src.table.column(s.REQUEST_ID).combine_chunks() for src in sources])
    total = sum(src.table.num_rows for src in sources)
    collide = int(pc.count_distinct(ids).as_py()) != total
    labels = [src.label for src in sources]
    if collide and len(set(labels)) != len(labels):
        labels = [f"{i}-{label}" for i, label in enumerate(labels)]
    tables: list[pa.Table] = []
    offset = 0
    for label, src in zip(labels, sources, strict=True):
        t = src.table
        if collide:
            t = _set(
                t, s.REQUEST_ID, pc.binary_join_element_wise(label, t.column(s.REQUEST_ID), "/")
            )
            t = _set(
                t, s.SESSION_ID, pc.binary_join_element_wise(label, t.column(s.SESSION_ID), "/")
            )
            if s.PARENT in t.column_names:
                t = _set(t, s.PARENT, pc.binary_join_element_wise(label, t.column(s.PARENT), "/"))
        blocks = t.column(s.PREFIX_BLOCKS)
        if not share_prefix_blocks:
            t = _set(t, s.PREFIX_BLOCKS, _offset_blocks(blocks, offset))
            top = pc.max(pc.list_flatten(blocks)).as_py()
            if top is not None:
                offset += int(top) + 1
        t = t.cast(s.TRACE_SCHEMA)
        tables.append(t)
    merged = pa.concat_tables(tables, promote_options="permissive").unify_dictionaries()
    order = pc.sort_indices(merged, sort_keys=[(s.ARRIVAL_S, "ascending")])
    merged = merged.take(order)
    if int(pc.count_distinct(merged.column(s.REQUEST_ID)).as_py()) != merged.num_rows:
        raise ValidationError("merged trace still has duplicate request ids (within one input?)")
    return merged
