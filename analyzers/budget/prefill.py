"""Prefill: the time to compute a prompt's KV cache and first token, and its inverse.

Prefill is compute-bound: ``2 x N_active x n`` FLOPs for the weights plus the causal
attention term, at the replica's achieved FLOP/s, or the HBM time when the prompt is too
short to amortise one read of the weights. Chunked prefill splits the prompt into
``k``-token steps, each paying its own weight read and overhead. Pure arithmetic: this
module must not import ``loadgen``, httpx or polars, and does no I/O.
"""

from __future__ import annotations

from analyzers.budget.engine.step import SequenceWork, StepCost, step_cost
from analyzers.budget.specs import Deployment, ModelSpec
from analyzers.errors import BudgetError


def prefill_chunks(n_uncached: int, n_cached: int, chunk_tokens: int | None) -> list[SequenceWork]:
    """The steps a prompt takes: one, or ``ceil(n / k)`` chunks of at most ``k`` tokens."""
    if n_uncached < 0 or n_cached < 0:
        raise BudgetError(f"token counts must not be negative, got {n_uncached}, {n_cached}")
    if chunk_tokens is None or n_uncached <= chunk_tokens:
        return [SequenceWork(new_tokens=n_uncached, cached_tokens=n_cached)]
    return [
        SequenceWork(new_tokens=min(chunk_tokens, n_uncached - done), cached_tokens=n_cached + done)
        for done in range(0, n_uncached, chunk_tokens)
    ]


def prefill_costs(
    model: ModelSpec,
    deploy: Deployment,
    n_uncached: int,
    n_cached: int = 0,
    *,
    chunk_tokens: int | None = None,
) -> list[StepCost]:
    """The roofline terms of each prefill step (one unless chunked)."""
    k = chunk_tokens if chunk_tokens is not None else deploy.chunk_tokens
    return [step_cost(model, deploy, [w]) for w in prefill_chunks(n_uncached, n_cached, k)]


def prefill_time_s(
    model: ModelSpec,
    deploy: Deployment,
    n_uncached: int,
    n_cached: int = 0,
    *,
    chunk_tokens: int | None = None,
) -> float:
    """Seconds to prefill ``n_uncached`` new prompt tokens on top of ``n_cached`` cached ones.

    Per step: ``max(F / (tp x peak x eff_prefill), B / (tp x BW x eff_decode)) + overhead``
    with ``F = 2 N_active n + 2 L H (d_qk + d_v)/2 x n (n + 2c)`` and
    ``B = weights + KV(c + n)``. Chunks (``chunk_tokens`` or the deployment's) are summed.
    Seed check: 2 x 70.55e9 x 4000 / 1.2e15 = 0.47 s (+3.7% attention, ref §6).
    """
    return sum(
        c.time_s
        for c in prefill_costs(model, deploy, n_uncached, n_cached, chunk_tokens=chunk_tokens)
    )


def max_prompt_for_ttft(
    model: ModelSpec,
    deploy: Deployment,
    budget_s: float,
    *,
    n_cached: int = 0,
    other_s: float = 0.0,
    limit: int = 10_000_000,
) -> int:
    """The longest uncached prompt whose prefill fits in ``budget_s - other_s`` seconds.

    Prefill time grows with ``n``, so this is a bisection for the largest ``n`` with
    ``prefill_time_s(n) <= budget_s - other_s`` (``other_s``: network, queue, first
    decode step). Returns 0 when not even one token fits, ``limit`` when all do.
    """
    room = budget_s - other_s
    if room <= 0 or prefill_time_s(model, deploy, 1, n_cached) > room:
        return 0
    if prefill_time_s(model, deploy, limit, n_cached) <= room:
        return limit
    lo, hi = 1, limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if prefill_time_s(model, deploy, mid, n_cached) <= room:
            lo = mid
        else:
            hi = mid
    return lo
