"""What ``run.json`` records about the generator itself: the versions that shape a
measurement.

The value and its file are ``traces.runinfo.RunInfo`` and ``traces.io.write_run_info``;
``loadgen.run.session`` builds it. Holds no secrets: URLs and header values go through
``loadgen.redact`` before they are recorded, and the API key is never passed here at all.
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata


def os_name() -> str:
    """The system, its release and the machine, and the C library on glibc:
    ``Linux-6.1.0-x86_64-with-glibc2.36``, as ``platform.platform()`` gives it on Linux.
    From ``os.uname`` and ``os.confstr``: ``platform.platform()`` runs ``uname -p`` in a
    subprocess and scans the Python binary for its libc, just before the run starts."""
    u = os.uname()
    name = f"{u.sysname}-{u.release}-{u.machine}"
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"
    except (ValueError, OSError):  # not glibc, or no such name here
        libc = None
    return f"{name}-with-{libc.replace(' ', '')}" if libc else name


def versions() -> dict[str, str]:
    """Versions of Python and of the packages that shape the measurement."""
    out = {"python": platform.python_version(), "platform": os_name()}
    for dist in ("llm-loadgen", "httpx", "httpcore", "pyarrow", "uvloop", "httptools"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    out["argv"] = " ".join(sys.argv[:1])
    return out
