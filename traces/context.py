"""Requests of a trace that exceed a context limit, counted before a run, and clipping them.

A server refuses a request whose prompt (text plus image tokens) and ``max_tokens`` (the
trace's ``output_tokens``, which the replay sends) together exceed its context, with HTTP
400 (vLLM's "maximum context length"; the run records ``context_exceeded``).
:func:`context_overflow` counts them from a trace table; :func:`clip_inputs` shortens the
text prompts (and their prefix blocks) so that every request fits.

Imports pyarrow and ``traces`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from traces import schema as s
from traces.deployment import DeploymentInfo
from traces.errors import TransformError
from traces.records import TraceRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextOverflow:
    """``over`` of ``requests`` need more than ``limit`` tokens (prompt + output);
    ``longest`` is the largest such need, ``clip_to`` the ``--max-input-tokens`` that
    makes every one fit (None when some request's output alone leaves no room)."""

    limit: int
    source: str
    requests: int
    over: int
    longest: int
    clip_to: int | None

    @property
    def share(self) -> float:
        """``over / requests`` (0 for an empty trace)."""
        return self.over / self.requests if self.requests else 0.0

    def warning(self, trace: str = "TRACE") -> str | None:
        """One line saying how many requests the server will refuse and how to clip; None
        when every request fits."""
        if self.over == 0:
            return None
        head = (
            f"{self.over} of {self.requests} requests ({self.share:.1%}) exceed the context "
            f"of {self.limit:,} tokens ({self.source}; prompt + output up to "
            f"{self.longest:,}): the server will refuse them (outcome context_exceeded)"
        )
        if self.clip_to is None:
            return head + "; their outputs alone exceed it, so clipping prompts cannot help"
        return (
            f"{head}; to clip: loadgen trace slice {trace} -o CLIPPED.parquet "
            f"--max-input-tokens {self.clip_to} (or trace import ... --max-input-tokens "
            f"{self.clip_to})"
        )


def _prompt_tokens(table: pa.Table) -> pa.ChunkedArray:
    prompt = pc.cast(table.column(s.INPUT_TOKENS), pa.int64())
    if s.IMAGE_TOKENS in table.column_names:
        images = pc.fill_null(pc.cast(table.column(s.IMAGE_TOKENS), pa.int64()), 0)
        prompt = pc.add(prompt, images)
    return prompt


def context_overflow(table: pa.Table, *, limit: int, source: str) -> ContextOverflow:
    """Count the rows of a conformed trace table whose prompt + output exceed ``limit``."""
    if limit < 1:
        raise TransformError(f"a context limit must be >= 1, got {limit}")
    prompt = _prompt_tokens(table)
    output = pc.cast(table.column(s.OUTPUT_TOKENS), pa.int64())
    need = pc.add(prompt, output)
    over_mask = pc.greater(need, limit)
    over = int(pc.sum(pc.cast(over_mask, pa.int64())).as_py() or 0)
    longest = int(pc.max(need).as_py() or 0) if table.num_rows else 0
    clip_to: int | None = None
    if over:
        images = pc.subtract(prompt, pc.cast(table.column(s.INPUT_TOKENS), pa.int64()))
        fixed = pc.add(output, images).filter(over_mask)
        room = limit - int(pc.max(fixed).as_py() or 0)
        clip_to = room if room >= 1 else None
    return ContextOverflow(
        limit=limit,
        source=source,
        requests=table.num_rows,
        over=over,
        longest=longest,
        clip_to=clip_to,
    )


def context_overflow_of(
    requests: Sequence[TraceRequest], *, limit: int, source: str
) -> ContextOverflow:
    """:func:`context_overflow` of requests already read (the replay's)."""
    needs = [r.input_tokens + (r.image_tokens or 0) + r.output_tokens for r in requests]
    over = [r for r, need in zip(requests, needs, strict=True) if need > limit]
    clip_to: int | None = None
    if over:
        room = limit - max(r.output_tokens + (r.image_tokens or 0) for r in over)
        clip_to = room if room >= 1 else None
    return ContextOverflow(
        limit=limit,
        source=source,
        requests=len(requests),
        over=len(over),
        longest=max(needs, default=0),
        clip_to=clip_to,
    )


def deployment_context(info: DeploymentInfo | None) -> tuple[int, str] | None:
    """The endpoint's context limit from what the preflight learnt (``max_model_len``) and
    where it was read; None when it told none."""
    if info is None:
        return None
    for fact in info.facts:
        if fact.key == "max_model_len" and isinstance(fact.value, int):
            return fact.value, f"the endpoint's max_model_len, from the {fact.source}"
    return None


def clip_inputs(table: pa.Table, cap: int, *, block_size: int | None) -> tuple[pa.Table, int]:
    """``table`` with every ``input_tokens`` above ``cap`` set to ``cap`` (and its
    ``prefix_blocks`` cut to the blocks of ``block_size`` tokens it still covers), and
    how many rows were clipped."""
    if cap < 1:
        raise TransformError(f"--max-input-tokens must be positive, got {cap}")
    inputs = table.column(s.INPUT_TOKENS)
    over = pc.greater(inputs, cap)
    n_over = int(pc.sum(pc.cast(over, pa.int64())).as_py() or 0)
    if n_over == 0:
        return table, 0
    idx = table.schema.get_field_index(s.INPUT_TOKENS)
    clipped = pc.cast(pc.min_element_wise(inputs, cap), table.schema.field(idx).type)
    table = table.set_column(idx, table.schema.field(idx), clipped)
    if s.PREFIX_BLOCKS in table.column_names and block_size:
        keep = -(-cap // block_size)
        blocks = table.column(s.PREFIX_BLOCKS).to_pylist()
        cut = [b[:keep] if b is not None else None for b in blocks]
        bidx = table.schema.get_field_index(s.PREFIX_BLOCKS)
        field = table.schema.field(bidx)
        table = table.set_column(bidx, field, pa.array(cut, type=field.type))
    return table, n_over
