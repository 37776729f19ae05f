"""What ``run.json`` records about the generator itself: the versions that shape a
measurement, and header values with credentials redacted.

The value and its file are ``traces.runinfo.RunInfo`` and ``traces.io.write_run_info``;
``loadgen.run.session`` builds it. Holds no secrets: header values whose names look like
credentials are redacted, and the API key is never passed here at all.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping
from importlib import metadata

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
