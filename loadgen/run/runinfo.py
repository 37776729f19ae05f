"""What ``run.json`` records about the generator itself: the versions that shape a
measurement.

The value and its file are ``traces.runinfo.RunInfo`` and ``traces.io.write_run_info``;
``loadgen.run.session`` builds it. Holds no secrets: URLs and header values go through
``loadgen.redact`` before they are recorded, and the API key is never passed here at all.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata


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
