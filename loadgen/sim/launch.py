"""Start the simulator (or any server that prints READY) as a subprocess, wait for its
READY line, stop it afterwards.

Used by ``loadgen demo`` and the test suite::

    with start_sim(["--itl-ms", "5"]) as sim:
        httpx.post(f"{sim.base_url}/completions", json={...})

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import IO

from loadgen.errors import EndpointError

_READY = "READY "
_STOP_TIMEOUT_S = 10.0
_STDERR_TAIL = 4000


@dataclass(frozen=True, slots=True, kw_only=True)
class SimProcess:
    """A running simulator: ``base_url`` ends in ``/v1``; ``root_url`` has /health, /metrics."""

    base_url: str
    root_url: str
    port: int
    pid: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadyProcess:
    """A server process that printed ``READY ROOT_URL``: ``root_url`` has no path."""

    root_url: str
    pid: int


@contextmanager
def start_sim(args: Sequence[str] = (), *, timeout_s: float = 30.0) -> Iterator[SimProcess]:
    """Run ``python -m loadgen.cli.sim --port 0 *args`` until the block exits.

    Raises EndpointError, with the process's stderr, if it does not print its READY line
    within ``timeout_s``. On exit the process gets SIGTERM, then SIGKILL if it lingers.
    """
    command = [sys.executable, "-m", "loadgen.cli.sim", "--port", "0", *args]
    with start_ready(command, what="simulator", timeout_s=timeout_s) as ready:
        root_url = ready.root_url
        port = int(root_url.rsplit(":", 1)[1])
        yield SimProcess(base_url=f"{root_url}/v1", root_url=root_url, port=port, pid=ready.pid)


@contextmanager
def start_ready(
    command: Sequence[str],
    *,
    what: str,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    own_session: bool = False,
    stop_timeout_s: float = _STOP_TIMEOUT_S,
) -> Iterator[ReadyProcess]:
    """Run ``command`` (a server that prints one line ``READY ROOT_URL`` once it serves)
    until the block exits; the protocol of the simulator and of the real engines
    (:mod:`loadgen.engines.launch`).

    Raises EndpointError naming ``what``, with the tail of the process's stderr, if it
    exits or does not print READY within ``timeout_s``. On exit the process gets SIGTERM,
    then SIGKILL after ``stop_timeout_s``; with ``own_session`` it runs in a session of
    its own, and whatever of that process group outlives it is killed too.
    """
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=None if env is None else dict(env),
            start_new_session=own_session,
        )
        try:
            assert proc.stdout is not None
            deadline = time.monotonic() + timeout_s
            root_url = _wait_ready(proc, proc.stdout, stderr, deadline, what)
            yield ReadyProcess(root_url=root_url, pid=proc.pid)
        finally:
            _stop(proc, stop_timeout_s)
            if own_session:
                # Children in the server's own session (an engine core, its workers):
                # none may outlive it.
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)


def _wait_ready(
    proc: subprocess.Popen[bytes],
    stdout: IO[bytes],
    stderr: IO[bytes],
    deadline: float,
    what: str,
) -> str:
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(stdout, selectors.EVENT_READ)
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _not_ready(proc, stderr, what, "did not print READY in time")
            if not selector.select(remaining):
                continue
            data = os.read(stdout.fileno(), 4096)
            if not data:
                proc.wait(timeout=_STOP_TIMEOUT_S)
                raise _not_ready(proc, stderr, what, f"exited with status {proc.returncode}")
            buffer += data
    line = buffer.split(b"\n", 1)[0].decode(errors="replace").strip()
    if not line.startswith(_READY):
        raise _not_ready(proc, stderr, what, f"printed {line!r} instead of READY")
    return line[len(_READY) :]


def _not_ready(
    proc: subprocess.Popen[bytes], stderr: IO[bytes], what: str, why: str
) -> EndpointError:
    _stop(proc, _STOP_TIMEOUT_S)
    stderr.seek(0)
    text = stderr.read().decode(errors="replace")[-_STDERR_TAIL:].strip()
    return EndpointError(f"{what} {why}: {text or '(no stderr)'}")


def _stop(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
