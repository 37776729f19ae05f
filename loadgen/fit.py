"""A stream's numbers checked against the run table's columns: what a record may hold.

Every value a record takes from the server is checked where the record is built
(``loadgen.rows``), so the recorder never meets a row its columns cannot hold: per-chunk
token counts, usage counts, arrival offsets and the status are cut to their columns'
ranges, and the first misfit is named (the request is then a ``protocol_error``). Called
once per finished request, never per chunk. Imports ``loadgen.openai``,
``loadgen.stream`` and ``traces`` only.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, replace

from loadgen.openai.chunks import Usage
from loadgen.stream.state import StreamSummary
from traces import schema as s
from traces.errors import shown
from traces.records import int_bounds

__all__ = ["ColumnFit", "fit_columns"]

_NO_USAGE = Usage()
_TOKENS_TYPE = s.RUN_SCHEMA.field(s.CHUNK_TOKENS).type.value_type
_TOKENS_MIN, _TOKENS_MAX = int_bounds(_TOKENS_TYPE)
_OFFSET_TYPE = s.RUN_SCHEMA.field(s.CHUNK_OFFSETS_US).type.value_type
_OFFSET_MAX = int_bounds(_OFFSET_TYPE)[1]
_COUNTS = tuple(
    (name, s.RUN_SCHEMA.field(name).type, *int_bounds(s.RUN_SCHEMA.field(name).type))
    for name in (s.PROMPT_TOKENS, s.COMPLETION_TOKENS, s.CACHED_TOKENS, s.REASONING_TOKENS)
)
"""The usage counts: their column names are ``Usage``'s field names."""
_STATUS_TYPE = s.RUN_SCHEMA.field(s.HTTP_STATUS).type
_STATUS_MIN, _STATUS_MAX = int_bounds(_STATUS_TYPE)


@dataclass(frozen=True, slots=True, kw_only=True)
class ColumnFit:
    """A summary's values cut to what their columns hold, and the first that did not fit."""

    content_offsets_us: list[int]
    chunk_tokens: list[int] | None
    reasoning_offsets_us: list[int]
    usage: Usage
    status: int | None
    problem: str | None


def _within_offsets(column: str, offsets: list[int], problems: list[str]) -> list[int]:
    """``offsets`` up to the column's range, noting in ``problems`` where they were cut.
    Offsets never decrease (one monotonic clock, reads in order): the last is the largest,
    so the common case is one comparison."""
    if not offsets or offsets[-1] <= _OFFSET_MAX:
        return offsets
    kept = bisect_right(offsets, _OFFSET_MAX)
    problems.append(
        f"{column}: chunk {kept} arrived {offsets[kept] / 1e6:.0f} s after the send, beyond "
        f"the column's {_OFFSET_TYPE} µs"
    )
    return offsets[:kept]


def fit_columns(parsed: StreamSummary, status: int | None) -> ColumnFit:
    """Check the summary's numbers against their columns' ranges: a per-chunk token count
    or usage count that does not fit is left out (None), offsets beyond the column's range
    (a stream longer than about 35 minutes) are cut off with their chunks, and the first
    misfit is described. The common case costs a few comparisons and one pass of
    ``min``/``max`` over the token counts."""
    problems: list[str] = []
    tokens = parsed.chunk_tokens
    if tokens and (min(tokens) < _TOKENS_MIN or max(tokens) > _TOKENS_MAX):
        i, bad = next((i, n) for i, n in enumerate(tokens) if not _TOKENS_MIN <= n <= _TOKENS_MAX)
        problems.append(f"chunk_tokens = {shown(bad)} for chunk {i}: does not fit {_TOKENS_TYPE}")
        tokens = None
    usage = parsed.usage or _NO_USAGE
    for name, type_, least, greatest in _COUNTS:
        count = getattr(usage, name)
        if count is not None and not least <= count <= greatest:
            problems.append(f"usage.{name} = {shown(count)}: does not fit {type_}")
            usage = replace(usage, **{name: None})
    content = _within_offsets(s.CHUNK_OFFSETS_US, parsed.content_offsets_us, problems)
    if tokens is not None and len(content) < len(tokens):
        tokens = tokens[: len(content)]
    reasoning = _within_offsets(s.REASONING_OFFSETS_US, parsed.reasoning_offsets_us, problems)
    if status is not None and not _STATUS_MIN <= status <= _STATUS_MAX:
        problems.append(f"http_status = {shown(status)}: does not fit {_STATUS_TYPE}")
        status = None
    return ColumnFit(
        content_offsets_us=content,
        chunk_tokens=tokens,
        reasoning_offsets_us=reasoning,
        usage=usage,
        status=status,
        problem=problems[0] if problems else None,
    )
