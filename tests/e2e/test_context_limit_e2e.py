"""End to end: prompts beyond the model's context (issue 22, item 3).

The simulator refuses a request whose prompt plus ``max_tokens`` exceeds its
``max_model_len`` with vLLM's 400 and wording; its model card says ``max_model_len``; the
replay warns before the first request how many requests of the trace exceed it (and how to
clip), and records each refusal as ``context_exceeded``. ``trace info --max-context`` counts
the same requests, ``trace slice --max-input-tokens`` clips them, ``loadgen simulate`` sees
the same refusals.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from loadgen.cli.root import cli
from loadgen.run.session import SessionOptions, run_session
from loadgen.sim.launch import SimProcess
from traces import schema as s
from traces.io import read_trace_table, write_trace

SimFactory = Callable[..., SimProcess]
LIMIT = 1024
INPUTS = (200, 1100, 300, 1020, 2000)  # 1100 and 2000 exceed; 1020 + 8 output does too


def _trace(path: Path) -> Path:
    n = len(INPUTS)
    write_trace(
        pa.table(
            {
                "request_id": [f"c{i}" for i in range(n)],
                "arrival_s": [i * 0.05 for i in range(n)],
                "input_tokens": list(INPUTS),
                "output_tokens": [8] * n,
            }
        ),
        path,
    )
    return path


def test_the_replay_warns_first_and_records_the_simulators_400s(
    tmp_path: Path, sim: SimFactory
) -> None:
    server = sim("--model", "llama-3.1-8b", "--max-model-len", str(LIMIT))
    trace = _trace(tmp_path / "t.parquet")
    notices: list[str] = []
    opts = SessionOptions(
        trace_path=trace, run_dir=tmp_path / "run", base_url=server.base_url, scrape_metrics=False
    )
    result = asyncio.run(run_session(opts, install_signal_handlers=False, on_notice=notices.append))
    assert len(notices) == 1
    assert notices[0].startswith("3 of 5 requests (60.0%) exceed the context of 1,024 tokens")
    assert "--max-input-tokens 1016" in notices[0]
    rows = pq.read_table(result.run_dir / s.REQUESTS_FILE).to_pylist()
    outcome = {r[s.REQUEST_ID]: r[s.OUTCOME] for r in rows}
    assert outcome == {
        "c0": "ok", "c1": "context_exceeded", "c2": "ok", "c3": "context_exceeded",
        "c4": "context_exceeded",
    }  # fmt: skip
    refused = {r[s.REQUEST_ID]: r for r in rows if r[s.OUTCOME] == "context_exceeded"}
    assert all(r["http_status"] == 400 for r in refused.values())
    assert "maximum context length is 1024 tokens" in str(refused["c1"]["error"])


def test_trace_info_counts_and_slice_clips(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet")
    runner = CliRunner()
    shown = runner.invoke(cli, ["trace", "info", str(trace), "--max-context", str(LIMIT)])
    assert shown.exit_code == 0, shown.output
    assert "3 of 5 requests exceed 1,024 tokens (--max-context)" in shown.output
    assert "--max-input-tokens 1016" in shown.output  # the warning (stderr, mixed here)
    by_model = runner.invoke(cli, ["trace", "info", str(trace), "--model", "llama-3.1-8b"])
    assert "0 of 5 requests exceed 131,072 tokens" in by_model.output
    clipped = tmp_path / "clipped.parquet"
    done = runner.invoke(
        cli, ["trace", "slice", str(trace), "-o", str(clipped), "--max-input-tokens", "1016"]
    )
    assert done.exit_code == 0, done.output
    assert "3 clipped to 1016 input tokens" in done.output
    assert read_trace_table(clipped).column(s.INPUT_TOKENS).to_pylist() == [
        200, 1016, 300, 1016, 1016,
    ]  # fmt: skip
    again = runner.invoke(
        cli, ["trace", "info", str(clipped), "--max-context", str(LIMIT), "--json"]
    )
    assert json.loads(again.stdout)["context"]["over"] == 0


def test_simulate_refuses_the_same_requests(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet")
    out = tmp_path / "simrun"
    done = CliRunner().invoke(
        cli,
        ["simulate", str(trace), "--model", "llama-3.1-8b", "--max-model-len", str(LIMIT),
         "-o", str(out)],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    rows = pq.read_table(out / s.REQUESTS_FILE).to_pylist()
    assert [r[s.OUTCOME] for r in rows] == [
        "ok", "context_exceeded", "ok", "context_exceeded", "context_exceeded",
    ]  # fmt: skip
