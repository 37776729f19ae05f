"""A slot engine's prefill read from the run, where its own timings are missing or hidden.

In order:

- **its response heads**, where every served request's head came before its first token:
  llama-server writes a streamed response's head when a slot starts the prompt (within
  3 ms of its own prompt start for 89% of 2,400 requests in 67 runs, the prefill's p90
  and p99 within 2.2%), so the head to the first token is the prompt's time;
- **its steps** (:mod:`analyzers.decompose.admission`), where they can be read: on one
  replica (several interleave their steps in the run) and where no prompt is longer than
  half the batch (the engine fills a batch slot by slot, so a later slot's prompt gets
  what the earlier ones leave, step after step, while the streams show no step that runs
  prompts alone: with llama.cpp's ``-b 512`` and prompts of 256-2,500 tokens the reading's
  p99 prefill was 40-76% short; it walks back one step per prompt that did not fit, which
  holds where two prompts fill a batch);
- else not read: the replay's prediction stands, and the line says why.

Each reading less the predicted time after the prompt's last step (the first token, the
transfer and the decode wait: 0 in one replica). Must not import loadgen or httpx.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import polars as pl

from analyzers.decompose.admission import PROMPT_MS, prompt_starts
from analyzers.decompose.columns import NETWORK_MS, SERVER_SIDE_MS, UNCACHED, TermSource
from analyzers.decompose.load import ROW
from analyzers.decompose.model import BudgetModel
from traces import schema as s

SLOT_PREFILL: Final = "_slot_prefill"
"""Per request: the prefill read from the run, in ms (null where none was read)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotPrefill:
    """The frame with ``SLOT_PREFILL``, where the prefill was read from (``headers``,
    ``steps``; None: not read) and the prediction line's words for it."""

    frame: pl.DataFrame
    source: TermSource | None
    line: str


def read_slot_prefill(
    frame: pl.DataFrame, scanned: pl.LazyFrame, budget: BudgetModel, time_scale: float
) -> SlotPrefill:
    """The slot engine's prefill of every request of ``frame`` (the decomposition's,
    with ``_head_ms``, ``NETWORK_MS`` and the predictions), read as the module says."""
    if frame.height > 0 and frame.get_column("_head_ms").null_count() == 0:
        prefill = pl.col(SERVER_SIDE_MS) - pl.col("_head_ms")
        return SlotPrefill(
            frame=frame.with_columns(_less_after(prefill)),
            source="headers",
            line="prefill read from the response heads (written when a slot starts the prompt)",
        )
    why = _steps_unread(frame, budget)
    if why is not None:
        return SlotPrefill(
            frame=frame.with_columns(pl.lit(None, dtype=pl.Float64).alias(SLOT_PREFILL)),
            source=None,
            line=why,
        )
    batch = budget.deployment.chunk_tokens
    return SlotPrefill(
        frame=_steps_prefill(
            frame, scanned, slots=budget.max_num_seqs, batch_tokens=batch, time_scale=time_scale
        ),
        source="steps",
        line=(
            f"prefill read from the run's steps ({budget.max_num_seqs} slot(s), "
            f"{'unbounded' if batch is None else batch} batch tokens)"
        ),
    )


def _less_after(prompt_ms: pl.Expr) -> pl.Expr:
    """``SLOT_PREFILL``: ``prompt_ms`` (start of the prompt to first token) less the
    predicted time after the prompt's last step (the first token, the transfer and the
    decode wait: 0 in one replica, where the prompt's step samples it), at least 0."""
    after = (
        pl.coalesce(pl.col("_l_first"), pl.col("_p_first"))
        + pl.coalesce(pl.col("_l_transfer"), pl.col("_p_transfer"))
        + pl.coalesce(pl.col("_l_wait"), pl.lit(0.0))
    )
    return (prompt_ms - after).clip(lower_bound=0.0).alias(SLOT_PREFILL)


def _steps_unread(frame: pl.DataFrame, budget: BudgetModel) -> str | None:
    """Why the run's steps cannot give the prefill (the module's two cases), or None."""
    if budget.replicas > 1:
        return f"prefill not read from the run's steps: {budget.replicas} replicas interleave them"
    batch = budget.deployment.chunk_tokens
    longest = int(frame.get_column(UNCACHED).max() or 0)  # type: ignore[arg-type]
    if batch is not None and 2 * longest > batch:
        return (
            f"prefill not read from the run's steps: prompts of up to {longest} tokens, over "
            f"half its {batch}-token batch, share it over many steps"
        )
    return None


def _steps_prefill(
    frame: pl.DataFrame,
    scanned: pl.LazyFrame,
    *,
    slots: int,
    batch_tokens: int | None,
    time_scale: float,
) -> pl.DataFrame:
    """``frame`` with ``SLOT_PREFILL`` from the run's steps: from the start of the step
    each prompt first entered to its first token (:func:`prompt_starts`)."""
    to_ns = 1e6 * time_scale
    tokens = pl.col(s.SENT_NS) + pl.col(s.CHUNK_OFFSETS_US).cast(pl.List(pl.Int64)) * 1000
    times = scanned.select(
        ROW,
        s.REQUEST_WRITTEN_NS,
        s.FIRST_TOKEN_NS,
        s.END_NS,
        tokens.alias("steps_ns"),
    ).collect()
    requests = frame.join(times, on=ROW).select(
        ROW,
        (pl.col(s.REQUEST_WRITTEN_NS) + pl.col(NETWORK_MS).fill_null(0.0) * to_ns)
        .cast(pl.Int64)
        .alias("arrival_ns"),
        pl.col(s.FIRST_TOKEN_NS).alias("first_ns"),
        pl.col(s.END_NS).alias("end_ns"),
        "steps_ns",
        pl.col(UNCACHED).fill_null(0).alias("tokens"),
    )
    started = prompt_starts(requests, slots=slots, batch_tokens=batch_tokens, time_scale=time_scale)
    return (
        frame.join(started, on=ROW, how="left")
        .with_columns(_less_after(pl.col(PROMPT_MS)))
        .drop(PROMPT_MS)
    )
