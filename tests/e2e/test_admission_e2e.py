"""Admission control (issue 22, item 2), end to end and offline.

Offline (``plan admission``, ``loadgen simulate``): at 1.5x the capacity the engine refuses
about a third on arrival (the fluid bound ``1 - 1/1.5``), every served request meets the
TTFT budget, and the refusals are outcome ``rejected`` with HTTP 429 and the reason.
Over HTTP: a short burst against the simulator with admission on gets 429s the replay
records as ``rejected``, the served ones within the budget, the share as the offline
engine's for the same arrivals within 5 points.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from loadgen.cli.root import cli
from loadgen.run.session import SessionOptions, run_session
from loadgen.sim.launch import SimProcess
from traces import schema as s
from traces.io import write_trace

pytestmark = pytest.mark.serial  # times a real server or process: run alone

SimFactory = Callable[..., SimProcess]
BUDGET_MS = 500.0


def _poisson(path: Path, n: int, rate: float, seed: int = 3) -> Path:
    rng = random.Random(seed)
    t, arrivals = 0.0, []
    for _ in range(n):
        arrivals.append(t)
        t += rng.expovariate(rate)
    write_trace(
        pa.table(
            {
                "request_id": [f"a{i}" for i in range(n)],
                "arrival_s": arrivals,
                "input_tokens": [2000] * n,
                "output_tokens": [4] * n,
            }
        ),
        path,
    )
    return path


def test_plan_admission_at_one_and_a_half_times_capacity() -> None:
    done = CliRunner().invoke(
        cli,
        ["plan", "admission", "--model", "llama-3.1-8b", "--gpu", "h100",
         "--admission-ttft-ms", str(BUDGET_MS), "--requests", "600", "--load", "1.5", "--json"],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    assert abs(doc["rejected_share"] - doc["fluid_rejected_share"]) < 0.05
    assert doc["served_ttft_p99_s"] <= BUDGET_MS / 1e3
    assert 0 < doc["max_prompt_at_load"] < doc["max_prompt_idle"]
    assert 0 < doc["max_utilisation"] < 1
    labels = [line["label"] for line in doc["lines"]]
    assert "utilisation the SLO costs" in labels


def test_simulate_records_rejections_as_their_own_outcome(tmp_path: Path) -> None:
    trace = _poisson(tmp_path / "t.parquet", 300, rate=27.0)
    out = tmp_path / "run"
    done = CliRunner().invoke(
        cli,
        ["simulate", str(trace), "--model", "llama-3.1-8b", "--admission-ttft-ms",
         str(BUDGET_MS), "-o", str(out)],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    rows = pq.read_table(out / s.REQUESTS_FILE).to_pylist()
    rejected = [r for r in rows if r[s.OUTCOME] == s.OUTCOME_REJECTED]
    served = [r for r in rows if r[s.OUTCOME] == s.OUTCOME_OK]
    assert rejected
    assert served
    assert len(rejected) + len(served) == len(rows)
    assert all(r[s.HTTP_STATUS] == 429 for r in rejected)
    assert "rejected by admission control" in str(rejected[0][s.ERROR])
    worst = max((r["first_token_ns"] - r["sent_ns"]) / 1e6 for r in served)
    assert worst <= BUDGET_MS


def test_the_replay_records_the_simulators_429s_as_rejected(
    tmp_path: Path, sim: SimFactory
) -> None:
    # 120 requests at ~1.5x capacity (about 4.5 s): small, and enough to fill the queue.
    trace = _poisson(tmp_path / "t.parquet", 120, rate=27.0)
    server = sim("--model", "llama-3.1-8b", "--admission-ttft-ms", str(BUDGET_MS))
    opts = SessionOptions(
        trace_path=trace, run_dir=tmp_path / "run", base_url=server.base_url, scrape_metrics=False
    )
    result = asyncio.run(run_session(opts, install_signal_handlers=False))
    rows = pq.read_table(result.run_dir / s.REQUESTS_FILE).to_pylist()
    outcomes = {r[s.OUTCOME] for r in rows}
    assert outcomes <= {s.OUTCOME_OK, s.OUTCOME_REJECTED}, outcomes
    rejected = [r for r in rows if r[s.OUTCOME] == s.OUTCOME_REJECTED]
    assert rejected
    assert all(r[s.HTTP_STATUS] == 429 for r in rejected)
    offline = tmp_path / "offline"
    done = CliRunner().invoke(
        cli,
        ["simulate", str(trace), "--model", "llama-3.1-8b", "--admission-ttft-ms",
         str(BUDGET_MS), "-o", str(offline)],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    predicted = [r[s.OUTCOME] for r in pq.read_table(offline / s.REQUESTS_FILE).to_pylist()]
    share = len(rejected) / len(rows)
    assert abs(share - predicted.count(s.OUTCOME_REJECTED) / len(rows)) <= 0.05
