"""``--ray ADDRESS`` on a Ray cluster of two nodes on this machine: a head and a worker
node that joins it, both real ``ray start`` processes (``tests/support/raycluster.py``),
one CPU each, so the run's two shards are placed one on each node. The run is one merged
run: every row, both shards, and ``run.json`` names the node of each shard.

Opt-in, like the vLLM tests: starting and stopping two Ray nodes takes 1-2 minutes on a
2-core machine, which the suite's 10-minute budget cannot hold.
``LOADGEN_RAY_MULTINODE=1`` runs it (``make test-ray-multinode``); without it it is skipped
with that reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from raycluster import local_ray_cluster

from loadgen.sim.launch import SimProcess
from traces import schema as s
from traces.io import read_run_info, read_run_table, write_trace

pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'llm-loadgen[ray]'")
pytestmark = [
    pytest.mark.serial,
    pytest.mark.skipif(
        os.environ.get("LOADGEN_RAY_MULTINODE") != "1",
        reason="the two-node Ray cluster test is off: `make test-ray-multinode` (or "
        "LOADGEN_RAY_MULTINODE=1) runs it (1-2 minutes: two Ray nodes start and stop)",
    ),
]

_REQUESTS = 40


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_node_cluster_gives_one_merged_run(
    tmp_path: Path, sim: Callable[..., SimProcess]
) -> None:
    server = sim("--ttft-ms", "2", "--itl-ms", "1")
    trace = tmp_path / "t.parquet"
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(_REQUESTS)],
                "arrival_s": [i * 0.025 for i in range(_REQUESTS)],
                "input_tokens": [16] * _REQUESTS,
                "output_tokens": [3] * _REQUESTS,
            }
        ),
        trace,
    )
    run_dir = tmp_path / "run"
    with local_ray_cluster(nodes=2, cpus_per_node=1) as cluster:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "from loadgen.cli.root import main; main()",
                "replay",
                str(trace),
                "--base-url",
                server.base_url,
                "-o",
                str(run_dir),
                "--workers",
                "2",
                "--ray",
                cluster.address,
            ],
            env=cluster.driver_env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        nodes = cluster.node_ids()
    assert done.returncode == 0, done.stdout + done.stderr
    table = read_run_table(run_dir)
    assert table.num_rows == _REQUESTS
    assert sorted(table.column(s.REQUEST_ID).to_pylist()) == sorted(
        f"q{i}" for i in range(_REQUESTS)
    )
    assert set(table.column(s.OUTCOME).to_pylist()) == {s.OUTCOME_OK}
    assert set(table.column(s.WORKER).to_pylist()) == {0, 1}
    info = read_run_info(run_dir)
    assert info is not None
    assert info.health is not None
    assert info.result is not None
    assert info.complete, info.status
    assert info.result.rows == _REQUESTS
    workers = sorted(info.health.workers, key=lambda w: w.shard)
    assert [(w.shard, w.rows) for w in workers] == [(0, _REQUESTS // 2), (1, _REQUESTS // 2)]
    # One shard on each node: the head's and the worker node's.
    assert sorted(w.node or "" for w in workers) == sorted(nodes)
    assert all(w.host for w in workers)
    # The run's verdict merges both shards' health: its lag is the worse of the two.
    assert info.health.schedule_lag_ms.p99_ms == max(w.schedule_lag_ms.p99_ms for w in workers)
