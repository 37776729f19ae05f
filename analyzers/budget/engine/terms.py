"""The terms of a forward step that real engines pay beyond the plain roofline.

Each term is a named function with its unit. With a ``StepProfile`` (fitted by
``loadgen plan calibrate``), a step takes

    max(flops / (tp x peak x e_compute), bytes / (tp x HBM x e_memory))   roofline, s
    + allreduces x (latency x log2 tp + payload / (link x e_link))       tensor parallel, s
    + (pp - 1) x activations / link                                      pipeline hand-off, s
    (the GPU's time; the step takes the larger of it and layers x layer_overhead, the
    host's launch time, since launches overlap the GPU's work)
    + step_overhead + decoding seqs x sequence_overhead                  scheduler, sampling, s

with the parameters of the profile's ``prefill`` phase for a step that carries a prefill,
of its ``decode`` phase otherwise.

``StepTerms`` holds every quantity at efficiency 1 and zero overhead, so the calibration
fits the profile's parameters as coefficients of these same terms. See docs/arithmetic.md
for the formulas and the measurements that support them. Pure arithmetic: the engine's
leaf (no ``loadgen``, no third-party module, no I/O).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzers.budget.profile import PhaseProfile, StepProfile
from analyzers.budget.specs import HardwareSpec, ModelSpec
from analyzers.errors import BudgetError

ACTIVATION_BYTES = 2.0  # bytes per activation element: engines reduce in BF16/FP16


def link_bandwidth_bytes_per_s(hardware: HardwareSpec) -> float:
    """Per-direction bytes/s one GPU can send to its tensor-parallel peers.

    NVLink figures are quoted as the bidirectional total (A100 600 GB/s, H100 900 GB/s),
    so half of ``scale_up_bandwidth_bytes_per_s``; without NVLink, the PCIe link
    (``pcie_bandwidth_bytes_per_s``, per direction).
    """
    if hardware.scale_up_bandwidth_bytes_per_s > 0:
        return hardware.scale_up_bandwidth_bytes_per_s / 2
    if hardware.pcie_bandwidth_bytes_per_s > 0:
        return hardware.pcie_bandwidth_bytes_per_s
    raise BudgetError(f"gpu {hardware.name!r} has no scale-up or PCIe bandwidth in the catalog")


def allreduces_per_step(model: ModelSpec, tensor_parallel: int) -> int:
    """All-reduces per forward step: two per layer (after attention, after the MLP)."""
    return 2 * model.layers if tensor_parallel > 1 else 0


def allreduce_payload_bytes(model: ModelSpec, tensor_parallel: int, tokens: int) -> float:
    """Bytes one GPU sends in one ring all-reduce of the step's activations.

    ``2 (tp - 1) / tp x tokens x hidden x 2 bytes`` (reduce-scatter plus all-gather).
    """
    if tensor_parallel <= 1:
        return 0.0
    share = 2 * (tensor_parallel - 1) / tensor_parallel
    return share * tokens * model.hidden * ACTIVATION_BYTES


def collective_hops(tensor_parallel: int) -> float:
    """``log2(tp)``: latency steps of one all-reduce (tree/NVSwitch); 0 without TP."""
    return math.log2(tensor_parallel) if tensor_parallel > 1 else 0.0


def pipeline_handoff_bytes(model: ModelSpec, pipeline_parallel: int, tokens: int) -> float:
    """Activation bytes handed between pipeline stages in a step: ``(pp - 1) T hidden 2``."""
    return max(0, pipeline_parallel - 1) * tokens * model.hidden * ACTIVATION_BYTES


def pipeline_bubble_fraction(pipeline_parallel: int, microbatches: int) -> float:
    """Idle share of a pipeline filled with ``microbatches``: ``(pp - 1) / (m + pp - 1)``."""
    if pipeline_parallel < 1 or microbatches < 1:
        raise BudgetError("pipeline_parallel and microbatches must be at least 1")
    return (pipeline_parallel - 1) / (microbatches + pipeline_parallel - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTerms:
    """One step's quantities at efficiency 1: the features a profile multiplies.

    ``compute_s``/``memory_s``: the roofline sides at 100% of peak FLOP/s and HBM bytes/s
    of the tensor-parallel group; ``payload_s``: all-reduce bytes at the full link rate,
    summed over the step's all-reduces; ``hops``: all-reduces x log2(tp); ``handoff_s``:
    pipeline hand-offs at the full link rate; ``layers``; ``prefills`` (0 or 1: a step
    that carries a prefill); ``decode_sequences``.
    """

    compute_s: float
    memory_s: float
    payload_s: float
    hops: float
    handoff_s: float
    layers: int
    prefills: int
    decode_sequences: int

    def phase(self, profile: StepProfile) -> PhaseProfile:
        """The profile's parameters for this step: prefill's if it carries a prefill."""
        return profile.phase(self.prefills > 0)

    def roofline_s(self, p: PhaseProfile) -> float:
        """``max(compute / e_compute, memory / e_memory)`` in seconds."""
        return max(self.compute_s / p.compute_efficiency, self.memory_s / p.memory_efficiency)

    def collective_s(self, p: PhaseProfile) -> float:
        """Tensor-parallel all-reduces plus pipeline hand-offs, in seconds."""
        return (
            self.hops * p.collective_latency_s + self.payload_s / p.link_efficiency + self.handoff_s
        )

    def launch_s(self, p: PhaseProfile) -> float:
        """``layers x layer_overhead``: the host's time to launch the step's kernels, s."""
        return self.layers * p.layer_overhead_s

    def gpu_s(self, p: PhaseProfile) -> float:
        """The GPU's busy time: roofline plus collectives, in seconds."""
        return self.roofline_s(p) + self.collective_s(p)

    def overhead_s(self, p: PhaseProfile) -> float:
        """Scheduler and per-sequence costs (serial with the GPU), in seconds."""
        return p.step_overhead_s + self.decode_sequences * p.sequence_overhead_s

    def time_s(self, profile: StepProfile) -> float:
        """The step's predicted seconds: ``max(launch, gpu) + overhead``.

        Launches are asynchronous: the GPU runs kernels while the host queues the next,
        so a small step waits for the host (launch-bound) and a large one for the GPU.
        """
        p = self.phase(profile)
        return max(self.launch_s(p), self.gpu_s(p)) + self.overhead_s(p)


def step_terms(
    model: ModelSpec,
    hardware: HardwareSpec,
    *,
    tensor_parallel: int,
    pipeline_parallel: int = 1,
    flops: float,
    bytes_read: float,
    tokens: int,
    prefills: int,
    decode_sequences: int,
) -> StepTerms:
    """The ``StepTerms`` of a step of ``flops`` FLOPs reading ``bytes_read`` HBM bytes."""
    tp = tensor_parallel
    has_link = tp > 1 or pipeline_parallel > 1
    link = link_bandwidth_bytes_per_s(hardware) if has_link else 1.0
    return StepTerms(
        compute_s=flops / (tp * hardware.peak_flops(model.weight_dtype)),
        memory_s=bytes_read / (tp * hardware.hbm_bandwidth_bytes_per_s),
        payload_s=allreduces_per_step(model, tp)
        * allreduce_payload_bytes(model, tp, tokens)
        / link,
        hops=allreduces_per_step(model, tp) * collective_hops(tp),
        handoff_s=pipeline_handoff_bytes(model, pipeline_parallel, tokens) / link,
        layers=model.layers,
        prefills=prefills,
        decode_sequences=decode_sequences,
    )
