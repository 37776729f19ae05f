"""The inputs of the budget model: what a model is, what a GPU can do, how it is deployed.

Frozen, slotted, keyword-only dataclasses validated on construction (a bad value raises
``BudgetError``). Units are in the names: ``*_bytes``, ``*_flops`` (FLOP/s for peaks),
``*_bytes_per_s``, ``*_s``. Pure Python: this module must not import ``loadgen``, httpx or
polars, and does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from analyzers.budget.profile import StepProfile
from analyzers.errors import BudgetError

DType = Literal["bf16", "fp16", "fp8", "fp4", "int4"]
AttentionKind = Literal["gqa", "mla", "sliding"]

DTYPES: tuple[str, ...] = get_args(DType)
ATTENTION_KINDS: tuple[str, ...] = get_args(AttentionKind)

_DTYPE_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5, "int4": 0.5}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of ``dtype`` (0.5 for the 4-bit formats)."""
    try:
        return _DTYPE_BYTES[dtype]
    except KeyError:
        raise BudgetError(f"unknown dtype {dtype!r}; known dtypes: {', '.join(DTYPES)}") from None


def check_dtype(dtype: str) -> DType:
    """Return ``dtype`` as a ``DType`` or raise ``BudgetError`` naming the known ones."""
    dtype_bytes(dtype)
    return dtype  # type: ignore[return-value]  # checked against DTYPES just above


def _positive(owner: str, **values: float | int | None) -> None:
    for name, value in values.items():
        if value is not None and not value > 0:
            raise BudgetError(f"{owner}: {name} must be positive, got {value}")


@dataclass(frozen=True, slots=True, kw_only=True)
class VisionSpec:
    """A vision encoder: its ``traces.prompts.image_tokens`` family and parameter count."""

    family: str
    encoder_params: float
    source: str = ""

    def __post_init__(self) -> None:
        _positive("vision", encoder_params=self.encoder_params)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A served language model, as the arithmetic needs it.

    ``params_total``/``params_active`` differ only for mixture-of-experts models
    (``experts`` routed experts, ``experts_active`` per token). ``attention`` is ``gqa``
    (MHA when ``kv_heads == q_heads``), ``mla`` (a ``kv_lora_rank`` latent plus a
    ``qk_rope_head_dim`` RoPE key per layer) or ``sliding`` (``full_attention_layers``
    global layers, the rest over a ``sliding_window``). ``cross_attention_layers`` are
    layers that attend to vision states only (Llama 3.2 Vision) and hold no text KV.
    """

    name: str
    params_total: float
    params_active: float
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    ffn_hidden: int | None = None
    weight_dtype: DType = "bf16"
    kv_dtype: DType = "bf16"
    attention: AttentionKind = "gqa"
    qk_head_dim: int | None = None
    v_head_dim: int | None = None
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    sliding_window: int | None = None
    full_attention_layers: int | None = None
    cross_attention_layers: int = 0
    experts: int = 0
    experts_active: int = 0
    max_context: int | None = None
    vision: VisionSpec | None = None
    source: str = ""

    def __post_init__(self) -> None:
        owner = f"model {self.name!r}"
        _positive(
            owner,
            params_total=self.params_total,
            params_active=self.params_active,
            layers=self.layers,
            hidden=self.hidden,
            q_heads=self.q_heads,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            vocab=self.vocab,
            sliding_window=self.sliding_window,
            max_context=self.max_context,
        )
        check_dtype(self.weight_dtype)
        check_dtype(self.kv_dtype)
        if self.attention not in ATTENTION_KINDS:
            raise BudgetError(
                f"{owner}: attention must be one of {', '.join(ATTENTION_KINDS)}, "
                f"got {self.attention!r}"
            )
        if self.params_active > self.params_total:
            raise BudgetError(f"{owner}: params_active exceeds params_total")
        if self.attention == "mla" and self.kv_lora_rank <= 0:
            raise BudgetError(f"{owner}: MLA attention needs kv_lora_rank > 0")
        if self.attention == "sliding" and (
            self.sliding_window is None or self.full_attention_layers is None
        ):
            raise BudgetError(
                f"{owner}: sliding attention needs sliding_window and full_attention_layers"
            )
        if not 0 <= self.cross_attention_layers < self.layers:
            raise BudgetError(f"{owner}: cross_attention_layers must be in [0, layers)")
        if (self.experts > 0) != (self.experts_active > 0) or self.experts_active > self.experts:
            raise BudgetError(f"{owner}: need 0 < experts_active <= experts for an MoE model")

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model."""
        return self.experts > 0

    @property
    def self_attention_layers(self) -> int:
        """Layers whose KV cache holds the text (all but the cross-attention layers)."""
        return self.layers - self.cross_attention_layers

    @property
    def attention_qk_dim(self) -> int:
        """Per-head width of the query-key product (192 for DeepSeek-V3's MLA)."""
        return self.qk_head_dim or self.head_dim

    @property
    def attention_v_dim(self) -> int:
        """Per-head width of the values."""
        return self.v_head_dim or self.head_dim


