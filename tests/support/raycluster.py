"""A Ray cluster of several nodes on this machine, as real processes: a head and worker
nodes that join it (``ray start --head`` / ``ray start --address``), each in a session of
its own, on loopback, under a temporary directory of its own.

Each node offers ``cpus_per_node`` CPUs and a custom resource ``loadgen_node_<i>`` (1 unit)
so a test can tell the nodes apart, and so can place work on one. Stopping does not use
``ray stop`` (it stops every Ray process of the machine, other users' too): it signals each
``ray start --block`` process's session (SIGTERM, then SIGKILL to whatever is left in it).
Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LocalRayCluster", "RayClusterError", "local_ray_cluster", "ray_env"]

_STARTED = "Ray runtime started"
_ADDRESS = re.compile(r"ray start --address='[^':]+:(\d+)'")
_NODE_FILE = re.compile(r"_port_([0-9a-f]{56})$")
_STOP_GRACE_S = 10.0
_OBJECT_STORE_BYTES = 100 * 1024 * 1024


class RayClusterError(RuntimeError):
    """A node did not start (the message holds the tail of its log)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalRayCluster:
    address: str
    """The head's GCS address on loopback (``127.0.0.1:PORT``), for ``--ray``."""
    nodes: int
    temp_dir: Path
    logs: tuple[Path, ...]
    """Each ``ray start``'s own output, head first."""

    def driver_env(self) -> dict[str, str]:
        """The environment for a process that joins the cluster as a driver."""
        return ray_env(self.temp_dir / "home")

    def node_ids(self) -> tuple[str, ...]:
        """Each node's Ray node id, head first (from the port files the node writes in its
        own session directory, named ``<what>_port_<node id>``)."""
        ids: list[str] = []
        for index in range(self.nodes):
            found = {
                m.group(1)
                for f in (self.temp_dir / f"n{index}").glob("session_*/*_port_*")
                if (m := _NODE_FILE.search(f.name)) is not None
            }
            if len(found) != 1:
                raise RayClusterError(f"node {index}: node ids {sorted(found)} in its port files")
            ids.append(found.pop())
        return tuple(ids)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ray_env(home: Path) -> dict[str, str]:
    """This process's environment for a Ray process of the cluster (a node or a driver):
    no ``RAY_ADDRESS``, no usage reports, and ``home`` as its home directory, so that
    nothing of the user's ``~/.ray`` (an ``auth_token`` that another cluster generated
    there turns a joining node away) reaches it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_AUTH"))}
    env["HOME"] = str(home)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # A loaded machine starts a node's agents slowly; the raylet's default patience for
    # them (its agent registration) is too short there.
    env.setdefault("RAY_agent_register_timeout_ms", "120000")
    return env


def _node_args(index: int, cpus: int, temp_dir: Path) -> list[str]:
    """Per-node options: every port of the node's own chosen here, so that two nodes on
    one machine do not meet on Ray's fixed defaults."""
    return [
        "--node-ip-address=127.0.0.1",
        f"--num-cpus={cpus}",
        "--num-gpus=0",
        f'--resources={{"loadgen_node_{index}": 1}}',
        f"--temp-dir={temp_dir}",
        f"--object-store-memory={_OBJECT_STORE_BYTES}",
        f"--node-manager-port={_free_port()}",
        f"--object-manager-port={_free_port()}",
        f"--dashboard-agent-listen-port={_free_port()}",
        f"--dashboard-agent-grpc-port={_free_port()}",
        f"--metrics-export-port={_free_port()}",
        f"--runtime-env-agent-port={_free_port()}",
        "--disable-usage-stats",
        "--block",
    ]


def _session_members(sid: int) -> list[int]:
    """Every live process whose session id is ``sid``."""
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and fields[0] != "Z" and int(fields[3]) == sid:
            members.append(int(entry.name))
    return members


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop each ``ray start --block`` and everything it started (its session): SIGTERM to
    all, a bounded wait, then SIGKILL to whatever is left."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_S
    while time.monotonic() < deadline and any(_session_members(p.pid) for p in procs):
        time.sleep(0.2)
    for proc in procs:
        for pid in _session_members(proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=_STOP_GRACE_S)


