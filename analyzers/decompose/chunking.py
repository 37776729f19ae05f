"""What chunked prefill does at the run's own load: ``decompose``'s chunking line.

The run's served requests (the first ``MAX_REQUESTS`` by arrival), at their arrivals on
the server's clock, are replayed to the end of their outputs through the engine's
scheduler twice, with the deployment's chunk size (``max_batched_tokens``) and with
unchunked prefill, every step timed by the budget (:mod:`analyzers.budget.chunking`): the
difference in decode ITL p99 is what the chunk size buys, the difference in TTFT p99 what
it costs (or saves, when long prefills no longer block the queue). A disaggregated
deployment's prefill instances decode nothing, so there is no line for them.

Must not import loadgen or httpx.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import polars as pl

from analyzers.budget.chunking import EngineSetup, chunk_effect_line, chunk_run
from analyzers.budget.engine.scheduler import SchedulerLimits
from analyzers.budget.engine.step import SequenceWork, step_time_s
from analyzers.budget.kv import kv_capacity_tokens
from analyzers.decompose.load import served_arrivals
from analyzers.decompose.model import BudgetModel
from analyzers.errors import BudgetError

MAX_REQUESTS: Final = 1000
"""Requests replayed at most (the first by arrival): each is decoded to its last token."""


def chunking_line(
    lf: pl.LazyFrame,
    budget: BudgetModel,
    *,
    network_ms: float,
    time_scale: float,
    max_steps: int,
) -> str:
    """One sentence on the ITL p99 and TTFT p99 effect of the deployment's chunk size at
    the run's load (``lf`` carries ``ROW``); "" when it does not apply."""
    if budget.link is not None:
        return ""
    deploy = budget.deployment
    chunk = deploy.chunk_tokens
    if chunk is None:
        return (
            "chunked prefill: the deployment names no chunk size (unchunked prefill); "
            "`loadgen plan chunk` compares chunk sizes at a load"
        )
    arrivals = served_arrivals(lf, network_ms=network_ms, time_scale=time_scale)
    if len(arrivals) < 2:
        return ""
    arrivals = arrivals[:MAX_REQUESTS]
    model = budget.model

    def timer(work: Sequence[SequenceWork]) -> float:
        return step_time_s(model, deploy, work)

    try:
        blocks = kv_capacity_tokens(model, deploy) // 16
        limits = SchedulerLimits(
            num_blocks=max(1, blocks),
            max_num_seqs=budget.max_num_seqs,
            max_batched_tokens=chunk,
            prefix_cache=False,  # cached tokens come from each request's reported usage
        )
        setup = EngineSetup(
            timer=timer, limits=limits, replicas=budget.replicas, max_steps=max_steps
        )
        base = chunk_run(arrivals, setup, None, capacity=False)
        mine = chunk_run(arrivals, setup, chunk, capacity=False)
    except BudgetError as exc:
        return f"chunked prefill at {chunk} tokens per step: not replayed ({exc})"
    return chunk_effect_line(base, mine)
