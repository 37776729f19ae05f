"""Decode: one token per sequence per step, re-reading the weights and the KV cache.

Decode is bandwidth-bound at small batches and turns compute-bound only at large ones;
the step time is the roofline maximum of both. Pure arithmetic: this module must not
import ``loadgen``, httpx or polars, and does no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from analyzers.budget.engine.step import (
    SequenceWork,
    StepCost,
    attention_flops,
    linear_flops,
    step_cost,
)
from analyzers.budget.kv import kv_bytes
from analyzers.budget.specs import Deployment, ModelSpec
from analyzers.budget.weights import weights_read_bytes
from analyzers.errors import BudgetError


def decode_cost(model: ModelSpec, deploy: Deployment, context_lens: Sequence[int]) -> StepCost:
    """The roofline terms of one decode step for sequences with these context lengths."""
    if not context_lens:
        raise BudgetError("a decode step needs at least one sequence")
    return step_cost(
        model, deploy, [SequenceWork(new_tokens=1, cached_tokens=c) for c in context_lens]
    )


def decode_step_time_s(model: ModelSpec, deploy: Deployment, context_lens: Sequence[int]) -> float:
    """Seconds of one decode step: a batch of ``len(context_lens)`` sequences.

    ``max(F / (tp x peak x eff_prefill), B / (tp x BW x eff_decode)) + overhead`` with
    ``F = 2 N_active b + sum attention`` and ``B = weights_read(b) + sum KV(ctx_i + 1)``.
    Lower bound (ref §6): 70B FP8 on one H200: 70.55e9 B / 4.8e12 B/s = 14.7 ms.
    """
    return decode_cost(model, deploy, context_lens).time_s


def uniform_decode_cost(
    model: ModelSpec, deploy: Deployment, batch: int, context_len: int
) -> StepCost:
    """``decode_cost`` for ``batch`` sequences of equal context, without building the list."""
    if batch <= 0:
        raise BudgetError(f"batch must be positive, got {batch}")
    if context_len < 0:
        raise BudgetError(f"context_len must not be negative, got {context_len}")
    if deploy.profile is not None:  # the profiled terms live in step_cost
        return decode_cost(model, deploy, [context_len] * batch)
    return StepCost(
        linear_flops=linear_flops(model, batch),
        attention_flops=batch * attention_flops(model, 1, context_len),
        weight_bytes=weights_read_bytes(model, batch),
        kv_bytes=batch * kv_bytes(model, context_len + 1),
        compute_flops_per_s=deploy.compute_flops(model.weight_dtype),
        bandwidth_bytes_per_s=deploy.bandwidth_bytes_per_s(),
        overhead_s=deploy.step_overhead_s,
    )


def tpot_s(model: ModelSpec, deploy: Deployment, batch: int, context_len: int) -> float:
    """Time per output token at ``batch`` sequences of ``context_len`` tokens each."""
    return uniform_decode_cost(model, deploy, batch, context_len).time_s


def decode_tokens_per_s(
    model: ModelSpec, deploy: Deployment, batch: int, context_len: int
) -> float:
    """Output tokens per second of the replica: ``batch / tpot``."""
    return batch / tpot_s(model, deploy, batch, context_len)
