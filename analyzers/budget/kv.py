"""KV cache arithmetic: bytes per token, capacity of a replica, transfer over a link.

GQA/MHA caches K and V for every KV head; MLA caches one latent plus a RoPE key; sliding
window layers keep at most the window. Never the hidden size in place of
``kv_heads x head_dim`` (the error ref §6 attributes to SplitwiseSim). Pure arithmetic:
this module must not import ``loadgen``, httpx or polars, and does no I/O.
"""

from __future__ import annotations

import math

from analyzers.budget.specs import Deployment, LinkSpec, ModelSpec, dtype_bytes
from analyzers.budget.weights import usable_memory_bytes, weights_bytes
from analyzers.errors import BudgetError


def kv_bytes_per_token_per_layer(model: ModelSpec) -> float:
    """KV bytes one token adds to one self-attention layer.

    GQA/MHA/sliding: ``2 x kv_heads x head_dim x bytes`` (K and V).
    MLA: ``(kv_lora_rank + qk_rope_head_dim) x bytes`` (DeepSeek-V3: 576 x 2 = 1,152 B).
    """
    b = dtype_bytes(model.kv_dtype)
    if model.attention == "mla":
        return (model.kv_lora_rank + model.qk_rope_head_dim) * b
    return 2 * model.kv_heads * model.head_dim * b


def kv_bytes_per_token(model: ModelSpec) -> float:
    """KV bytes per token over all self-attention layers (bf16 unless ``kv_dtype``).

    ``layers x per-layer bytes``: Llama-3-70B 2 x 80 x 8 x 128 x 2 = 327,680 B;
    DeepSeek-V3 (MLA) 61 x (512 + 64) x 2 = 70,272 B. For sliding-window models this is
    the cost while the sequence is within the window; ``kv_bytes`` is exact beyond it.
    """
    return model.self_attention_layers * kv_bytes_per_token_per_layer(model)


def kv_bytes(model: ModelSpec, n_tokens: int) -> float:
    """KV bytes of one sequence of ``n_tokens`` tokens.

    ``n x kv_bytes_per_token``, except that a sliding-window model's local layers hold
    only ``min(n, window)`` tokens:
    ``per_layer x (full_layers x n + local_layers x min(n, window))``.
    Llama-3-70B at 131,072 tokens: 327,680 x 131,072 = 42.95 GB (40.0 GiB).
    """
    if n_tokens < 0:
        raise BudgetError(f"n_tokens must not be negative, got {n_tokens}")
    if model.attention != "sliding":
        return n_tokens * kv_bytes_per_token(model)
    assert model.sliding_window is not None
    assert model.full_attention_layers is not None
    full = model.full_attention_layers
    local = model.self_attention_layers - full
    held = full * n_tokens + local * min(n_tokens, model.sliding_window)
    return held * kv_bytes_per_token_per_layer(model)


def kv_budget_bytes(model: ModelSpec, deploy: Deployment) -> float:
    """Bytes left for KV cache: ``memory_fraction x gpus x hbm - weights``, never negative."""
    return max(0.0, usable_memory_bytes(deploy) - weights_bytes(model))


def kv_capacity_tokens(model: ModelSpec, deploy: Deployment) -> int:
    """Tokens of KV cache the replica holds: ``floor(kv_budget / kv_bytes_per_token)`` (>= 0)."""
    return int(kv_budget_bytes(model, deploy) // kv_bytes_per_token(model))


def max_concurrent_requests(model: ModelSpec, deploy: Deployment, seq_tokens: int) -> int:
    """Requests of ``seq_tokens`` tokens (prompt + output) whose KV fits at once (>= 0)."""
    if seq_tokens <= 0:
        raise BudgetError(f"seq_tokens must be positive, got {seq_tokens}")
    return int(kv_budget_bytes(model, deploy) // kv_bytes(model, seq_tokens))


def _bandwidth(link: LinkSpec | float) -> tuple[float, float]:
    if isinstance(link, LinkSpec):
        return link.bandwidth_bytes_per_s, link.latency_s
    if not link > 0:
        raise BudgetError(f"link bandwidth must be positive, got {link}")
    return float(link), 0.0


def kv_transfer_time_s(model: ModelSpec, n_tokens: int, link: LinkSpec | float) -> float:
    """Seconds to ship one prompt's KV cache: ``latency + kv_bytes(n) / bandwidth``.

    ``link`` is a ``LinkSpec`` or a bandwidth in bytes/s. Llama-3-70B, 4,000 tokens over
    50 GB/s: 1.31e9 / 50e9 = 26.2 ms (ref §6 table).
    """
    bandwidth, latency = _bandwidth(link)
    return latency + kv_bytes(model, n_tokens) / bandwidth


def kv_transfer_exposed_s(
    model: ModelSpec, n_tokens: int, link: LinkSpec | float, prefill_s: float
) -> float:
    """The part of the transfer that lands on TTFT when it streams layer by layer.

    Layer ``i`` can leave once prefill has finished it, so with ``L`` layers the last
    layer's share always remains: ``max(transfer / L, transfer - prefill x (L-1)/L)``.
    """
    transfer = kv_transfer_time_s(model, n_tokens, link)
    layers = model.self_attention_layers
    return max(transfer / layers, transfer - prefill_s * (layers - 1) / layers)


def gib(n_bytes: float) -> float:
    """Bytes in GiB (2**30), for display next to decimal GB."""
    return n_bytes / 2**30


def tokens_in_bytes(model: ModelSpec, n_bytes: float) -> int:
    """How many tokens of KV ``n_bytes`` hold (floor, >= 0)."""
    return max(0, math.floor(n_bytes / kv_bytes_per_token(model)))