def _wait_started(proc: subprocess.Popen[bytes], log: Path, deadline: float) -> str:
    """The node's log once it says it started; raises when it exits or the time is up."""
    while True:
        text = log.read_text(errors="replace")
        if _STARTED in text:
            return text
        if proc.poll() is not None or time.monotonic() > deadline:
            why = "exited" if proc.returncode is not None else "timed out"
            raise RayClusterError(f"ray start {why}; its log ends:\n{text[-3000:]}")
        time.sleep(0.25)


def _raylet_news(temp_dir: Path) -> str:
    """The raylet's warnings and errors (its log lines marked W, E or C), the last few."""
    lines: list[str] = []
    for log in temp_dir.glob("session_*/logs/raylet.out"):
        text = log.read_text(errors="replace").splitlines()
        lines += [line[:300] for line in text if re.match(r"\[[^\]]* [WEC] ", line)]
    return "\nits raylet said:\n" + "\n".join(lines[-12:]) if lines else ""


@contextlib.contextmanager
def local_ray_cluster(
    *, nodes: int = 2, cpus_per_node: int = 1, attempts: int = 3, start_timeout_s: float = 120.0
) -> Iterator[LocalRayCluster]:
    """A head and ``nodes - 1`` worker nodes on this machine; all stopped on exit.

    ``ray start`` gives a node 30 s to register with the head (a constant of Ray's), which
    a loaded 2-core machine can miss: a cluster that fails to start is stopped and started
    again, ``attempts`` times at most, each within ``start_timeout_s``."""
    failures: list[str] = []
    for _ in range(attempts):
        root = Path(tempfile.mkdtemp(prefix="lgray-", dir="/tmp"))  # short: socket paths
        procs: list[subprocess.Popen[bytes]] = []
        try:
            try:
                address, logs = _start_nodes(procs, root, nodes, cpus_per_node, start_timeout_s)
            except RayClusterError as exc:
                failures.append(str(exc))
                continue
            yield LocalRayCluster(address=address, nodes=nodes, temp_dir=root, logs=logs)
            return
        finally:
            _stop(procs)
            shutil.rmtree(root, ignore_errors=True)
    raise RayClusterError(f"no cluster after {attempts} attempts; the last: {failures[-1]}")


def _start_nodes(
    procs: list[subprocess.Popen[bytes]],
    root: Path,
    nodes: int,
    cpus_per_node: int,
    timeout_s: float,
) -> tuple[str, tuple[Path, ...]]:
    """Start the head, then each worker node once the one before has started; every
    process goes into ``procs`` as it starts. The head's address and the nodes' logs."""
    ray = [sys.executable, "-m", "ray.scripts.scripts", "start"]
    home = root / "home"
    home.mkdir()
    env = ray_env(home)
    deadline = time.monotonic() + timeout_s
    address = ""
    logs: list[Path] = []
    for index in range(nodes):
        log = root / f"node-{index}.log"
        logs.append(log)
        where = (
            [f"--address={address}"]
            if index
            else ["--head", "--port=0", "--include-dashboard=false"]
        )
        with log.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [*ray, *where, *_node_args(index, cpus_per_node, root / f"n{index}")],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                )
            )
        try:
            text = _wait_started(procs[-1], log, deadline)
        except RayClusterError as exc:
            raise RayClusterError(f"node {index}: {exc}{_raylet_news(root / f'n{index}')}") from exc
        if not index:
            found = _ADDRESS.search(text)
            if found is None:
                raise RayClusterError(f"no address in the head's log:\n{text[-3000:]}")
            address = f"127.0.0.1:{found.group(1)}"
    return address, tuple(logs)
