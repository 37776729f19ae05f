"""The budget model: first-principles predictions of prefill, decode, KV cache, image and
disaggregation costs, and the model/GPU catalog they draw on.

Pure Python arithmetic on frozen dataclasses, importable by the engine simulator
(``loadgen.sim``) and the analyzers. Only ``catalog`` and ``budgetfile`` read files;
nothing here prints (``reports.plan`` writes a report as text). No module here may import
``loadgen``, httpx or polars.

Typical use::

    from analyzers.budget import catalog, Deployment, prefill_time_s
    model = catalog.model("llama-3.3-70b")
    deploy = Deployment(hardware=catalog.gpu("h200"))
    prefill_time_s(model, deploy, 4000)
"""

from __future__ import annotations

from analyzers.budget import catalog
from analyzers.budget.budgetfile import load_budget, write_budget
from analyzers.budget.calibrate import Calibration, PrefillSample, calibrate_prefill, calibrated
from analyzers.budget.catalog import Catalog, default_catalog, load_catalog
from analyzers.budget.claims import ClaimVerdict, check_claim
from analyzers.budget.decode import decode_step_time_s, decode_tokens_per_s, tpot_s
from analyzers.budget.disagg import BreakEven, PoolRatio, disagg_break_even, pool_ratio
from analyzers.budget.engine.step import SequenceWork, StepCost, step_cost, step_time_s
from analyzers.budget.images import (
    cross_attention_kv_bytes,
    image_encoder_flops,
    image_encoder_time_s,
    image_tokens,
)
from analyzers.budget.kv import (
    kv_bytes,
    kv_bytes_per_token,
    kv_capacity_tokens,
    kv_transfer_exposed_s,
    kv_transfer_time_s,
    max_concurrent_requests,
)
from analyzers.budget.prefill import max_prompt_for_ttft, prefill_time_s
from analyzers.budget.queueing import max_utilisation, mdc_wait_s, mg1_wait_s
from analyzers.budget.report import BudgetReport, PlanInputs, Prediction, build_report
from analyzers.budget.specs import Deployment, HardwareSpec, LinkSpec, ModelSpec, VisionSpec
from analyzers.budget.weights import fits, weights_bytes, weights_read_bytes

__all__ = [
    "BreakEven",
    "BudgetReport",
    "Calibration",
    "Catalog",
    "ClaimVerdict",
    "Deployment",
    "HardwareSpec",
    "LinkSpec",
    "ModelSpec",
    "PlanInputs",
    "PoolRatio",
    "Prediction",
    "PrefillSample",
    "SequenceWork",
    "StepCost",
    "VisionSpec",
    "build_report",
    "calibrate_prefill",
    "calibrated",
    "catalog",
    "check_claim",
    "cross_attention_kv_bytes",
    "decode_step_time_s",
    "decode_tokens_per_s",
    "default_catalog",
    "disagg_break_even",
    "fits",
    "image_encoder_flops",
    "image_encoder_time_s",
    "image_tokens",
    "kv_bytes",
    "kv_bytes_per_token",
    "kv_capacity_tokens",
    "kv_transfer_exposed_s",
    "kv_transfer_time_s",
    "load_budget",
    "load_catalog",
    "max_concurrent_requests",
    "max_prompt_for_ttft",
    "max_utilisation",
    "mdc_wait_s",
    "mg1_wait_s",
    "pool_ratio",
    "prefill_time_s",
    "step_cost",
    "step_time_s",
    "tpot_s",
    "weights_bytes",
    "weights_read_bytes",
    "write_budget",
]
