"""End to end: decompose runs against the simulator, which knows the true TTFT split.

The v0 simulator's prefill is ``ttft_ms - itl_ms + prefill_us_per_token x prompt`` (its
first-token step is one ITL), so with ``--ttft-ms 20 --prefill-us-per-token 100 --itl-ms 5``
prefill(n) = 15 ms + 100 µs x n: the calibrated slope must come out at 100 µs/token plus
whatever slope the client's measured jitter draws, which the test measures rather than
tolerates.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from replaying import replay

from analyzers.analysis import AnalysisOptions
from analyzers.budget import decode_step_time_s
from analyzers.budget.calibrate import fit_polynomial
from analyzers.decompose import BudgetModel, DecomposeOptions, decompose, request_terms
from analyzers.decompose.columns import term_col
from analyzers.metrics import analyze
from loadgen.sim.launch import SimProcess
from traces import schema as s
from traces.io import write_trace

pytestmark = pytest.mark.serial  # times a real server or process: run alone

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


def quadratic_fit(prompts: list[int], values_ms: list[float]) -> tuple[float, float, float]:
    """``(a ms, b us/token, c ns/token^2)`` of the least-squares ``a + b n + c n^2``: the
    calibration's model, fitted here to the jitter alone."""
    a, b, c = fit_polynomial([float(n) for n in prompts], values_ms)
    return a, b * 1e3, c * 1e6


@pytest.mark.slow
def test_decomposition_matches_the_simulator(tmp_path: Path, sim: SimFactory) -> None:
    server = sim("--ttft-ms", "20", "--prefill-us-per-token", "100", "--itl-ms", "5")
    run = replay(
        make_trace(tmp_path / "t.parquet", 24, rate=10.0), tmp_path / "run", server.base_url
    )
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

    # Hidden, calibrated on every request: the fixed-delay simulator serves each as if
    # alone (no batching), so all are low-load samples, and the predictions are batch-1
    # ones rather than a replay through a batching engine.
    hidden = decompose(
        run.run_dir,
        budget,
        DecomposeOptions(
            hide_server_timings=True,
            calibrate=True,
            slo_ttft_ms=150.0,
            load_aware=False,
            low_load_quantile=1.0,
        ),
    )
    cal = hidden.calibration
    assert cal is not None
    assert cal.measured == "derived"
    assert cal.samples == 24
    assert hidden.network.source == "first_byte"
    # What the client measured beyond the simulator's TTFT (20 ms + 100 us/token) and each
    # request's own network (its response head's delay): the server's late wake-ups and
    # the client's stamping, from tens of microseconds to tens of milliseconds on a busy
    # machine. The calibration fits the simulator's line plus this jitter, less the
    # budget's first-token step (an H200's decode step, 5.6 ms + 0.05 us/token, where the
    # simulator takes 5 ms), so each coefficient is the simulator's plus that of the
    # jitter's own fit, and nothing else. The tolerances are rounding, and the first-token
    # step's slope for b.
    per_request = request_terms(
        run.run_dir,
        budget,
        DecomposeOptions(hide_server_timings=True, load_aware=False, low_load_quantile=1.0),
    ).frame.sort(s.REQUEST_ID)
    assert (
        per_request.get_column(s.REQUEST_ID).to_list() == truth.get_column(s.REQUEST_ID).to_list()
    )
    network = per_request.get_column(term_col("network")).to_list()
    prompts = truth.get_column(s.PROMPT_TOKENS).to_list()
    side_ms = (truth.get_column(s.FIRST_TOKEN_NS) - truth.get_column(s.REQUEST_WRITTEN_NS)) / 1e6
    jitter = [t - w - (20.0 + 0.1 * n) for t, w, n in zip(side_ms, network, prompts, strict=True)]
    jitter_a, jitter_b, jitter_c = quadratic_fit(prompts, jitter)
    print(f"jitter ms: {min(jitter):.2f} to {max(jitter):.2f}; its fit's slope {jitter_b:.2f} us")
    first_step_ms = decode_step_time_s(budget.model, budget.deployment, [0]) * 1e3
    constants = first_step_ms
    assert cal.a_ms == pytest.approx(20.0 + jitter_a - constants, abs=0.01)
    assert cal.b_us_per_token == pytest.approx(100.0 + jitter_b, abs=0.1)
    assert cal.c_ns_per_token2 == pytest.approx(jitter_c, abs=1e-5)

    # The long class's p99.9 tail is its slowest request: its prefill is the fitted line.
    long_rows = truth.filter(pl.col(s.WORKLOAD) == "long").sort(
        pl.col(s.FIRST_TOKEN_NS) - pl.col(s.DUE_NS)
    )
    tail_prefill = cal.prefill_ms(long_rows[s.PROMPT_TOKENS][-1])
    assert tail_prefill is not None
    long_tail = next(c for c in hidden.classes if c.workload == "long").tails[-1]
    assert long_tail.term("prefill").tail_mean_ms == pytest.approx(tail_prefill, rel=1e-9)
    # About 220 ms at 2,048 tokens against a 150 ms SLO, unless the jitter bent the fit
    # that far: a prefill that alone misses the SLO is named, and bounds the prompt length.
    longest = hidden.overall.max_prompt_tokens
    assert longest is not None
    assert longest == 0 or (cal.prefill_ms(longest) or 0.0) <= 150.0
    if tail_prefill > 150.0:
        assert any("prefill breaks it" in v for v in hidden.verdicts), hidden.verdicts
        assert longest < long_rows[s.PROMPT_TOKENS][-1]


@contextmanager
def gil_hog() -> Iterator[None]:
    """Starve the event loop: a thread running long C calls (sorting a large list), which
    hold the GIL for tens of ms whatever the switch interval (the replay shortens it).
    Between two calls it rests as long: stalls of 50 ms every 100 ms are starvation enough,
    and the rest of the test (the run's teardown, the recorder) does not crawl."""
    stop = threading.Event()
    data = list(range(150_000))
    random.Random(0).shuffle(data)

    def burn() -> None:
        while not stop.is_set():
            sorted(data)  # one C call of about 50 ms
            stop.wait(0.05)

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
