"""The budget file: a ``BudgetReport`` as TOML or JSON for the analyzers, and back.

Layout (both formats)::

    [model]        ModelSpec fields ([model.vision] when present)
    [hardware]     HardwareSpec fields
    [deployment]   Deployment fields other than hardware
    [inputs]       PlanInputs fields
    [[prediction]] key, title, value, unit, chain (one table per prediction)

``None`` values are left out; infinities are written as TOML ``inf`` (JSON ``Infinity``).
``load_budget`` rejects unknown keys by name. This module reads and writes only what it is
given; it must not import ``loadgen``, httpx or polars.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from analyzers.budget.catalog import spec_from_mapping
from analyzers.budget.profile import StepProfile, profile_from_mapping
from analyzers.budget.report import BudgetReport, PlanInputs, Prediction
from analyzers.budget.specs import Deployment, HardwareSpec, ModelSpec, VisionSpec
from analyzers.errors import BudgetError

_SECTIONS = ("model", "hardware", "deployment", "inputs", "profile", "refusal", "prediction")


def _plain(obj: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """A dataclass's fields as a dict (nested ``VisionSpec`` as a dict), ``None`` dropped."""
    out: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.name in skip or value is None:
            continue
        out[f.name] = _plain(value) if isinstance(value, VisionSpec) else value
    return out


def _profile_dict(profile: StepProfile) -> dict[str, Any]:
    out = _plain(profile, skip=("prefill", "decode"))
    return {**out, "prefill": _plain(profile.prefill), "decode": _plain(profile.decode)}


def report_to_dict(report: BudgetReport) -> dict[str, Any]:
    """The report as nested plain values (the common shape of the TOML and JSON files).

    ``profile`` (the deployment's calibration profile) and ``refusal`` appear only when set.
    """
    out: dict[str, Any] = {
        "model": _plain(report.model),
        "hardware": _plain(report.deployment.hardware),
        "deployment": _plain(report.deployment, skip=("hardware", "profile")),
        "inputs": _plain(report.inputs),
    }
    if report.deployment.profile is not None:
        out["profile"] = _profile_dict(report.deployment.profile)
    if report.refusal:
        out["refusal"] = {"reason": report.refusal}
    out["prediction"] = [_plain(p) for p in report.predictions]
    return out


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    raise BudgetError(f"cannot write {type(value).__name__} to TOML")


def _toml_table(name: str, table: Mapping[str, Any], lines: list[str]) -> None:
    lines.append(f"[{name}]")
    nested = []
    for key, value in table.items():
        if isinstance(value, Mapping):
            nested.append((key, value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    lines.append("")
    for key, value in nested:
        _toml_table(f"{name}.{key}", value, lines)


def report_to_toml(report: BudgetReport) -> str:
    """The report as a TOML document."""
    data = report_to_dict(report)
    lines = ["# llm-loadgen budget (loadgen plan); read back with analyzers.budget.load_budget", ""]
    for section in ("model", "hardware", "deployment", "inputs", "profile", "refusal"):
        if section in data:
            _toml_table(section, data[section], lines)
    for pred in data["prediction"]:
        lines.append("[[prediction]]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in pred.items())
        lines.append("")
    return "\n".join(lines)


def report_to_json(report: BudgetReport) -> str:
    """The report as a JSON document (infinities as ``Infinity``)."""
    return json.dumps(report_to_dict(report), indent=2)


def report_from_dict(data: Mapping[str, Any], where: str) -> BudgetReport:
    """Rebuild a report from ``report_to_dict``'s shape; ``BudgetError`` on any mismatch."""
    unknown = sorted(set(data) - set(_SECTIONS))
    missing = sorted(set(_SECTIONS) - set(data) - {"prediction", "profile", "refusal"})
    if unknown or missing:
        raise BudgetError(
            f"{where}: not a budget file (unknown {unknown or 'none'}, missing {missing or 'none'})"
        )
    try:
        model = spec_from_mapping(ModelSpec, data["model"], f"{where} [model]")
        hardware = spec_from_mapping(HardwareSpec, data["hardware"], f"{where} [hardware]")
        profile = None
        if "profile" in data:
            table = dict(data["profile"])
            profile = profile_from_mapping(str(table.pop("name", "")), table, f"{where} [profile]")
        deploy = spec_from_mapping(
            Deployment,
            {**data["deployment"], "hardware": hardware, "profile": profile},
            f"{where} [deployment]",
        )
        inputs = spec_from_mapping(PlanInputs, data["inputs"], f"{where} [inputs]")
        preds = tuple(
            spec_from_mapping(Prediction, p, f"{where} [[prediction]]")
            for p in data.get("prediction", [])
        )
    except (TypeError, AttributeError) as exc:
        raise BudgetError(f"{where}: malformed budget file: {exc}") from exc
    refusal = str(data.get("refusal", {}).get("reason", ""))
    return BudgetReport(
        model=model, deployment=deploy, inputs=inputs, predictions=preds, refusal=refusal
    )


def load_budget(path: Path | str) -> BudgetReport:
    """Read a budget file written by ``loadgen plan --out`` (``.json`` or TOML)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BudgetError(f"{path}: cannot read budget file: {exc}") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BudgetError(f"{path}: not a valid budget file: {exc}") from exc
    if not isinstance(data, dict):
        raise BudgetError(f"{path}: not a budget file")
    return report_from_dict(data, str(path))


def write_budget(report: BudgetReport, path: Path | str) -> None:
    """Write the report to ``path``: JSON when it ends in ``.json``, else TOML."""
    path = Path(path)
    text = report_to_json(report) if path.suffix == ".json" else report_to_toml(report)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BudgetError(f"{path}: cannot write budget file: {exc}") from exc
