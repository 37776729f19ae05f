"""The simulated hardware: how long a step, an image encode or a KV transfer takes, in model s.

One :class:`Physics` per instance wraps the budget model (:mod:`analyzers.budget`) for a
named model on ``gpus`` GPUs of a named type (tensor parallel over all of them): every
number the engine simulator uses comes from the same functions the planner and the TTFT
decomposition use, so at batch 1 the simulator *is* the budget's prediction. Times here are
model seconds; :mod:`loadgen.sim.instance` maps them to wall time with the time scale.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from analyzers.budget import (
    Deployment,
    LinkSpec,
    ModelSpec,
    SequenceWork,
    image_encoder_time_s,
    image_tokens,
    kv_capacity_tokens,
    kv_transfer_time_s,
)
from analyzers.budget.catalog import load_catalog
from analyzers.budget.engine.step import StepClock
from analyzers.budget.profile import load_profile_for
from analyzers.errors import BudgetError
from loadgen.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class HardwareChoice:
    """A named model on ``gpus`` GPUs of a named type, used at these efficiencies."""

    model: str
    gpu: str
    gpus: int = 1
    prefill_efficiency: float = 0.6
    decode_efficiency: float = 0.6
    step_overhead_s: float = 0.0
    memory_fraction: float = 0.9
    profile: Path | None = None  # calibration profile TOML; its entry for ``gpu`` is used
    catalog: Path | None = None  # a user catalog TOML over the shipped one


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageSize:
    """Pixel size of one image in a prompt."""

    width: int
    height: int


class Physics:
    """Step, encoder and capacity arithmetic of one instance (model seconds, tokens)."""

    def __init__(self, choice: HardwareChoice, *, chunk_tokens: int | None = None) -> None:
        try:
            names = load_catalog(choice.catalog)
            self.model: ModelSpec = names.model(choice.model)
            hardware = names.gpu(choice.gpu)
            profile = None
            if choice.profile is not None:
                profile = load_profile_for(
                    choice.profile, choice.gpu, lambda name: names.gpu(name).name == hardware.name
                )
            self.deploy = Deployment(
                hardware=hardware,
                profile=profile,
                tensor_parallel=choice.gpus,
                prefill_efficiency=choice.prefill_efficiency,
                decode_efficiency=choice.decode_efficiency,
                step_overhead_s=choice.step_overhead_s,
                memory_fraction=choice.memory_fraction,
                chunk_tokens=chunk_tokens,
            )
        except BudgetError as exc:
            raise ConfigError(f"simulator physics: {exc}") from exc
        self.choice = choice
        self.clock = StepClock(self.model, self.deploy)
        """``step_s`` as a scheduler's timer, with its fast path from a step's sums."""

    def step_s(self, work: Sequence[SequenceWork]) -> float:
        """Seconds of one forward step over ``work`` (the budget's ``step_time_s``)."""
        return self.clock(work)

    def kv_capacity_tokens(self) -> int:
        """Tokens of KV cache the instance holds after the weights (budget model)."""
        return kv_capacity_tokens(self.model, self.deploy)

    def image_tokens(self, image: ImageSize, *, fallback: int) -> int:
        """LM tokens of one image: the model's vision rule, or ``fallback`` without one."""
        if self.model.vision is None:
            return fallback
        try:
            return image_tokens(self.model, image.width, image.height)
        except BudgetError:
            return fallback

    def encoder_s(self, images: Sequence[ImageSize]) -> float:
        """Seconds the vision encoder spends on ``images`` (0 for a text-only model)."""
        if self.model.vision is None:
            return 0.0
        total = 0.0
        for image in images:
            try:
                total += image_encoder_time_s(self.model, self.deploy, image.width, image.height)
            except BudgetError:
                continue
        return total


def check_catalog(*, model: str, gpu: str, user_file: Path | None = None) -> None:
    """Raise ConfigError unless the catalog (the shipped one, with ``user_file`` over it)
    knows ``model`` and ``gpu`` (names the known)."""
    try:
        names = load_catalog(user_file)
        names.model(model)
        names.gpu(gpu)
    except BudgetError as exc:
        raise ConfigError(str(exc)) from exc


def link_spec(*, gbps: float, latency_us: float) -> LinkSpec:
    """A KV-transfer link of ``gbps`` gigabits per second and a fixed latency."""
    try:
        return LinkSpec(
            name=f"{gbps:g}gbps", bandwidth_bytes_per_s=gbps * 1e9 / 8, latency_s=latency_us / 1e6
        )
    except BudgetError as exc:
        raise ConfigError(f"simulator link: {exc}") from exc


def transfer_s(physics: Physics, n_tokens: int, link: LinkSpec) -> float:
    """Seconds to ship ``n_tokens`` tokens of KV cache over ``link`` (budget model)."""
    return kv_transfer_time_s(physics.model, n_tokens, link)
