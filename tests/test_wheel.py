"""Installable as users install it: a wheel built from the source tree carries the compiled
modules and the catalog, installs with no compiler and no index, and its ``loadgen`` runs.

The source is copied first (the four packages, ``pyproject.toml``, ``setup.py``, the
README), so that the wheel is built from what a clone holds and the checkout is left as it
was. The build uses this environment's setuptools (``--no-build-isolation``: no download);
the install and the runs get an empty ``PATH``, so nothing in them can reach a compiler.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[1]
PACKAGES: Final = ("loadgen", "traces", "analyzers", "reports")
COMPILED: Final = ("loadgen/stream/_sse_scan", "loadgen/http/_chunked")
CATALOG: Final = ("gpus.toml", "links.toml", "models.toml")


def _copy_source(dest: Path) -> None:
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, dest / package, ignore=skip)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, dest / name)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    _copy_source(source)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "--wheel-dir", str(out), str(source)],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    (built,) = out.glob("llm_loadgen-*.whl")
    return built


def test_the_wheel_carries_the_compiled_modules_and_the_catalog(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for package in PACKAGES:
        assert f"{package}/py.typed" in names
    for data in CATALOG:
        assert f"analyzers/budget/data/{data}" in names
    assert any(n.endswith("entry_points.txt") for n in names)
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the wheel is pure Python (the optional modules)")
    for module in COMPILED:
        assert any(n.startswith(module) and n.endswith(".so") for n in names), module
    assert "-cp3" in wheel.name  # a platform wheel, not py3-none-any


def test_the_installed_wheel_runs_without_a_compiler(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    bare = {"PATH": "", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
         "--target", str(target), str(wheel)],
        check=True, capture_output=True, text=True, timeout=120, env=bare,
    )  # fmt: skip
    # The installed copy, not the checkout's, is imported: its directory comes first.
    env = {**bare, "PYTHONPATH": str(target)}
    probe = (
        "import importlib, loadgen, analyzers.budget.catalog as c;"
        "print(loadgen.__file__);"
        "[print(importlib.import_module(m).__file__) for m in"
        " ('loadgen.stream._sse_scan', 'loadgen.http._chunked')]"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env,
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.split()  # fmt: skip
    assert found[0].startswith(str(target))
    if shutil.which("cc") is not None or shutil.which("gcc") is not None:
        assert all(f.startswith(str(target)) and f.endswith(".so") for f in found[1:]), found
    script = target / "bin" / "loadgen"
    assert os.access(script, os.X_OK)
    helped = subprocess.run(
        [str(script), "--help"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert helped.returncode == 0, helped.stderr
    assert "Usage: loadgen" in helped.stdout
    # The catalog comes from the wheel's package data.
    planned = subprocess.run(
        [str(script), "plan", "--model", "llama-3.1-8b", "--gpu", "h100"], cwd=tmp_path,
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    assert "llama-3.1-8b" in planned.stdout
