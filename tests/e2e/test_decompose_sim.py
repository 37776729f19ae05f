"""End to end: decompose runs against the simulator, which knows the true TTFT split.

The v0 simulator's prefill is ``ttft_ms - itl_ms + prefill_us_per_token x prompt`` (its
first-token step is one ITL), so with ``--ttft-ms 20 --prefill-us-per-token 100 --itl-ms 5``
prefill(n) = 15 ms + 100 µs x n: the calibrated slope must come out near 100 µs/token.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from analyzers.decompose import BudgetModel, DecomposeOptions, decompose, request_terms
from analyzers.decompose.terms import term_col
from analyzers.metrics import AnalysisOptions, analyze
from loadgen.run.session import SessionOptions, SessionResult, run_session
from loadgen.sim.launch import SimProcess
from traces import schema as s
from traces.io import write_trace

SimFactory = Callable[..., SimProcess]
LENGTHS = (64, 512, 1024, 2048)


def make_trace(path: Path, n: int, rate: float) -> Path:
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [i / rate for i in range(n)],
                "input_tokens": [LENGTHS[i % len(LENGTHS)] for i in range(n)],
                "output_tokens": [4] * n,
                "workload": [
                    "long" if LENGTHS[i % len(LENGTHS)] > 600 else "short" for i in range(n)
                ],
            }
        ),
        path,
    )
    return path


def replay(trace: Path, run_dir: Path, base_url: str) -> SessionResult:
    opts = SessionOptions(trace_path=trace, run_dir=run_dir, base_url=base_url)
    return asyncio.run(run_session(opts, install_signal_handlers=False))


@pytest.mark.slow
def test_decomposition_matches_the_simulator(
    tmp_path: Path, sim: SimFactory, timing_retry: Callable[[Callable[[int], None]], None]
) -> None:
    server = sim("--ttft-ms", "20", "--prefill-us-per-token", "100", "--itl-ms", "5")

    def check(attempt: int) -> None:
        base = tmp_path / f"attempt{attempt}"
        base.mkdir()
        run = replay(make_trace(base / "t.parquet", 24, rate=10.0), base / "run", server.base_url)
        budget = BudgetModel.from_catalog("llama-3.1-8b", "h200")

        # Server timings visible: the server split is the simulator's truth.
        terms = request_terms(run.run_dir, budget, DecomposeOptions()).frame.sort(s.REQUEST_ID)
        truth = pl.read_parquet(run.run_dir / s.REQUESTS_FILE).sort(s.REQUEST_ID)
        assert terms.height == truth.height == 24
        prefill_err = (
            terms.get_column(term_col("prefill")) - truth.get_column(s.SERVER_PREFILL_MS)
        ).abs()
        assert prefill_err.max() < 1.0  # type: ignore[operator]
        expected = [15.0 + 0.1 * n for n in truth.get_column(s.PROMPT_TOKENS)]
        assert terms.get_column(term_col("prefill")).to_list() == pytest.approx(expected, abs=1.0)
        assert terms.get_column(term_col("queue")).max() == 0.0
        first = terms.get_column(term_col("first_token"))
        assert (first - truth.get_column(s.SERVER_FIRST_TOKEN_MS)).abs().max() < 1.0  # type: ignore[operator]

        # Hidden, calibrated on the run's low-load requests: the slope is the simulator's.
        # The fixed-delay simulator serves every request as if alone (no batching), so the
        # predictions are batch-1 ones rather than a replay through a batching engine.
        hidden = decompose(
            run.run_dir,
            budget,
            DecomposeOptions(
                hide_server_timings=True, calibrate=True, slo_ttft_ms=150.0, load_aware=False
            ),
        )
        cal = hidden.calibration
        assert cal is not None
        assert cal.measured == "derived"
        assert cal.b_us_per_token == pytest.approx(100.0, rel=0.10)
        assert hidden.network.source == "first_byte"
        long_tail = next(c for c in hidden.classes if c.workload == "long").tails[-1]
        assert long_tail.term("prefill").tail_mean_ms == pytest.approx(15 + 0.1 * 2048, rel=0.05)
        assert any("prefill breaks it" in v for v in hidden.verdicts)  # 2048 tokens: ~220 ms
        assert hidden.overall.max_prompt_tokens is not None
        assert 1000 < hidden.overall.max_prompt_tokens < 1300  # (150 - 15 - ~8 ms) / 0.1 ms

    timing_retry(check)


@contextmanager
def gil_hog() -> Iterator[None]:
    """Starve the event loop: a thread running long C calls (sorting a large list), which
    hold the GIL for tens of ms whatever the switch interval (the replay shortens it)."""
    stop = threading.Event()
    data = list(range(150_000))
    random.Random(0).shuffle(data)

    def burn() -> None:
        while not stop.is_set():
            sorted(data)  # one C call of about 50 ms

    thread = threading.Thread(target=burn, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@pytest.mark.slow
def test_starved_generator_is_flagged_client_bound(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "5", "--itl-ms", "2")
    trace = make_trace(tmp_path / "t.parquet", 12, rate=20.0)
    with gil_hog():
        run = replay(trace, tmp_path / "run", server.base_url)
    a = analyze(run.run_dir, AnalysisOptions(percentiles=(50.0,)))
    assert a.validity.client_bound, a.validity.reasons
    assert any("schedule lag" in r for r in a.validity.reasons)
