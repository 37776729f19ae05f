"""Serve a :class:`~loadgen.sim.app.SimApp` with uvicorn on a socket we bind ourselves.

Binding first lets ``--port 0`` work and lets the process announce the real address: once
uvicorn is serving, exactly one line ``READY http://HOST:PORT`` is printed to stdout and
flushed, the readiness handshake :mod:`loadgen.sim.launch` waits for. SIGTERM and SIGINT shut
the server down gracefully and the process exits 0.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import importlib.util
import logging
import signal
import socket
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

from loadgen.errors import DroppedConnection
from loadgen.sim.app import SimApp
from loadgen.sim.config import SimConfig

_BACKLOG = 4096
_GRACEFUL_SHUTDOWN_S = 1.0


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0 picks a free one)."""
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(_BACKLOG)
        sock.set_inheritable(False)
    except OSError:
        sock.close()
        raise
    return sock


def ready_line(sock: socket.socket) -> str:
    """The readiness line for a bound socket: ``READY http://HOST:PORT``."""
    host, port = sock.getsockname()[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"READY http://{host}:{port}"


class _DropFilter(logging.Filter):
    """Keep simulated connection drops out of uvicorn's error log: they are intended."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, DroppedConnection)


class _Server(uvicorn.Server):
    """uvicorn's server, calling ``on_ready`` once it listens (a signal, not a poll)."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.should_exit:
            self._on_ready()


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    # Installed before uvicorn's own handlers, which restore it and re-raise the signal
    # after their graceful shutdown: leaving through SystemExit(0) makes that a clean exit.
    raise SystemExit(0)


def serve(config: SimConfig, *, announce: Callable[[str], None] | None = None) -> None:
    """Bind, serve until SIGTERM/SIGINT, then return. Blocks the calling thread."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_cleanly)
    sock = bind_socket(config.host, config.port)
    line = ready_line(sock)

    def on_ready() -> None:
        if announce is not None:
            announce(line)
        else:
            print(line, flush=True)  # noqa: T201 - the readiness handshake

    loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    options: dict[str, Any] = {
        "http": "httptools",
        "loop": loop,
        "lifespan": "on",
        "access_log": False,
        "log_level": "warning",
        "timeout_graceful_shutdown": _GRACEFUL_SHUTDOWN_S,
    }
    uv_config = uvicorn.Config(SimApp(config), **options)
    logging.getLogger("uvicorn.error").addFilter(_DropFilter())
    try:
        _Server(uv_config, on_ready).run(sockets=[sock])
    finally:
        sock.close()
        sys.stdout.flush()