@dataclass(frozen=True, slots=True, kw_only=True)
class HardwareSpec:
    """One accelerator: dense (no 2:4 sparsity) peaks, memory and links, per GPU."""

    name: str
    peak_flops_bf16: float
    peak_flops_fp8: float | None = None
    peak_flops_fp4: float | None = None
    hbm_bytes: float
    hbm_bandwidth_bytes_per_s: float
    scale_up_bandwidth_bytes_per_s: float = 0.0
    scale_out_bandwidth_bytes_per_s: float = 0.0
    pcie_bandwidth_bytes_per_s: float = 0.0
    interconnect: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if self.pcie_bandwidth_bytes_per_s < 0 or self.scale_up_bandwidth_bytes_per_s < 0:
            raise BudgetError(f"gpu {self.name!r}: link bandwidths must not be negative")
        _positive(
            f"gpu {self.name!r}",
            peak_flops_bf16=self.peak_flops_bf16,
            peak_flops_fp8=self.peak_flops_fp8,
            peak_flops_fp4=self.peak_flops_fp4,
            hbm_bytes=self.hbm_bytes,
            hbm_bandwidth_bytes_per_s=self.hbm_bandwidth_bytes_per_s,
        )

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for matrix maths with ``dtype`` weights.

        16-bit and 4-bit integer (weight-only) formats compute at the BF16 peak; FP8 and
        FP4 need tensor-core support, else ``BudgetError`` names the GPU and dtype.
        """
        check_dtype(dtype)
        if dtype == "fp8":
            peak = self.peak_flops_fp8
        elif dtype == "fp4":
            peak = self.peak_flops_fp4
        else:
            peak = self.peak_flops_bf16
        if peak is None:
            raise BudgetError(f"gpu {self.name!r} has no {dtype.upper()} tensor cores")
        return peak


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSpec:
    """A link KV caches travel over: usable bytes per second and a fixed setup latency."""

    name: str
    bandwidth_bytes_per_s: float
    latency_s: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        _positive(f"link {self.name!r}", bandwidth_bytes_per_s=self.bandwidth_bytes_per_s)
        if self.latency_s < 0:
            raise BudgetError(f"link {self.name!r}: latency_s must not be negative")


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """One replica: its GPUs and how well the engine uses them.

    Per-request latency uses the tensor-parallel group (``tensor_parallel`` GPUs share
    every step); pipeline stages add memory and throughput, not speed, so memory uses
    ``gpus``. ``prefill_efficiency`` is the achieved fraction of peak FLOP/s (used for
    every compute term), ``decode_efficiency`` the achieved fraction of HBM bandwidth
    (every memory term). ``step_overhead_s`` is added once per forward step (launch and
    scheduling). ``memory_fraction`` is the share of HBM the engine claims for weights
    plus KV cache (vLLM's ``gpu_memory_utilization``); the KV cache gets what weights
    leave. ``chunk_tokens`` enables chunked prefill in chunks of that many tokens.
    ``profile`` (opt-in, from ``loadgen plan calibrate``) replaces the two efficiencies by
    its own and adds the tensor-parallel, launch and per-step terms of
    ``analyzers.budget.engine.terms``; without one the plain roofline stays exact.
    """

    hardware: HardwareSpec
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    prefill_efficiency: float = 0.6
    decode_efficiency: float = 0.6
    step_overhead_s: float = 0.0
    memory_fraction: float = 0.9
    chunk_tokens: int | None = None
    profile: StepProfile | None = None

    def __post_init__(self) -> None:
        _positive(
            "deployment",
            tensor_parallel=self.tensor_parallel,
            pipeline_parallel=self.pipeline_parallel,
            chunk_tokens=self.chunk_tokens,
        )
        for name in ("prefill_efficiency", "decode_efficiency", "memory_fraction"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise BudgetError(f"deployment: {name} must be in (0, 1], got {value}")
        if self.step_overhead_s < 0:
            raise BudgetError("deployment: step_overhead_s must not be negative")

    @property
    def gpus(self) -> int:
        """GPUs in the replica."""
        return self.tensor_parallel * self.pipeline_parallel

    def ideal(self) -> Deployment:
        """The same replica at 100% of peak and no overheads: the lower bounds."""
        return Deployment(
            hardware=self.hardware,
            tensor_parallel=self.tensor_parallel,
            pipeline_parallel=self.pipeline_parallel,
            prefill_efficiency=1.0,
            decode_efficiency=1.0,
            step_overhead_s=0.0,
            memory_fraction=self.memory_fraction,
            chunk_tokens=self.chunk_tokens,
        )

    @property
    def compute_efficiency(self) -> float:
        """Fraction of peak FLOP/s: the profile's prefill one when there is a profile."""
        return self.profile.prefill.compute_efficiency if self.profile else self.prefill_efficiency

    @property
    def memory_efficiency(self) -> float:
        """Fraction of HBM bandwidth: the profile's decode one when there is a profile."""
        return self.profile.decode.memory_efficiency if self.profile else self.decode_efficiency

    def compute_flops(self, dtype: str) -> float:
        """Achieved FLOP/s of the tensor-parallel group: tp x peak(dtype) x efficiency."""
        return self.tensor_parallel * self.hardware.peak_flops(dtype) * self.compute_efficiency

    def bandwidth_bytes_per_s(self) -> float:
        """Achieved HBM bytes/s of the tensor-parallel group: tp x bandwidth x efficiency."""
        return (
            self.tensor_parallel * self.hardware.hbm_bandwidth_bytes_per_s * self.memory_efficiency
        )
