"""``run.json``: what was run, against what, with which versions, and how it went.

Holds no secrets: header values whose names look like credentials are redacted, and the
API key is never passed here at all.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from traces.schema import RUN_JSON, SCHEMA_VERSION

_SECRET_WORDS = ("authorization", "key", "token", "secret", "cookie", "password")


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Header names with their values, credentials replaced by ``<redacted>``."""
    return {
        name: ("<redacted>" if any(w in name.lower() for w in _SECRET_WORDS) else value)
        for name, value in headers.items()
    }


def versions() -> dict[str, str]:
    """Versions of Python and of the packages that shape the measurement."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in ("llm-loadgen", "httpx", "httpcore", "pyarrow", "uvloop", "httptools"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    out["argv"] = " ".join(sys.argv[:1])
    return out


def write_run_json(run_dir: Path, info: Mapping[str, Any]) -> Path:
    """Write ``run.json`` atomically (it is rewritten at the end of the run)."""
    path = Path(run_dir) / RUN_JSON
    doc = {"schema_version": SCHEMA_VERSION, **info}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)
    return path
