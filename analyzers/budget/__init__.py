"""The budget model: first-principles predictions of prefill, decode, KV cache, image and
disaggregation costs, the model/GPU catalog they draw on, and the planning report.

Pure Python arithmetic on frozen dataclasses, importable by the engine simulator
(``loadgen.sim``) and the analyzers. Only ``catalog``, ``budgetfile`` and ``fleetfile`` read
files; nothing here prints (``reports.plan`` writes a report as text). Must not import ``loadgen``,
``reports``, httpx, polars or pyarrow; of ``traces`` only its errors and the image-token
rules.

The names below are re-exported lazily (PEP 562): ``import analyzers.budget.engine.scheduler``
runs this ``__init__`` too, and the engine must not pay for the planning report, the
calibration or the catalog it does not use.

Typical use::

    from analyzers.budget import catalog, Deployment, prefill_time_s
    model = catalog.model("llama-3.3-70b")
    deploy = Deployment(hardware=catalog.gpu("h200"))
    prefill_time_s(model, deploy, 4000)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from analyzers.budget import (
        admission,
        budgetfile,
        calibrate,
        catalog,
        chunking,
        chunksteps,
        claims,
        decode,
        disagg,
        engine,
        fleet,
        fleetfile,
        formatting,
        images,
        kv,
        longctx,
        measurements,
        prefill,
        profile,
        queueing,
        report,
        specs,
        weights,
    )
    from analyzers.budget.budgetfile import load_budget, write_budget
    from analyzers.budget.calibrate import (
        Calibration,
        PrefillSample,
        ProfileFit,
        calibrate_prefill,
        calibrated,
        fit_profiles,
    )
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
    from analyzers.budget.measurements import Observation, load_measurements
    from analyzers.budget.prefill import max_prompt_for_ttft, prefill_time_s
    from analyzers.budget.profile import PhaseProfile, StepProfile, load_profiles
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
    "Observation",
    "PhaseProfile",
    "PlanInputs",
    "PoolRatio",
    "Prediction",
    "PrefillSample",
    "ProfileFit",
    "SequenceWork",
    "StepCost",
    "StepProfile",
    "VisionSpec",
    "admission",
    "budgetfile",
    "build_report",
    "calibrate",
    "calibrate_prefill",
    "calibrated",
    "catalog",
    "check_claim",
    "chunking",
    "chunksteps",
    "claims",
    "cross_attention_kv_bytes",
    "decode",
    "decode_step_time_s",
    "decode_tokens_per_s",
    "default_catalog",
    "disagg",
    "disagg_break_even",
    "engine",
    "fit_profiles",
    "fits",
    "fleet",
    "fleetfile",
    "formatting",
    "image_encoder_flops",
    "image_encoder_time_s",
    "image_tokens",
    "images",
    "kv",
    "kv_bytes",
    "kv_bytes_per_token",
    "kv_capacity_tokens",
    "kv_transfer_exposed_s",
    "kv_transfer_time_s",
    "load_budget",
    "load_catalog",
    "load_measurements",
    "load_profiles",
    "longctx",
    "max_concurrent_requests",
    "max_prompt_for_ttft",
    "max_utilisation",
    "mdc_wait_s",
    "measurements",
    "mg1_wait_s",
    "pool_ratio",
    "prefill",
    "prefill_time_s",
    "profile",
    "queueing",
    "report",
    "specs",
    "step_cost",
    "step_time_s",
    "tpot_s",
    "weights",
    "weights_bytes",
    "weights_read_bytes",
    "write_budget",
]

# Where each re-exported name is defined, relative to this package; the other names of
# ``__all__`` are the submodules themselves.
_SOURCES: Final[dict[str, tuple[str, ...]]] = {
    "budgetfile": ("load_budget", "write_budget"),
    "calibrate": (
        "Calibration",
        "PrefillSample",
        "ProfileFit",
        "calibrate_prefill",
        "calibrated",
        "fit_profiles",
    ),
    "catalog": ("Catalog", "default_catalog", "load_catalog"),
    "claims": ("ClaimVerdict", "check_claim"),
    "decode": ("decode_step_time_s", "decode_tokens_per_s", "tpot_s"),
    "disagg": ("BreakEven", "PoolRatio", "disagg_break_even", "pool_ratio"),
    "engine.step": ("SequenceWork", "StepCost", "step_cost", "step_time_s"),
    "images": (
        "cross_attention_kv_bytes",
        "image_encoder_flops",
        "image_encoder_time_s",
        "image_tokens",
    ),
    "measurements": ("Observation", "load_measurements"),
    "profile": ("PhaseProfile", "StepProfile", "load_profiles"),
    "kv": (
        "kv_bytes",
        "kv_bytes_per_token",
        "kv_capacity_tokens",
        "kv_transfer_exposed_s",
        "kv_transfer_time_s",
        "max_concurrent_requests",
    ),
    "prefill": ("max_prompt_for_ttft", "prefill_time_s"),
    "queueing": ("max_utilisation", "mdc_wait_s", "mg1_wait_s"),
    "report": ("BudgetReport", "PlanInputs", "Prediction", "build_report"),
    "specs": ("Deployment", "HardwareSpec", "LinkSpec", "ModelSpec", "VisionSpec"),
    "weights": ("fits", "weights_bytes", "weights_read_bytes"),
}
_EXPORTS: Final = {name: module for module, names in _SOURCES.items() for name in names}


def __getattr__(name: str) -> object:
    """Import a public name's module on first use and keep the name here."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    elif name in __all__:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
