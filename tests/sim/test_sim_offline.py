"""The offline engine: the simulator's scheduler and physics in virtual time."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from analyzers.budget.engine.timeline import Arrival, EngineShape, replay_schedule
from loadgen.cli.results import RESULTS_FILE
from loadgen.cli.root import cli
from loadgen.sim.config import EngineConfig
from loadgen.sim.offline.engine import SIM_EPOCH_NS, OfflineLoad, PrefixKeys, simulate
from loadgen.sim.offline.rundir import SIMULATED_GENERATOR
from loadgen.sim.physics import Physics
from loadgen.sim.topology import instance_setup
from traces import schema as s
from traces.io import read_run_info, read_run_table, write_trace
from traces.records import TraceRequest

ENGINE = EngineConfig(model="llama-3.1-8b", gpu="h100")


def req(
    i: int, t: float, prompt: int, out: int, blocks: tuple[int, ...] | None = None
) -> TraceRequest:
    return TraceRequest(
        index=i,
        request_id=f"q{i}",
        arrival_s=t,
        input_tokens=prompt,
        output_tokens=out,
        prefix_blocks=blocks,
    )


def test_a_request_alone_takes_the_budget_steps() -> None:
    result = simulate([req(0, 0.0, 1000, 4)], ENGINE, OfflineLoad(), run_id="r")
    (row,) = result.records
    physics, _ = instance_setup(ENGINE, 1)
    assert isinstance(physics, Physics)
    from analyzers.budget import SequenceWork

    prefill = physics.step_s([SequenceWork(new_tokens=1000)])
    assert row.outcome == s.OUTCOME_OK
    assert row.completion_tokens == 4
    assert row.server_queue_ms == 0.0
    assert row.server_prefill_ms == pytest.approx(prefill * 1e3)
    assert row.first_token_ns == SIM_EPOCH_NS + round(prefill * 1e9)
    decode = [
        physics.step_s([SequenceWork(new_tokens=1, cached_tokens=1000 + k)]) for k in range(3)
    ]
    gaps = [b - a for a, b in zip(row.chunk_offsets_us, row.chunk_offsets_us[1:], strict=False)]
    assert gaps == pytest.approx([d * 1e6 for d in decode], abs=1.0)


def test_first_tokens_agree_with_the_load_replay_of_the_decomposition() -> None:
    # Without prefix sharing both drive the same scheduler through the same loop.
    from analyzers.budget import Deployment, catalog

    trace = [req(i, i * 0.05, 300 + 97 * i, 20) for i in range(40)]
    result = simulate(trace, ENGINE, OfflineLoad(), run_id="r")
    shape = EngineShape(
        model=catalog.model("llama-3.1-8b"),
        deployment=Deployment(
            hardware=catalog.gpu("h100"), prefill_efficiency=0.6, chunk_tokens=2048
        ),
    )
    phases = replay_schedule(
        [
            Arrival(
                key=r.index,
                arrival_s=r.arrival_s,
                prompt_tokens=r.input_tokens,
                output_tokens=r.output_tokens,
            )
            for r in trace
        ],
        shape,
    )
    for row in result.records:
        p = phases[row.trace_index]
        ttft = p.queue_s + p.prefill_s + p.transfer_s + p.decode_wait_s + p.first_token_s
        assert row.server_ttft_ms == pytest.approx(ttft * 1e3, rel=1e-9)


def test_equal_trace_blocks_share_prefix_keys() -> None:
    for kv in (16, 48):  # dividing the trace block, and straddling two
        keys = PrefixKeys(trace_block=64, kv_block=kv)
        a = keys.keys((1, 2, 3), 192)
        b = keys.keys((1, 2, 9), 192)
        c = keys.keys((5, 2, 3), 192)
        shared = 128 // kv  # the full KV blocks inside the first two trace blocks
        assert a[:shared] == b[:shared]
        assert a[shared:] != b[shared:]
        assert not set(a) & set(c)
        assert len(keys.keys(None, 100)) == 100 // kv


def test_a_shared_prefix_is_cached_on_the_second_request() -> None:
    trace = [req(0, 0.0, 2048, 2, (1, 2, 3, 4)), req(1, 5.0, 2048, 2, (1, 2, 3, 7))]
    rows = simulate(trace, ENGINE, OfflineLoad(), run_id="r").records
    assert rows[0].cached_tokens == 0
    assert rows[1].cached_tokens == 3 * 512


def test_closed_loop_sends_the_next_request_when_one_finishes() -> None:
    trace = [req(i, 100.0 * i, 500, 8) for i in range(6)]
    rows = simulate(trace, ENGINE, OfflineLoad(concurrency=2), run_id="r").records
    assert [r.due_ns for r in rows[:2]] == [SIM_EPOCH_NS] * 2
    ends = sorted(r.end_ns or 0 for r in rows[:2])
    assert rows[2].due_ns == ends[0]


def test_disaggregated_requests_cross_the_link() -> None:
    engine = EngineConfig(model="llama-3.1-8b", gpu="h100", topology="disagg", link_gbps=10)
    (row,) = simulate([req(0, 0.0, 4000, 3)], engine, OfflineLoad(), run_id="r").records
    assert row.server_transfer_ms is not None
    assert row.server_transfer_ms > 1.0
    assert row.server_instance == "d0"


def test_a_request_that_never_fits_is_refused_like_the_http_simulator() -> None:
    engine = EngineConfig(model="llama-3.1-8b", gpu="h100", kv_capacity_tokens=1024)
    rows = simulate([req(0, 0.0, 4000, 3), req(1, 0.0, 100, 3)], engine, OfflineLoad(), run_id="r")
    assert [r.http_status for r in rows.records] == [400, 200]
    assert rows.records[0].outcome == s.OUTCOME_HTTP_ERROR


def test_a_stream_longer_than_the_offsets_hold_is_cut_as_the_client_cuts_it(
    tmp_path: Path,
) -> None:
    """A 6,000-token answer at 1% decode efficiency lasts about 2,950 s, beyond the run
    table's int32 µs offsets (2,147 s): the row keeps the chunks that fit and says so, as a
    live replay's row would, and the run directory is written (it used to crash)."""
    engine = EngineConfig(model="llama-3.1-8b", gpu="h100", efficiency_decode=0.01)
    (row,) = simulate([req(0, 0.0, 100, 6000)], engine, OfflineLoad(), run_id="r").records
    assert row.outcome == s.OUTCOME_PROTOCOL_ERROR
    assert row.error is not None
    assert "beyond the column's int32" in row.error
    assert 0 < len(row.chunk_offsets_us) < 6000
    assert max(row.chunk_offsets_us) <= 2**31 - 1
    assert row.completion_tokens == 6000
    trace = tmp_path / "long.parquet"
    write_trace(
        pa.table({"request_id": ["q0"], "arrival_s": [0.0], "input_tokens": [100],
                  "output_tokens": [6000]}),
        trace,
    )  # fmt: skip
    done = CliRunner().invoke(
        cli,
        ["simulate", str(trace), "--model", "llama-3.1-8b", "--gpu", "h100",
         "--efficiency-decode", "0.01", "-o", str(tmp_path / "run")],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert read_run_table(tmp_path / "run").column(s.OUTCOME).to_pylist() == ["protocol_error"]


def _trace(path: Path, n: int = 30) -> Path:
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [i * 0.1 for i in range(n)],
                "input_tokens": [200 + 50 * (i % 7) for i in range(n)],
                "output_tokens": [10 + i % 5 for i in range(n)],
            }
        ),
        path,
    )
    return path


