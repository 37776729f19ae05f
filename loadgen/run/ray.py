"""The same shard function beyond one machine: each shard as a Ray task.

``pip install 'llm-loadgen[ray]'``, then ``loadgen replay ... --workers N --ray local|auto|ADDR``:
``local`` starts a Ray instance inside this process (a one-machine test of the path),
``auto`` joins the cluster named by ``RAY_ADDRESS`` (or the local one), anything else is a
cluster address. Each task replays ``index % N == k`` into a directory of its own node, and
returns its rows as Parquet bytes, which the driver writes under ``run_dir/shard-k/``: no
shared filesystem is needed. Tasks are spread over the cluster's nodes (one CPU each), and
each shard's node id and IP address go into ``run.json`` (``health.workers[].node``,
``host``).

Common start: a small actor (``StartGate``) is the meeting point. Each task tells it when it
is ready (pool connected, first requests prepared) and then waits on it; when every task
has, the driver sets one start time a little ahead and every waiting task gets it. A task
not ready within ``READY_TIMEOUT_S`` (not scheduled, stuck on its host) fails the run with
its shard named.

Clock alignment across hosts: each task anchors to its own host's wall clock, so the
common start time and every epoch-ns stamp assume the hosts' clocks agree (NTP or PTP);
``run.json`` records that assumption (``RAY_CLOCK_ASSUMPTION``); it is not measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen.clock import Clock
from loadgen.errors import ConfigError, LoadgenError
from loadgen.run.shard import ShardOutcome, ShardPlan, replay_shard, run_event_loop
from traces import schema as s
from traces.io import run_request_files


@dataclass(frozen=True, slots=True, kw_only=True)
class RayShardResult:
    """What a Ray task sends back: the shard's outcome and its rows as Parquet bytes."""

    outcome: ShardOutcome
    rows_parquet: bytes


READY_TIMEOUT_S = 120.0
"""How long the driver waits for every task to be ready (scheduling, imports, pool,
prompts), and a ready task for the start."""
START_AHEAD_S = 0.25
"""How far ahead of the broadcast the common start is set (an actor call to every task)."""
_POLL_S = 0.1


class StartGate:
    """The meeting point of a run's tasks (a Ray actor: its methods run on one event loop)."""

    def __init__(self) -> None:
        self._ready: set[int] = set()
        self._start: asyncio.Future[int] | None = None

    def _future(self) -> asyncio.Future[int]:
        if self._start is None:
            self._start = asyncio.get_running_loop().create_future()
        return self._start

    async def ready(self, shard: int) -> None:
        """Shard ``shard`` is ready to send."""
        self._ready.add(shard)

    async def ready_shards(self) -> list[int]:
        return sorted(self._ready)

    async def go(self, start_ns: int) -> None:
        """Broadcast the common start (epoch ns)."""
        if not self._future().done():
            self._future().set_result(start_ns)

    async def start(self) -> int:
        """Wait for the common start."""
        return await self._future()


def run_shard_task(plan: ShardPlan, gate: Any = None) -> RayShardResult:
    """The body of one Ray task: replay the shard into a local temporary directory, from
    the common start that ``gate`` (a ``StartGate`` actor) gives once every task is ready."""

    async def wait_for_start() -> int:
        ray = _ray()
        await asyncio.to_thread(ray.get, gate.ready.remote(plan.shard))
        try:
            start: int = await asyncio.to_thread(
                ray.get, gate.start.remote(), timeout=READY_TIMEOUT_S
            )
        except ray.exceptions.GetTimeoutError as exc:
            raise LoadgenError(f"no common start within {READY_TIMEOUT_S:.0f} s") from exc
        return start

    with tempfile.TemporaryDirectory(prefix="loadgen-shard-") as tmp:
        local = replace(plan, out_dir=Path(tmp))
        outcome = run_event_loop(
            replay_shard(
                local,
                install_signal_handlers=False,
                gate=wait_for_start if gate is not None else None,
            )
        )
        files = run_request_files(Path(tmp))
        data = files[0].read_bytes() if files else b""
    node, host = _this_node()
    return RayShardResult(outcome=replace(outcome, node=node, host=host), rows_parquet=data)


def _this_node() -> tuple[str | None, str | None]:
    """The Ray node this task runs on: its node id and IP address (None outside Ray)."""
    ray = _ray()
    if not ray.is_initialized():
        return None, None
    node: str = ray.get_runtime_context().get_node_id()
    host: str = ray.util.get_node_ip_address()
    return node, host


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            "--ray needs Ray: pip install 'llm-loadgen[ray]' (or pip install ray)"
        ) from exc
    return ray


def run_ray_shards(plans: Sequence[ShardPlan], address: str) -> list[ShardOutcome]:
    """Run one Ray task per plan and write each shard's rows under its ``out_dir``."""
    ray = _ray()
    started_here = False
    if not ray.is_initialized():
        if address == "local":
            ray.init(num_cpus=max(2, len(plans)), include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
        started_here = True
    try:
        gate = ray.remote(num_cpus=0)(StartGate).remote()
        # SPREAD: one shard per node while there are nodes to spare, not packed onto the
        # driver's node first (Ray's default): shards exist to add client cores.
        task = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(run_shard_task)
        refs = [task.remote(plan, gate) for plan in plans]
        try:
            _start_together(ray, gate, refs, len(plans))
            results: list[RayShardResult] = ray.get(refs)
        except LoadgenError:
            _cancel(ray, refs)
            raise
        except Exception as exc:  # a task's failure arrives wrapped by Ray
            _cancel(ray, refs)
            raise LoadgenError(f"a Ray shard failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if started_here:
            ray.shutdown()
    outcomes: list[ShardOutcome] = []
    for plan, result in zip(plans, results, strict=True):
        plan.out_dir.mkdir(parents=True, exist_ok=True)
        if result.rows_parquet:
            (plan.out_dir / s.REQUESTS_FILE).write_bytes(result.rows_parquet)
        outcomes.append(result.outcome)
    return outcomes


def _cancel(ray: Any, refs: list[Any]) -> None:
    """Stop every task still running (the others wait for a start that will not come)."""
    for ref in refs:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)


def _start_together(ray: Any, gate: Any, refs: list[Any], shards: int) -> None:
    """Wait until every task is ready, then broadcast one common start. A task that ends
    before (it failed) raises its error here; one not ready in time fails the run."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        ready: list[int] = ray.get(gate.ready_shards.remote())
        if len(ready) == shards:
            break
        done, _ = ray.wait(refs, num_returns=1, timeout=0)
        if done:
            ray.get(done)  # a task ended before the start: its error, wrapped by Ray
            raise LoadgenError("a Ray shard ended before the common start")
        if time.monotonic() > deadline:
            missing = ", ".join(str(k) for k in range(shards) if k not in ready)
            raise LoadgenError(
                f"Ray shard(s) {missing} not ready after {READY_TIMEOUT_S:.0f} s (not "
                "scheduled: too few CPUs in the cluster? or the endpoint unreachable from "
                "its node)"
            )
        time.sleep(_POLL_S)
    ray.get(gate.go.remote(Clock().now_ns() + int(START_AHEAD_S * 1e9)))
