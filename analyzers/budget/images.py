"""Images: the LM tokens an image becomes and the vision-encoder time before prefill.

Token counts come from ``traces.prompts.image_tokens`` (shared with the trace synthesizer); this
module adds the encoder's cost, ``2 x N_vit x patches`` FLOPs, and Llama 3.2 Vision's
cross-attention KV. The encoder is timed on one GPU at the BF16 peak (vision towers sit
outside the LM's tensor parallelism). Pure arithmetic: this module must not import
``loadgen``, httpx or polars, and does no I/O.
"""

from __future__ import annotations

from analyzers.budget.specs import Deployment, ModelSpec, VisionSpec, dtype_bytes
from analyzers.errors import BudgetError
from traces.errors import ValidationError
from traces.prompts import image_tokens as rules


def _vision(model: ModelSpec) -> VisionSpec:
    if model.vision is None:
        raise BudgetError(f"model {model.name!r} has no vision encoder in the catalog")
    return model.vision


def image_tokens(model: ModelSpec, width: int, height: int) -> int:
    """LM prompt tokens of one ``width`` x ``height`` image under the model's rule.

    They cost the LM exactly what text tokens cost, in prefill FLOPs and KV (ref §4).
    """
    try:
        return rules.image_tokens(_vision(model).family, width, height)
    except ValidationError as exc:
        raise BudgetError(str(exc)) from exc


def image_encoder_flops(model: ModelSpec, width: int, height: int) -> float:
    """Encoder FLOPs of one image: ``2 x encoder_params x patches``.

    Qwen2-VL at 1,222 merged tokens: 4 x 1,222 = 4,888 patches x 2 x 0.675e9 = 6.6e12.
    """
    vision = _vision(model)
    try:
        patches = rules.encoder_patches(vision.family, width, height)
    except ValidationError as exc:
        raise BudgetError(str(exc)) from exc
    return 2 * vision.encoder_params * patches


def image_encoder_time_s(model: ModelSpec, deploy: Deployment, width: int, height: int) -> float:
    """Seconds to encode one image: ``flops / (peak_bf16 x eff_prefill)`` on one GPU."""
    flops = image_encoder_flops(model, width, height)
    return flops / (deploy.hardware.peak_flops("bf16") * deploy.prefill_efficiency)


def cross_attention_kv_bytes(model: ModelSpec, width: int, height: int) -> float:
    """KV bytes of one image's vision states in the cross-attention layers (0 for others).

    ``states x cross_layers x 2 x kv_heads x head_dim x bytes``; Llama 3.2 Vision holds
    1,601 states per 560 px tile, up to 6,404 per image (ref §4).
    """
    if model.cross_attention_layers == 0:
        return 0.0
    try:
        states = rules.vision_states(_vision(model).family, width, height)
    except ValidationError as exc:
        raise BudgetError(str(exc)) from exc
    per_state = 2 * model.kv_heads * model.head_dim * dtype_bytes(model.kv_dtype)
    return states * model.cross_attention_layers * per_state