def test_the_command_is_deterministic_and_marks_the_run_simulated(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet")
    args = ["simulate", str(trace), "--model", "llama-3.1-8b", "-o", str(tmp_path / "run")]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    names = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert {s.REQUESTS_FILE, s.RUN_JSON, RESULTS_FILE} <= set(names)
    first_bytes = {name: (tmp_path / "run" / name).read_bytes() for name in names}
    shutil.rmtree(tmp_path / "run")
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0, again.output
    # Every file byte for byte, results.json included (its ITL mean once varied).
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == names
    for name in names:
        assert (tmp_path / "run" / name).read_bytes() == first_bytes[name], name
    run = read_run_info(tmp_path / "run")
    assert run is not None
    assert run.generator.name == SIMULATED_GENERATOR
    assert run.complete
    assert read_run_table(tmp_path / "run").num_rows == 30
    # The engine's deployment travels with the run, so `decompose RUN` needs no flags.
    assert run.deployment is not None
    spec = run.deployment.spec()
    assert (spec.model, spec.gpu, spec.scheduler.max_batched_tokens) == (
        "llama-3.1-8b",
        "h100",
        2048,
    )
    assert set(run.deployment.sources().values()) == {"loadgen simulate"}
    done = CliRunner().invoke(cli, ["decompose", str(tmp_path / "run")])
    assert done.exit_code == 0, done.output
    assert "llama-3.1-8b on 1x h100 (run.json)" in done.output


def test_the_command_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet")
    out = ["-o", str(tmp_path / "run")]
    no_model = CliRunner().invoke(cli, ["simulate", str(trace), *out])
    assert no_model.exit_code == 2
    assert "needs --model" in no_model.output
    both = CliRunner().invoke(
        cli,
        [
            "simulate",
            str(trace),
            "--model",
            "llama-3.1-8b",
            "--concurrency",
            "2",
            "--rate",
            "3",
            *out,
        ],
    )
    assert both.exit_code == 2
    assert "closed loop" in both.output
