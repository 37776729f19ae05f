"""The public names of every package: each ``__init__``'s ``__all__``, pinned and resolving.

A package names its public modules (those without a leading underscore) and whatever it
re-exports. Changing either is an API change, so it has to change in
``tests/data/public_api.json`` too, in review.
A package that re-exports lazily (PEP 562 ``__getattr__``) binds every such name under
``TYPE_CHECKING`` as well, so that type checkers see what the runtime hands out.
"""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[1]

# The pinned names, one list per package: a data file, reviewed like code when it changes.
EXPECTED: Final[dict[str, list[str]]] = json.loads(
    (ROOT / "tests" / "data" / "public_api.json").read_text()
)


def _init(package: str) -> Path:
    return ROOT.joinpath(*package.split("."), "__init__.py")


def _public_modules(package: str) -> set[str]:
    """The submodules and subpackages of ``package`` on disk, without a leading underscore."""
    folder = _init(package).parent
    names = {p.stem for p in folder.glob("*.py")} | {
        p.parent.name for p in folder.glob("*/__init__.py")
    }
    return {n for n in names if not n.startswith("_")}


def test_every_package_is_pinned() -> None:
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("loadgen", "traces", "analyzers", "reports")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert sorted(on_disk) == sorted(EXPECTED)


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_all_is_pinned(package: str) -> None:
    assert importlib.import_module(package).__all__ == EXPECTED[package]


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_all_names_every_public_module(package: str) -> None:
    assert _public_modules(package) <= set(EXPECTED[package])


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_public_names_resolve(package: str) -> None:
    """Each name imports as ``from package import name`` would: an attribute (a lazy
    re-export included) or else a submodule."""
    module = importlib.import_module(package)
    missing = []
    for name in EXPECTED[package]:
        try:
            getattr(module, name)
        except AttributeError:
            try:
                importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError:
                missing.append(name)
    assert not missing


def _defines_getattr(package: str) -> bool:
    tree = ast.parse(_init(package).read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)


# The packages that re-export: each resolves its names on first use.
LAZY: Final = ("analyzers.budget", "analyzers.decompose", "traces")


def test_only_the_reexporting_packages_define_getattr() -> None:
    assert [p for p in sorted(EXPECTED) if _defines_getattr(p)] == list(LAZY)


@pytest.mark.parametrize("package", LAZY)
def test_lazy_reexports_are_typed(package: str) -> None:
    """Every name of ``__all__`` is also imported under ``if TYPE_CHECKING:``."""
    tree = ast.parse(_init(package).read_text())
    typed = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for stmt in node.body
        if isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names
    }
    assert set(EXPECTED[package]) <= typed
