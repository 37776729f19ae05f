"""The catalog of models, GPUs and links: TOML data files turned into spec dataclasses.

The shipped files live in ``analyzers/budget/data/`` (package data, one ``source`` per
entry and a comment per number); a user TOML file with the same layout (``[models.NAME]``,
``[gpus.NAME]``, ``[links.NAME]``) adds entries or replaces shipped ones by name. Names are
case-insensitive and ``_``/space are read as ``-``; ``aliases`` add further names. Unknown
keys, missing keys and unknown names raise ``BudgetError`` listing what is known.

This is the budget's only module that reads files; it must not import ``loadgen``, httpx
or polars.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from analyzers.budget.specs import HardwareSpec, LinkSpec, ModelSpec, VisionSpec
from analyzers.errors import BudgetError

_DATA_FILES = ("models.toml", "gpus.toml", "links.toml")
_SECTIONS = ("models", "gpus", "links")

T = TypeVar("T")


def normalize_name(name: str) -> str:
    """The lookup key of a name: lower case, ``_`` and spaces as ``-``."""
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def spec_from_mapping(cls: type[T], data: Mapping[str, Any], where: str) -> T:
    """Build the dataclass ``cls`` from a mapping, rejecting unknown and missing keys.

    Nested ``vision`` tables become ``VisionSpec``; ``ModelSpec``/``HardwareSpec`` are
    rebuilt from nested tables of the same names (as written by ``budgetfile``).
    """
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise BudgetError(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(names))}"
        )
    values = dict(data)
    if "vision" in values and isinstance(values["vision"], Mapping):
        values["vision"] = spec_from_mapping(VisionSpec, values["vision"], f"{where}.vision")
    if "hardware" in values and isinstance(values["hardware"], Mapping):
        values["hardware"] = spec_from_mapping(
            HardwareSpec, values["hardware"], f"{where}.hardware"
        )
    try:
        return cls(**values)
    except TypeError as exc:
        raise BudgetError(f"{where}: {exc}") from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Catalog:
    """Models, GPUs and links by normalised name (aliases included)."""

    models: Mapping[str, ModelSpec] = field(default_factory=dict)
    gpus: Mapping[str, HardwareSpec] = field(default_factory=dict)
    links: Mapping[str, LinkSpec] = field(default_factory=dict)

    def model(self, name: str) -> ModelSpec:
        """The model called ``name`` (case-insensitive), or ``BudgetError`` listing them."""
        return _lookup(self.models, name, "model")

    def gpu(self, name: str) -> HardwareSpec:
        """The GPU called ``name`` (case-insensitive), or ``BudgetError`` listing them."""
        return _lookup(self.gpus, name, "gpu")

    def link(self, name: str) -> LinkSpec:
        """The link called ``name`` (case-insensitive), or ``BudgetError`` listing them."""
        return _lookup(self.links, name, "link")

    def model_names(self) -> list[str]:
        """Canonical model names (no aliases), sorted."""
        return sorted({m.name for m in self.models.values()})

    def gpu_names(self) -> list[str]:
        """Canonical GPU names, sorted."""
        return sorted({g.name for g in self.gpus.values()})

    def link_names(self) -> list[str]:
        """Canonical link names, sorted."""
        return sorted({link.name for link in self.links.values()})

    def merged(self, other: Catalog) -> Catalog:
        """This catalog with ``other``'s entries added, replacing same-named ones."""
        return Catalog(
            models={**self.models, **other.models},
            gpus={**self.gpus, **other.gpus},
            links={**self.links, **other.links},
        )


def _lookup(table: Mapping[str, T], name: str, kind: str) -> T:
    try:
        return table[normalize_name(name)]
    except KeyError:
        known = sorted({getattr(v, "name", "") for v in table.values()})
        raise BudgetError(f"unknown {kind} {name!r}; known: {', '.join(known)}") from None


def _entries(cls: type[T], section: Mapping[str, Any], where: str, kind: str) -> dict[str, T]:
    out: dict[str, T] = {}
    for raw_name, raw in section.items():
        entry_where = f"{where}: {kind} {raw_name!r}"
        if not isinstance(raw, Mapping):
            raise BudgetError(f"{entry_where}: expected a table")
        body = dict(raw)
        aliases = body.pop("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise BudgetError(f"{entry_where}: aliases must be a list of strings")
        if not str(body.get("source", "")).strip():
            raise BudgetError(f"{entry_where}: every entry needs a non-empty source")
        name = normalize_name(raw_name)
        spec = spec_from_mapping(cls, {"name": name, **body}, entry_where)
        for key in (name, *map(normalize_name, aliases)):
            out[key] = spec
    return out


def catalog_from_toml(text: str, where: str) -> Catalog:
    """Parse one catalog TOML document (``where`` names it in error messages)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BudgetError(f"{where}: not valid TOML: {exc}") from exc
    unknown = sorted(set(doc) - set(_SECTIONS))
    if unknown:
        raise BudgetError(
            f"{where}: unknown section(s) {', '.join(unknown)}; allowed: {', '.join(_SECTIONS)}"
        )
    return Catalog(
        models=_entries(ModelSpec, doc.get("models", {}), where, "model"),
        gpus=_entries(HardwareSpec, doc.get("gpus", {}), where, "gpu"),
        links=_entries(LinkSpec, doc.get("links", {}), where, "link"),
    )


def default_catalog() -> Catalog:
    """The shipped catalog (package data, parsed once per process: a sweep of the offline
    engine builds the physics for every load, and parsing the TOML each time cost more
    than a small simulation)."""
    return _shipped()


@functools.cache
def _shipped() -> Catalog:
    cat = Catalog()
    data = resources.files("analyzers.budget").joinpath("data")
    for name in _DATA_FILES:
        text = data.joinpath(name).read_text(encoding="utf-8")
        cat = cat.merged(catalog_from_toml(text, f"catalog {name}"))
    return cat


def load_catalog(user_file: Path | None = None) -> Catalog:
    """The shipped catalog, extended (and overridden by name) by ``user_file``."""
    cat = default_catalog()
    if user_file is None:
        return cat
    try:
        text = Path(user_file).read_text(encoding="utf-8")
    except OSError as exc:
        raise BudgetError(f"{user_file}: cannot read catalog file: {exc}") from exc
    return cat.merged(catalog_from_toml(text, str(user_file)))


def model(name: str) -> ModelSpec:
    """Shipped-catalog model lookup, e.g. ``model("llama-3.3-70b")``."""
    return default_catalog().model(name)


def gpu(name: str) -> HardwareSpec:
    """Shipped-catalog GPU lookup, e.g. ``gpu("h100")``."""
    return default_catalog().gpu(name)


def link(name: str) -> LinkSpec:
    """Shipped-catalog link lookup, e.g. ``link("400g")``."""
    return default_catalog().link(name)
