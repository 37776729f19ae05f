"""A child process that ends with its parent: the ``--workers`` shards and the body
preparer (``loadgen.prepare.ahead``) ask the kernel for a signal when the parent dies."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, sig: signal.Signals = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux
    ``PR_SET_PDEATHSIG``); if the parent ``parent_pid`` is already gone, send it now.
    False where the platform has no such call."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent_pid:  # died before the call: no signal would come
        os.kill(os.getpid(), sig)
    return True
