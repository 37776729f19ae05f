"""Weight memory: how many bytes a model's weights take and how many one step reads.

Pure arithmetic on ``ModelSpec``; this module must not import ``loadgen``, httpx or
polars, and does no I/O.
"""

from __future__ import annotations

from analyzers.budget.specs import Deployment, ModelSpec, dtype_bytes
from analyzers.errors import BudgetError


def weights_bytes(model: ModelSpec) -> float:
    """Bytes of all weights: ``params_total x bytes(weight_dtype)``.

    Llama-3-70B in FP8: 70.55e9 x 1 B = 70.55 GB (ref §6: "about 70.6 GB").
    """
    return model.params_total * dtype_bytes(model.weight_dtype)


def expert_params(model: ModelSpec) -> tuple[float, float]:
    """(shared, per-expert) parameters of an MoE model, solved from the catalog's counts.

    With ``E`` routed experts of which ``k`` are active per token,
    ``total = shared + E x p`` and ``active = shared + k x p``, so
    ``p = (total - active) / (E - k)`` and ``shared = active - k x p``.
    A dense model is all shared.
    """
    if not model.is_moe or model.experts == model.experts_active:
        return model.params_total, 0.0
    per_expert = (model.params_total - model.params_active) / (model.experts - model.experts_active)
    return model.params_active - model.experts_active * per_expert, per_expert


def weights_read_bytes(model: ModelSpec, tokens: int) -> float:
    """Weight bytes one forward step over ``tokens`` tokens reads from HBM.

    Dense: every weight, once: ``params_total x bytes``. MoE: the shared weights plus the
    experts the tokens touch; with routing uniform and independent, each expert is
    touched with probability ``1 - (1 - k/E)^tokens``, so the read grows from the active
    parameters (one token) to all of them (large batches).
    """
    if tokens < 0:
        raise BudgetError(f"tokens must not be negative, got {tokens}")
    shared, per_expert = expert_params(model)
    if per_expert == 0.0:
        return weights_bytes(model)
    touched = 1.0 - (1.0 - model.experts_active / model.experts) ** max(tokens, 1)
    return (shared + model.experts * per_expert * touched) * dtype_bytes(model.weight_dtype)


def usable_memory_bytes(deploy: Deployment) -> float:
    """HBM the engine claims on the replica: ``memory_fraction x gpus x hbm_bytes``."""
    return deploy.memory_fraction * deploy.gpus * deploy.hardware.hbm_bytes


def fits(model: ModelSpec, deploy: Deployment) -> bool:
    """True when the weights fit in the claimed memory with room left for KV cache."""
    return weights_bytes(model) < usable_memory_bytes(deploy)
