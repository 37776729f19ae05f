"""Whether a run directory is being written: an ``flock`` on ``run.lock`` in it
(``traces.schema.RUN_LOCK``), held by every process of a replay for the run's lifetime.

The session claims the lock exclusively when it takes the directory (a second replay into
a live directory, even with ``--overwrite``, is refused), writes who holds it (pid, host,
start time) into the file, and turns it into a shared lock, which each local ``--workers``
shard process takes too. ``loadgen recover`` and the analysers' automatic recovery claim it
exclusively without waiting: while any replay process lives, the claim fails and the run
is left alone; once all are gone (a kill -9 included: the kernel drops a dead process's
locks), the claim succeeds. The lock is advisory and local: a run directory on a network
file system shared between hosts (Ray) is not protected by it.

A run that ends (however it ends, short of a kill) deletes the file; so does a recovery.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from pathlib import Path

from loadgen.errors import RunDirError, RunLiveError
from traces import schema as s

__all__ = ["RunLock"]


class RunLock:
    """One open ``run.lock`` and the lock this process holds on it (a resource:
    ``release()`` it)."""

    __slots__ = ("_fd", "path")

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def _open(cls, run_dir: Path) -> RunLock:
        path = Path(run_dir) / s.RUN_LOCK
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise RunDirError(f"{path}: cannot open the run's lock file: {exc.strerror}") from exc
        return cls(path, fd)

    @classmethod
    def claim(cls, run_dir: Path, *, doing: str) -> RunLock:
        """The exclusive lock on ``run_dir``, at once; ``RunLiveError`` (naming who holds
        it) while a replay process holds it. ``doing`` completes the error: what was
        refused."""
        lock = cls._open(run_dir)
        assert lock._fd is not None
        try:
            fcntl.flock(lock._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock.holder()
            lock.release(unlink=False)
            raise RunLiveError(
                f"{run_dir}: a replay is still writing this run ({holder}): {doing}",
                holder=holder,
            ) from None
        return lock

    @classmethod
    def share(cls, run_dir: Path) -> RunLock:
        """A shared lock on ``run_dir``, beside the session's (a ``--workers`` shard)."""
        lock = cls._open(run_dir)
        assert lock._fd is not None
        fcntl.flock(lock._fd, fcntl.LOCK_SH)
        return lock

    def hold_for_run(self) -> None:
        """After ``claim``: record this process as the holder and let the run's other
        processes share the lock."""
        assert self._fd is not None
        owner = f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%H:%M:%S')}"
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, owner.encode(), 0)
        fcntl.flock(self._fd, fcntl.LOCK_SH)

    def holder(self) -> str:
        """Who took the lock, as its file says (or "another process")."""
        try:
            text = self.path.read_text(errors="replace").strip()
        except OSError:
            text = ""
        return text[:200] or "another process"

    def release(self, *, unlink: bool) -> None:
        """Drop the lock (and delete the file first, with ``unlink``, while still holding
        it)."""
        if self._fd is None:
            return
        if unlink:
            with contextlib.suppress(OSError):
                self.path.unlink()
        os.close(self._fd)
        self._fd = None
