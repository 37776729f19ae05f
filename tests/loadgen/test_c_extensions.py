"""The optional C modules are built wherever they can be.

setup.py marks both extensions optional, so an install without a compiler still succeeds
and the pure-Python paths take over, slower. That fallback must not also hide a build that
broke where it should work: where the compiler setuptools would call and the Python headers
are present, both modules must import. Their differential tests (``test_chunked.py``,
``test_sse_bulk.py``) skip without them, so this is the one place that notices.
"""

from __future__ import annotations

import importlib
import os
import shlex
import shutil
import sysconfig
from pathlib import Path

import pytest

MODULES = ("loadgen.http._chunked", "loadgen.stream._sse_scan")


def build_blocker() -> str | None:
    """Why setuptools could not build a C extension here, or None when it could."""
    compiler = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    words = shlex.split(compiler)
    if not words or shutil.which(words[0]) is None:
        return f"no C compiler here ({compiler!r}, the one setuptools would call, is not found)"
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not header.is_file():
        return f"no Python headers here ({header} is missing)"
    return None


@pytest.mark.parametrize("name", MODULES)
def test_the_c_module_is_built_where_it_can_be(name: str) -> None:
    blocker = build_blocker()
    if blocker is not None:
        pytest.skip(blocker)
    try:
        importlib.import_module(name)
    except ImportError as exc:
        pytest.fail(
            f"{name} is not built although a compiler and the Python headers are here: "
            f"rerun `pip install -e .` and read the compiler's output ({exc})"
        )
