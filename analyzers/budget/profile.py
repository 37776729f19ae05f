"""A calibration profile: the step-time model's free parameters for one GPU type.

``loadgen plan calibrate`` fits them to measured prefill and decode times and writes a
TOML file: per profile a ``[profiles.NAME]`` table (``gpu``, optional ``engine`` and
``source``) with ``[profiles.NAME.prefill]`` and ``[profiles.NAME.decode]`` tables of the
``PhaseProfile`` fields. ``loadgen plan/sim/decompose --profile FILE`` (and anything that
builds a ``Deployment``, such as a deployment file naming the profile by path) plugs one
in. A deployment without a profile keeps the seeds' plain roofline (two efficiencies and
an optional step overhead), so the profile is opt-in. Pure standard library: this module
imports only the errors (the engine loads it).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from analyzers.errors import BudgetError

_PHASES = ("prefill", "decode")


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseProfile:
    """Fitted parameters of ``analyzers.budget.engine.terms`` for one kind of step.

    Efficiencies are fractions in (0, 1]: of the dense peak FLOP/s (``compute``), of the
    HBM bandwidth (``memory``: weights and KV read per step) and of the per-direction
    scale-up link bandwidth (``link``: tensor-parallel all-reduce payload). Times are in
    seconds: ``collective_latency_s`` per all-reduce per doubling of the tensor-parallel
    group, ``layer_overhead_s`` the host's launch time per layer (a step is never shorter
    than ``layers x`` this), ``step_overhead_s`` per step (scheduler, sampling set-up),
    ``sequence_overhead_s`` per decoding sequence in the step.
    """

    compute_efficiency: float = 1.0
    memory_efficiency: float = 1.0
    link_efficiency: float = 1.0
    collective_latency_s: float = 0.0
    layer_overhead_s: float = 0.0
    step_overhead_s: float = 0.0
    sequence_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("compute_efficiency", "memory_efficiency", "link_efficiency"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise BudgetError(f"profile: {name} must be in (0, 1], got {value}")
        for name in PHASE_FIELDS[3:]:
            if getattr(self, name) < 0:
                raise BudgetError(f"profile: {name} must not be negative")


PHASE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PhaseProfile))


@dataclass(frozen=True, slots=True, kw_only=True)
class StepProfile:
    """A GPU type's (and engine's) calibration: one ``PhaseProfile`` for steps that carry
    a prefill, one for pure decode steps (engines launch them differently: decode steps
    replay CUDA graphs, prefills do not)."""

    name: str
    gpu: str
    engine: str = ""
    prefill: PhaseProfile = PhaseProfile()
    decode: PhaseProfile = PhaseProfile()
    source: str = ""

    def phase(self, prefill: bool) -> PhaseProfile:
        """The parameters of a step with (``True``) or without a prefill."""
        return self.prefill if prefill else self.decode


def _phase_from_mapping(data: Any, owner: str) -> PhaseProfile:
    if not isinstance(data, dict):
        raise BudgetError(f"{owner} must be a table")
    unknown = sorted(set(data) - set(PHASE_FIELDS))
    if unknown:
        raise BudgetError(f"{owner}: unknown keys {', '.join(unknown)}")
    values: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BudgetError(f"{owner}: {key} must be a number")
        values[key] = float(value)
    try:
        return PhaseProfile(**values)
    except BudgetError as exc:
        raise BudgetError(f"{owner}: {exc}") from None


def profile_from_mapping(name: str, data: Mapping[str, Any], where: str) -> StepProfile:
    """One ``[profiles.NAME]`` table (with ``.prefill`` and ``.decode``) as a ``StepProfile``."""
    owner = f"{where}: profile {name!r}"
    unknown = sorted(set(data) - {"gpu", "engine", "source", *_PHASES})
    if unknown:
        raise BudgetError(f"{owner}: unknown keys {', '.join(unknown)}")
    if not isinstance(data.get("gpu"), str):
        raise BudgetError(f'{owner} needs gpu = "NAME"')
    for key in ("engine", "source"):
        if not isinstance(data.get(key, ""), str):
            raise BudgetError(f"{owner}: {key} must be a string")
    missing = [phase for phase in _PHASES if phase not in data]
    if missing:
        raise BudgetError(f"{owner}: no [{', '.join(missing)}] table")
    return StepProfile(
        name=name,
        gpu=data["gpu"],
        engine=data.get("engine", ""),
        source=data.get("source", ""),
        prefill=_phase_from_mapping(data["prefill"], f"{owner}.prefill"),
        decode=_phase_from_mapping(data["decode"], f"{owner}.decode"),
    )


def profiles_from_toml(text: str, where: str) -> dict[str, StepProfile]:
    """Every profile of a TOML document (``[profiles.NAME]`` tables), by name."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BudgetError(f"{where}: not TOML ({exc})") from None
    section = doc.get("profiles")
    if not isinstance(section, dict) or not section:
        raise BudgetError(f"{where}: no [profiles.NAME] table")
    out: dict[str, StepProfile] = {}
    for name, table in section.items():
        if not isinstance(table, dict):
            raise BudgetError(f"{where}: profiles.{name} must be a table")
        out[name] = profile_from_mapping(name, table, where)
    return out


def load_profiles(path: Path) -> dict[str, StepProfile]:
    """Read a profile file; ``BudgetError`` for a missing or malformed one."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BudgetError(f"{path}: cannot read profile ({exc.strerror})") from None
    return profiles_from_toml(text, str(path))


def select_profile(
    profiles: Mapping[str, StepProfile],
    gpu: str,
    same_gpu: Callable[[str], bool] | None = None,
    where: str = "profile file",
) -> StepProfile:
    """The profile named ``gpu``, else the only one whose ``gpu`` passes ``same_gpu`` (a
    catalog comparison; plain equality without one); ``BudgetError`` otherwise."""
    if gpu in profiles:
        return profiles[gpu]
    matches = [p for p in profiles.values() if (same_gpu or gpu.__eq__)(p.gpu)]
    if len(matches) == 1:
        return matches[0]
    raise BudgetError(
        f"{where}: {'more than one' if matches else 'no'} profile for gpu {gpu!r}; "
        f"it has {', '.join(sorted(profiles))}"
    )


def load_profile_for(
    path: Path, gpu: str, same_gpu: Callable[[str], bool] | None = None
) -> StepProfile:
    """``select_profile`` of the profiles in ``path``."""
    return select_profile(load_profiles(path), gpu, same_gpu, str(path))


def _toml_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def profiles_to_toml(profiles: Mapping[str, StepProfile], header: str = "") -> str:
    """TOML text that ``profiles_from_toml`` reads back to the same profiles."""
    lines = [f"# {line}" for line in header.splitlines()]
    for name, p in profiles.items():
        lines += ["", f"[profiles.{_toml_str(name)}]", f"gpu = {_toml_str(p.gpu)}"]
        if p.engine:
            lines.append(f"engine = {_toml_str(p.engine)}")
        if p.source:
            lines.append(f"source = {_toml_str(p.source)}")
        for phase in _PHASES:
            values = p.phase(phase == "prefill")
            lines += ["", f"[profiles.{_toml_str(name)}.{phase}]"]
            lines += [f"{key} = {float(getattr(values, key))!r}" for key in PHASE_FIELDS]
    return "\n".join(lines).lstrip("\n") + "\n"
