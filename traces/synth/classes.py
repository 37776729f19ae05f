"""Synthetic request classes: what each class of request looks like, and the mix of them.

``WorkloadClass`` gives a class's prompt, output and follow-up lengths and its images;
``text_class``, ``long_context_class`` and ``image_class`` are the built-in ones (chat,
32k..1M token documents with short answers, a short question about 1..N images).
``parse_mix`` and ``parse_class_values`` read the command line's ``--mix`` and per-class
SLO values. ``traces.synth.trace`` samples requests from them. Imports ``traces`` modules only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from traces.synth.lengths import LengthDist, LogNormal, LogUniform, UniformInt

CLASS_NAMES: Final = ("text", "long_context", "image")


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """An image size in pixels and its relative frequency."""

    width: int
    height: int
    weight: float = 1.0


COMMON_RESOLUTIONS: Final[tuple[Resolution, ...]] = (
    Resolution(width=512, height=512, weight=0.10),
    Resolution(width=640, height=480, weight=0.10),
    Resolution(width=800, height=600, weight=0.05),
    Resolution(width=1024, height=768, weight=0.15),
    Resolution(width=1024, height=1024, weight=0.10),
    Resolution(width=1280, height=720, weight=0.15),
    Resolution(width=1920, height=1080, weight=0.20),
    Resolution(width=1080, height=1920, weight=0.05),
    Resolution(width=3024, height=4032, weight=0.10),
)
"""Screenshots, web images, HD/FHD frames (both orientations) and 12 MP phone photos."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadClass:
    """One request class: prompt and output lengths, follow-up turns, images.

    ``input`` is the class's own prompt length (a shared prefix is added on top);
    ``followup`` the new user message of a session's later turns (default: ``input``);
    ``images_max`` > 0 attaches 1..``images_max`` images drawn from ``resolutions``.
    """

    name: str
    input: LengthDist
    output: LengthDist
    followup: LengthDist | None = None
    images_max: int = 0
    resolutions: tuple[Resolution, ...] = COMMON_RESOLUTIONS


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassShare:
    """The fraction of requests (or sessions) of one class; weights need not sum to 1."""

    name: str
    weight: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassValue:
    """A per-request value (an SLO) for one class, or for every class when ``workload`` is
    None."""

    workload: str | None
    value: float


def text_class(
    *, input: LengthDist | None = None, output: LengthDist | None = None
) -> WorkloadClass:
    """Chat: prompts lognormal with mean 1000 tokens (sigma 0.8), outputs mean 250 (0.6)."""
    return WorkloadClass(
        name="text",
        input=input or LogNormal(mean=1000, sigma=0.8),
        output=output or LogNormal(mean=250, sigma=0.6),
    )


def long_context_class(
    *, low: int = 32_768, high: int = 1_048_576, output: LengthDist | None = None
) -> WorkloadClass:
    """Long documents: prompts log-uniform in [low, high] tokens, 16..128 output tokens;
    follow-up questions are chat-sized (lognormal mean 200)."""
    return WorkloadClass(
        name="long_context",
        input=LogUniform(low=low, high=high),
        output=output or UniformInt(low=16, high=128),
        followup=LogNormal(mean=200, sigma=0.6),
    )


def image_class(
    *,
    images_max: int = 2,
    resolutions: tuple[Resolution, ...] = COMMON_RESOLUTIONS,
    output: LengthDist | None = None,
) -> WorkloadClass:
    """A short question (lognormal mean 150 tokens) about 1..``images_max`` images."""
    return WorkloadClass(
        name="image",
        input=LogNormal(mean=150, sigma=0.6),
        output=output or LogNormal(mean=250, sigma=0.6),
        images_max=images_max,
        resolutions=resolutions,
    )


def parse_mix(text: str) -> tuple[ClassShare, ...]:
    """``"text=0.7,long_context=0.1,image=0.2"`` -> shares; names must be known classes."""
    shares: list[ClassShare] = []
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in CLASS_NAMES:
            raise ValueError(f"expected class=weight with class in {', '.join(CLASS_NAMES)}")
        try:
            weight = float(value)
        except ValueError as exc:
            raise ValueError(f"weight of {name!r} is not a number: {value!r}") from exc
        if not weight >= 0 or math.isinf(weight):
            raise ValueError(f"weight of {name!r} must be a finite number >= 0")
        shares.append(ClassShare(name=name, weight=weight))
    if len({sh.name for sh in shares}) != len(shares):
        raise ValueError("a class appears twice in the mix")
    if sum(sh.weight for sh in shares) <= 0:
        raise ValueError("the mix weights sum to zero")
    return tuple(shares)


def parse_class_values(text: str) -> tuple[ClassValue, ...]:
    """``"2000"`` (every class) or ``"text=500,long_context=30000"`` -> per-class values."""
    out: list[ClassValue] = []
    for part in text.split(","):
        name, sep, value = part.rpartition("=")
        workload = name.strip() if sep else None
        if workload is not None and workload not in CLASS_NAMES:
            raise ValueError(f"unknown class {workload!r}; expected {', '.join(CLASS_NAMES)}")
        try:
            number = float(value)
        except ValueError as exc:
            raise ValueError(f"not a number: {value!r}") from exc
        if not number > 0 or math.isinf(number):
            raise ValueError(f"values must be finite and positive, got {value!r}")
        out.append(ClassValue(workload=workload, value=number))
    return tuple(out)


def class_value(values: Sequence[ClassValue], workload: str) -> float | None:
    """The value for ``workload``: its own, else the every-class one, else None."""
    found: float | None = None
    for cv in values:
        if cv.workload == workload:
            return cv.value
        if cv.workload is None:
            found = cv.value
    return found
