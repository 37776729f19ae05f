"""The decode-side wait of a disaggregated deployment, its own term: predicted with the
simulator's timings hidden, against the simulator's truth (``server_decode_wait_ms``).

A small offline run (``loadgen simulate``'s engine: the HTTP simulator's scheduler and
physics in virtual time, its truth in the ``server_*`` columns) on one prefill and one
decode H100: a KV cache that arrives while the decode instance is mid-step waits for that
step to end before the instance starts the request. ``decompose`` takes the deployment from
run.json alone.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa

from analyzers.decompose import DecomposeOptions, request_terms
from analyzers.decompose.columns import term_col
from loadgen.cli.options.budget import BudgetChoice
from loadgen.sim.config import EngineConfig
from loadgen.sim.offline.engine import OfflineLoad, simulate
from loadgen.sim.offline.rundir import OfflineRun, write_run
from traces import schema as s
from traces.io import read_trace, write_trace

DISAGG = EngineConfig(
    model="llama-3.1-8b", gpu="h100", topology="disagg", prefix_cache=False, link_gbps=400.0
)


def _run(tmp_path: Path, engine: EngineConfig, n: int = 48, rate: float = 12.0) -> Path:
    trace = tmp_path / "t.parquet"
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [i / rate for i in range(n)],
                "input_tokens": [1000 + 700 * (i % 4) for i in range(n)],
                "output_tokens": [48] * n,
            }
        ),
        trace,
    )
    out = tmp_path / "run"
    out.mkdir()
    run = OfflineRun(trace_path=trace, run_dir=out, engine=engine, load=OfflineLoad())
    result = simulate(read_trace(trace), engine, run.load, run_id="dw")
    write_run(run, result, run_id="dw", trace_sha256="0" * 64)
    return out


def _p(values: pl.Series, q: float) -> float:
    out = values.quantile(q, interpolation="linear")
    assert isinstance(out, float)
    return out


def test_the_decode_wait_is_its_own_term_and_matches_the_truth(tmp_path: Path) -> None:
    run = _run(tmp_path, DISAGG)
    truth = pl.read_parquet(run / s.REQUESTS_FILE).sort(s.REQUEST_ID)
    waits = truth.get_column(s.SERVER_DECODE_WAIT_MS)
    assert waits.min() == 0.0  # the decode instance was idle for some
    assert _p(waits, 0.9) > 1.0  # and mid-step for others
    parts = [s.SERVER_QUEUE_MS, s.SERVER_PREFILL_MS, s.SERVER_TRANSFER_MS]
    parts += [s.SERVER_DECODE_WAIT_MS, s.SERVER_FIRST_TOKEN_MS]
    residue = (truth.select(pl.sum_horizontal(parts)).to_series() - truth[s.SERVER_TTFT_MS]).abs()
    assert _p(residue, 1.0) < 1e-6  # the parts add up to the TTFT
    # The deployment from run.json alone, as `loadgen decompose RUN` takes it.
    budget = BudgetChoice().resolve(run).budget
    assert budget is not None
    assert budget.link is not None
    shown = request_terms(run, budget, DecomposeOptions()).frame.sort(s.REQUEST_ID)
    assert shown.get_column(term_col("decode_wait")).to_list() == waits.to_list()
    hidden = request_terms(run, budget, DecomposeOptions(hide_server_timings=True))
    sources = {x.term: x.source for x in hidden.sources}
    assert sources["decode_wait"] == "schedule"
    frame = hidden.frame.sort(s.REQUEST_ID)
    for term, column in (
        ("decode_wait", s.SERVER_DECODE_WAIT_MS),
        ("first_token", s.SERVER_FIRST_TOKEN_MS),
        ("transfer", s.SERVER_TRANSFER_MS),
        ("queue", s.SERVER_QUEUE_MS),
    ):
        for q in (0.5, 0.9, 0.99):
            got, want = _p(frame.get_column(term_col(term)), q), _p(truth.get_column(column), q)
            assert abs(got - want) <= max(5.0, 0.1 * want), (term, q, got, want)


def test_a_monolith_has_no_decode_wait(tmp_path: Path) -> None:
    mono = EngineConfig(model="llama-3.1-8b", gpu="h100", prefix_cache=False)
    run = _run(tmp_path, mono, n=16)
    truth = pl.read_parquet(run / s.REQUESTS_FILE)
    assert truth.get_column(s.SERVER_DECODE_WAIT_MS).max() == 0.0
    budget = BudgetChoice().resolve(run).budget
    hidden = request_terms(run, budget, DecomposeOptions(hide_server_timings=True)).frame
    assert hidden.get_column(term_col("decode_wait")).max() == 0.0
