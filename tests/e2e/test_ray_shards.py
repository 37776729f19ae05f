"""The shard function as Ray tasks on a local Ray instance, against the simulator."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from loadgen.run.session import SessionOptions, run_session
from loadgen.sim.launch import SimProcess
from traces import schema as s
from traces.io import read_run_info, read_run_table, write_trace

pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'llm-loadgen[ray]'")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_ray_shards_match_local_shards(tmp_path: Path, sim: Callable[..., SimProcess]) -> None:
    server = sim("--ttft-ms", "2", "--itl-ms", "1")
    n = 30
    trace = tmp_path / "t.parquet"
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [i * 0.02 for i in range(n)],
                "input_tokens": [16] * n,
                "output_tokens": [3] * n,
            }
        ),
        trace,
    )
    local = asyncio.run(
        run_session(
            SessionOptions(
                trace_path=trace, run_dir=tmp_path / "local", base_url=server.base_url, workers=2
            ),
            install_signal_handlers=False,
        )
    )
    remote = asyncio.run(
        run_session(
            SessionOptions(
                trace_path=trace,
                run_dir=tmp_path / "ray",
                base_url=server.base_url,
                workers=2,
                ray="local",
            ),
            install_signal_handlers=False,
        )
    )
    a, b = read_run_table(local.run_dir), read_run_table(remote.run_dir)
    assert a.num_rows == b.num_rows == n
    assert sorted(a.column(s.REQUEST_ID).to_pylist()) == sorted(b.column(s.REQUEST_ID).to_pylist())
    assert set(b.column(s.WORKER).to_pylist()) == {0, 1}
    assert set(b.column(s.OUTCOME).to_pylist()) == {s.OUTCOME_OK}
    infos = [read_run_info(run.run_dir) for run in (local, remote)]
    for info in infos:
        assert info is not None
        assert info.health is not None
        assert sorted((w.shard, w.rows) for w in info.health.workers) == [(0, 15), (1, 15)]
    assert infos[1] is not None
    assert "Ray" in infos[1].clock.assumption
    # Each Ray shard names its node (one node here); a local worker names none.
    assert infos[0] is not None
    assert infos[0].health is not None
    assert infos[1].health is not None
    assert {(w.node, w.host) for w in infos[0].health.workers} == {(None, None)}
    assert len({w.node for w in infos[1].health.workers}) == 1
    assert all(w.node and w.host for w in infos[1].health.workers)
