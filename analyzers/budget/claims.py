"""Claim check: can model M on hardware H produce X tokens/s? Against both bounds.

Compute bound: every token costs at least ``2 x N_active`` FLOPs, so
``tokens/s <= gpus x peak / (2 N_active)``. Bandwidth bound (output tokens): every decode
step reads the weights and each sequence's KV; at the largest batch the KV cache holds,
``tokens/s <= b / ((weights + b x KV(ctx)) / (gpus x HBM BW))``. Both at 100% of peak, so
a claim above either is impossible, not merely optimistic. Pure arithmetic: this module
must not import ``loadgen``, httpx or polars, and does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from analyzers.budget.formatting import fmt, fmt_bytes
from analyzers.budget.kv import kv_budget_bytes, kv_bytes
from analyzers.budget.specs import Deployment, ModelSpec
from analyzers.budget.weights import usable_memory_bytes, weights_bytes, weights_read_bytes
from analyzers.errors import BudgetError

Phase = Literal["output", "input"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimVerdict:
    """The verdict on a throughput claim, with each bound and the reasons it fails."""

    tokens_per_s: float
    phase: Phase
    compute_bound_tokens_per_s: float
    bandwidth_bound_tokens_per_s: float | None
    max_batch: int
    reasons: tuple[str, ...]
    chains: tuple[str, ...]

    @property
    def possible(self) -> bool:
        """True when the claim is within every bound."""
        return not self.reasons


def check_claim(
    model: ModelSpec,
    deploy: Deployment,
    tokens_per_s: float,
    *,
    phase: Phase = "output",
    context_len: int = 1024,
    batch: int | None = None,
) -> ClaimVerdict:
    """Judge ``tokens_per_s`` of ``phase`` tokens on the replica (all its GPUs).

    ``context_len`` is the KV each decoding sequence reads per step; ``batch`` fixes the
    decode batch (default: as many sequences of ``context_len`` as the KV cache holds).
    """
    if tokens_per_s <= 0:
        raise BudgetError(f"tokens_per_s must be positive, got {tokens_per_s}")
    if phase not in ("output", "input"):
        raise BudgetError(f"phase must be output or input, got {phase!r}")
    hw = deploy.hardware
    gpus = deploy.gpus
    peak = hw.peak_flops(model.weight_dtype)
    per_token = 2 * model.params_active
    compute_bound = gpus * peak / per_token
    chains = [
        f"compute bound: {gpus} x {fmt(peak)} FLOP/s / (2 x {fmt(model.params_active)} FLOP/token)"
        f" = {fmt(compute_bound)} tokens/s"
    ]
    reasons: list[str] = []
    if tokens_per_s > compute_bound:
        reasons.append(
            f"exceeds the compute bound of {fmt(compute_bound)} tokens/s "
            f"({gpus} x {fmt(peak)} {model.weight_dtype.upper()} FLOP/s / "
            f"{fmt(per_token)} FLOP per token)"
        )
    weights = weights_bytes(model)
    usable = usable_memory_bytes(deploy)
    if weights >= usable:
        reasons.append(
            f"memory: weights {fmt_bytes(weights)} do not fit in {fmt_bytes(usable)} "
            f"({gpus} x {fmt_bytes(hw.hbm_bytes)} x {deploy.memory_fraction})"
        )
    bandwidth_bound: float | None = None
    seq_bytes = kv_bytes(model, context_len)
    max_batch = int(kv_budget_bytes(model, deploy) // seq_bytes) if seq_bytes > 0 else 0
    if phase == "output":
        b = batch if batch is not None else max_batch
        if b <= 0:
            reasons.append(f"memory: no room for one sequence of {context_len} tokens of KV")
        else:
            step_bytes = weights_read_bytes(model, b) + b * seq_bytes
            bw = gpus * hw.hbm_bandwidth_bytes_per_s
            bandwidth_bound = b * bw / step_bytes
            weight_read = step_bytes - b * seq_bytes
            chains.append(
                f"bandwidth bound: {b} seqs x {fmt(bw)} B/s / ({fmt_bytes(weight_read)}"
                f" + {b} x {fmt_bytes(seq_bytes)}) = {fmt(bandwidth_bound)} tokens/s"
            )
            if tokens_per_s > bandwidth_bound:
                reasons.append(
                    f"exceeds the HBM bandwidth bound of {fmt(bandwidth_bound)} tokens/s at "
                    f"batch {b} and {context_len}-token context"
                )
    return ClaimVerdict(
        tokens_per_s=tokens_per_s,
        phase=phase,
        compute_bound_tokens_per_s=compute_bound,
        bandwidth_bound_tokens_per_s=bandwidth_bound,
        max_batch=max_batch,
        reasons=tuple(reasons),
        chains=tuple(chains),
    )
