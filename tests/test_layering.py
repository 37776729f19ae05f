"""The import arrows of ARCHITECTURE.md, enforced by walking every module's imports.

traces imports nothing of ours; loadgen (replay path) imports traces only; loadgen.sim may
also use analyzers.budget; analyzers import traces only and never httpx; reports import
analyzers and traces; only the CLI composition root (loadgen/cli/root*.py) touches everything,
and the analyzers' own command modules (loadgen/cli/analyze*.py) may render through reports.
Also checks that the four import packages resolve to this repository, not to the unrelated
PyPI projects named ``traces`` and ``analyzers``.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("loadgen", "traces", "analyzers", "reports")


def imports_of(path: Path) -> set[str]:
    """Top-level and dotted names a module imports (absolute imports only)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


_SIM_MUST_NOT_USE = frozenset(
    {"client", "replay", "transport", "fasttransport", "http11", "recorder", "session", "workers"}
)
_REPLAY_MUST_NOT_USE = frozenset({"polars", "matplotlib"})


def allowed(module: str, target: str) -> bool:
    """Whether ``module`` may import ``target`` under the project's arrows."""
    top = target.split(".")[0]
    pkg = module.split(".")[0]
    in_sim = module.startswith("loadgen.sim")
    if module == "loadgen.cli" or module.startswith("loadgen.cli."):
        return True
    if top not in PACKAGES:
        if pkg == "analyzers" and top == "httpx":
            return False
        return not (pkg == "loadgen" and not in_sim and top in _REPLAY_MUST_NOT_USE)
    if top == pkg:
        if target == "loadgen.cli" or target.startswith("loadgen.cli."):
            return False
        if pkg == "loadgen" and not in_sim and target.startswith("loadgen.sim"):
            return False
        return not (in_sim and target.split(".")[1:2] and target.split(".")[1] in _SIM_MUST_NOT_USE)
    if pkg == "loadgen":
        if in_sim:
            return top == "traces" or target.startswith(("analyzers.budget", "analyzers.errors"))
        return top == "traces"
    if pkg == "analyzers":
        return top == "traces"
    if pkg == "reports":
        return top in {"analyzers", "traces"}
    return False


def modules() -> list[tuple[str, Path]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            name = ".".join(rel.parts)
            out.append((name.removesuffix(".__init__"), path))
    return out


@pytest.mark.parametrize(("module", "path"), modules(), ids=[m for m, _ in modules()])
def test_import_arrows(module: str, path: Path) -> None:
    bad = sorted(t for t in imports_of(path) if not allowed(module, t))
    assert not bad, f"{module} must not import {', '.join(bad)}"


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_resolve_to_this_repository(package: str) -> None:
    mod = importlib.import_module(package)
    assert mod.__file__ is not None
    assert Path(mod.__file__).resolve().parent == ROOT / package
