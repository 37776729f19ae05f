"""The same shard function beyond one machine: each shard as a Ray task.

``pip install 'llm-loadgen[ray]'``, then ``loadgen replay ... --workers N --ray local|auto|ADDR``:
``local`` starts a Ray instance inside this process (a one-machine test of the path),
``auto`` joins the cluster named by ``RAY_ADDRESS`` (or the local one), anything else is a
cluster address. Each task replays ``index % N == k`` from the driver's common start time
into a directory of its own node, and returns its rows as Parquet bytes, which the driver
writes under ``run_dir/shard-k/``: no shared filesystem is needed.

Clock alignment across hosts: each task anchors to its own host's wall clock, so the
common start time and every epoch-ns stamp assume the hosts' clocks agree (NTP or PTP);
``run.json`` records that assumption (``RAY_CLOCK_ASSUMPTION``); it is not measured.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen.errors import ConfigError, LoadgenError
from loadgen.run.shard import ShardOutcome, ShardPlan, replay_shard
from traces import schema as s
from traces.io import run_request_files


@dataclass(frozen=True, slots=True, kw_only=True)
class RayShardResult:
    """What a Ray task sends back: the shard's outcome and its rows as Parquet bytes."""

    outcome: ShardOutcome
    rows_parquet: bytes


def run_shard_task(plan: ShardPlan) -> RayShardResult:
    """The body of one Ray task: replay the shard into a local temporary directory."""
    with tempfile.TemporaryDirectory(prefix="loadgen-shard-") as tmp:
        local = replace(plan, out_dir=Path(tmp))
        outcome = asyncio.run(replay_shard(local, install_signal_handlers=False))
        files = run_request_files(Path(tmp))
        data = files[0].read_bytes() if files else b""
    return RayShardResult(outcome=outcome, rows_parquet=data)


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
        task = ray.remote(num_cpus=1)(run_shard_task)
        refs = [task.remote(plan) for plan in plans]
        try:
            results: list[RayShardResult] = ray.get(refs)
        except Exception as exc:  # a task's failure arrives wrapped by Ray
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
