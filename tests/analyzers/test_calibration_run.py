"""``loadgen plan calibrate RUN``: a run directory's idle prefills and constant-batch decode
spans become calibration points; a simulated run with known efficiencies, not the defaults,
is recovered.

The offline simulator (``loadgen simulate``) steps the budget model's plain roofline with
the efficiencies it is given and records its deployment in run.json, so the fitted profile
must predict the simulator's own step times: within 2% at the prompt sizes held out of the
fit, and at sizes the run never sent (the step time of the simulator's deployment).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from click.testing import CliRunner

from analyzers.budget import catalog
from analyzers.budget.engine.step import SequenceWork, step_cost
from analyzers.budget.profile import load_profiles
from analyzers.budget.specs import Deployment
from analyzers.calibration_points import MIN_DECODE_GAPS, run_calibration_points
from analyzers.calibration_pool import PooledPoints
from analyzers.errors import BudgetError
from loadgen.cli.root import cli
from traces.io import write_trace

PROMPTS = (96, 160, 256, 384, 512, 768, 1024, 1536, 2048, 3000)
HELD_OUT = (384, 1536)
EFF_PREFILL, EFF_DECODE, OVERHEAD_US = 0.42, 0.5, 300.0
ENGINE = (
    "--model",
    "llama-3.1-8b",
    "--gpu",
    "h100",
    "--efficiency-prefill",
    str(EFF_PREFILL),
    "--efficiency-decode",
    str(EFF_DECODE),
    "--step-overhead-us",
    str(OVERHEAD_US),
)
TOLERANCE = 0.02


def invoke(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, (args, result.output)
    return result.output


def make_run(tmp: Path, *, rate: float) -> Path:
    """Two requests per prompt size, ``rate`` a second, outputs of 12-15 tokens."""
    n = 2 * len(PROMPTS)
    trace = tmp / f"t{rate:g}.parquet"
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [i / rate for i in range(n)],
                "input_tokens": [PROMPTS[i % len(PROMPTS)] for i in range(n)],
                "output_tokens": [12 + i % 4 for i in range(n)],
            }
        ),
        trace,
    )
    run = tmp / f"run{rate:g}"
    invoke("simulate", str(trace), *ENGINE, "--no-prefix-cache", "-o", str(run))
    return run


def simulate_requests(
    tmp: Path, name: str, *, arrivals: list[float], inputs: list[int], outputs: list[int]
) -> Path:
    """``loadgen simulate`` (the module's engine, no prefix cache) of these requests."""
    trace = tmp / f"{name}.parquet"
    write_trace(
        pa.table(
            {
                "request_id": [f"{name}{i}" for i in range(len(arrivals))],
                "arrival_s": arrivals,
                "input_tokens": inputs,
                "output_tokens": outputs,
            }
        ),
        trace,
    )
    run = tmp / name
    invoke("simulate", str(trace), *ENGINE, "--no-prefix-cache", "-o", str(run))
    return run


@pytest.fixture(scope="module")
def idle_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("calib"), rate=1.0)


def simulated_work_s(work: list[SequenceWork]) -> float:
    """The simulator's step over ``work``: the plain roofline at the efficiencies it was
    given."""
    cat = catalog.load_catalog(None)
    deploy = Deployment(
        hardware=cat.gpu("h100"),
        prefill_efficiency=EFF_PREFILL,
        decode_efficiency=EFF_DECODE,
        step_overhead_s=OVERHEAD_US / 1e6,
    )
    return step_cost(cat.model("llama-3.1-8b"), deploy, work).time_s


def simulated_step_s(new_tokens: int, cached_tokens: int = 0, batch: int = 1) -> float:
    """The simulator's step of ``batch`` alike sequences."""
    alike = SequenceWork(new_tokens=new_tokens, cached_tokens=cached_tokens)
    return simulated_work_s([alike] * batch)


def test_points_of_an_idle_run(idle_run: Path) -> None:
    points = run_calibration_points(idle_run)
    d = points.deployment
    assert (d.model, d.gpu, d.engine, d.prefill_tp, d.chunk_tokens) == (
        "llama-3.1-8b", "h100", "sim", 1, 2048,
    )  # fmt: skip
    # Every request found the server idle; the 3000-token prompts took two chunks.
    assert points.prefill_server == 2 * (len(PROMPTS) - 1)
    assert points.prefill_ttft == 0
    assert points.chunked == 2
    assert points.not_idle == 0
    assert points.decode == 2 * len(PROMPTS)
    assert points.decode_unknown_batch == 0
    # The offline simulator has no front end: its TTFT is its queue and prefill.
    assert points.front_end_ms == pytest.approx(0.0, abs=1e-3)
    assert points.front_end_requests == 2 * (len(PROMPTS) - 1)
    prefills = {o.new_tokens: o.seconds for o in points.observations if o.phase == "prefill"}
    assert sorted(prefills) == sorted(PROMPTS[:-1])
    for tokens, seconds in prefills.items():  # the simulator's server timing is its step
        assert seconds == pytest.approx(simulated_step_s(tokens), rel=1e-6)


def test_calibrate_run_recovers_the_simulated_deployment(idle_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "profile.toml"
    held = ",".join(map(str, HELD_OUT))
    text = invoke("plan", "calibrate", str(idle_run), "-o", str(out), "--hold-out-prompts", held)
    assert "from run.json deployment" in text
    assert "held out" in text
    (profile,) = load_profiles(out).values()
    assert profile.gpu == "h100"
    assert profile.engine == "sim"
    assert profile.prefill.compute_efficiency == pytest.approx(EFF_PREFILL, rel=TOLERANCE)
    assert profile.prefill.step_overhead_s == pytest.approx(OVERHEAD_US / 1e6, rel=0.1)
    assert profile.decode.memory_efficiency == pytest.approx(EFF_DECODE, rel=TOLERANCE)
    # The profile on the catalog's deployment predicts the simulator's step at sizes held
    # out of the fit and at sizes the run never sent.
    cat = catalog.load_catalog(None)
    model = cat.model("llama-3.1-8b")
    calibrated = Deployment(hardware=cat.gpu("h100"), profile=profile)
    for tokens in (*HELD_OUT, 128, 640, 1800):
        predicted = step_cost(model, calibrated, [SequenceWork(new_tokens=tokens)]).time_s
        assert predicted == pytest.approx(simulated_step_s(tokens), rel=TOLERANCE), tokens
    for context in (200, 1000, 2000):
        work = [SequenceWork(new_tokens=1, cached_tokens=context)]
        predicted = step_cost(model, calibrated, work).time_s
        assert predicted == pytest.approx(simulated_step_s(1, context), rel=TOLERANCE), context


def test_a_busy_run_keeps_only_what_it_can_time(tmp_path: Path) -> None:
    # 40 requests a second: prefills overlap other requests, decode batches change.
    points = run_calibration_points(make_run(tmp_path, rate=40.0))
    assert points.not_idle > 0
    assert points.decode_unknown_batch > 0
    assert points.prefill_server + points.not_idle + points.chunked == points.requests


def test_a_run_without_a_deployment_needs_the_names(idle_run: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "requests.parquet").write_bytes((idle_run / "requests.parquet").read_bytes())
    info = json.loads((idle_run / "run.json").read_text())
    info.pop("deployment")
    (bare / "run.json").write_text(json.dumps(info))
    with pytest.raises(BudgetError, match="give --model and --gpu"):
        run_calibration_points(bare)
    out = invoke("plan", "calibrate", str(bare), "-o", str(tmp_path / "p.toml"), code=2)
    assert "give --model and --gpu" in out
    points = run_calibration_points(bare, model="llama-3.1-8b", gpu="h100", tensor_parallel=1)
    assert points.deployment.engine == ""
    assert "--model, --gpu, --gpus given" in points.summary()
    # Without a chunk size recorded, the 3000-token prompts count as one step each.
    assert points.chunked == 0


def test_decode_at_a_constant_batch(tmp_path: Path) -> None:
    # 4 requests at t=0, then 8 at t=5 s, alike: each group is prefilled in one step and
    # decodes together from its first token to its last, a known batch throughout.
    arrivals = [0.0] * 4 + [5.0] * 8
    trace = tmp_path / "batch.parquet"
    write_trace(
        pa.table(
            {
                "request_id": [f"b{i}" for i in range(len(arrivals))],
                "arrival_s": arrivals,
                "input_tokens": [256] * len(arrivals),
                "output_tokens": [20] * len(arrivals),
            }
        ),
        trace,
    )
    run = tmp_path / "batch"
    invoke("simulate", str(trace), *ENGINE, "--no-prefix-cache", "-o", str(run))
    points = run_calibration_points(run)
    assert points.decode == len(arrivals)
    assert points.not_idle == len(arrivals)  # every prefill shared its step
    decodes = {o.batch: o for o in points.observations if o.phase == "decode"}
    assert sorted(decodes) == [4, 8]
    for batch, obs in decodes.items():
        assert obs.cached_tokens == 256 + 10
        expected = simulated_step_s(1, obs.cached_tokens, batch)
        assert obs.seconds == pytest.approx(expected, rel=0.01), batch


def test_a_batch_whose_tokens_arrive_apart_is_still_a_batch(tmp_path: Path) -> None:
    """Over HTTP one step's tokens reach the client stream after stream: the 4 requests
    that start and end together are stamped microseconds apart, in no fixed order. Each is
    still a batch-4 decode point (stamps within half a gap between tokens are one step)."""
    arrivals = [0.0] * 4
    trace = tmp_path / "batch.parquet"
    write_trace(
        pa.table(
            {
                "request_id": [f"b{i}" for i in range(4)],
                "arrival_s": arrivals,
                "input_tokens": [256] * 4,
                "output_tokens": [20] * 4,
            }
        ),
        trace,
    )
    run = tmp_path / "batch"
    invoke("simulate", str(trace), *ENGINE, "--no-prefix-cache", "-o", str(run))
    table = run / "requests.parquet"
    frame = pl.read_parquet(table).sort("trace_index")
    # First tokens in the order 0 1 2 3, ends in the order 3 1 0 2, 40 us apart.
    first_us = pl.Series([0, 40, 80, 120])
    end_us = pl.Series([80, 40, 120, 0])
    frame = frame.with_columns(
        (pl.col("first_token_ns") + first_us * 1000).alias("first_token_ns"),
        (pl.col("end_ns") + end_us * 1000).alias("end_ns"),
    )
    frame.write_parquet(table)
    points = run_calibration_points(run)
    assert points.decode == 4
    assert points.decode_unknown_batch == 0
    assert {o.batch for o in points.observations if o.phase == "decode"} == {4}


def test_without_server_timings_the_idle_ttft_times_prefill(idle_run: Path, tmp_path: Path) -> None:
    # A server that reports no timings: idle requests' TTFT (the offline simulator has no
    # network) is the prefill step.
    run = tmp_path / "no-timings"
    run.mkdir()
    (run / "run.json").write_bytes((idle_run / "run.json").read_bytes())
    rows = pl.read_parquet(idle_run / "requests.parquet")
    nulls = [
        pl.lit(None, dtype=pl.Float64).alias(c) for c in ("server_prefill_ms", "server_decode_ms")
    ]
    rows.with_columns(nulls).write_parquet(run / "requests.parquet")
    points = run_calibration_points(run)
    assert points.prefill_server == 0
    assert points.prefill_ttft == 2 * (len(PROMPTS) - 1)
    for o in points.observations:
        expected = simulated_step_s(o.new_tokens, o.cached_tokens)
        assert o.seconds == pytest.approx(expected, rel=0.01), o


def test_two_requests_a_step_apart_give_a_steady_batch_of_two(tmp_path: Path) -> None:
    """The second request arrives while the first is prefilled: it is prefilled a step
    later, so the two start and end a step apart and neither decode span has a constant
    batch. The stretch where both decode and nothing waits is a batch-2 point of each."""
    run = simulate_requests(
        tmp_path, "pair", arrivals=[0.0, 0.001], inputs=[256, 256], outputs=[24, 24]
    )
    frame = pl.read_parquet(run / "requests.parquet").sort("trace_index")
    firsts = frame.get_column("first_token_ns").to_list()
    assert firsts[1] > firsts[0]  # a step apart, as the scenario needs
    points = run_calibration_points(run)
    assert points.decode == 0
    assert points.decode_stretches == 2
    assert points.decode_unknown_batch == 0
    (decode,) = (o for o in points.observations if o.phase == "decode")
    assert decode.batch == 2
    assert decode.cached_tokens == 256 + 12
    expected = simulated_step_s(1, decode.cached_tokens, 2)
    assert decode.seconds == pytest.approx(expected, rel=0.01)
    assert "2 steady stretches" in points.summary()


def test_a_stretch_where_another_request_waits_is_not_steady(tmp_path: Path) -> None:
    """A 20,000-token prompt arrives as the pair starts decoding: its prefill takes ten
    2,048-token chunks, each in a step with the pair's decode (ten times a decode step),
    and the pair's 8 tokens end before it is done. No stretch of the pair is steady (the
    third waits for its first token over all of them); the third decodes alone after."""
    run = simulate_requests(
        tmp_path, "three", arrivals=[0.0, 0.001, 0.02], inputs=[256, 256, 20_000],
        outputs=[8, 8, 16],
    )  # fmt: skip
    rows = pl.read_parquet(run / "requests.parquet").sort("trace_index")
    ends, firsts = rows.get_column("end_ns").to_list(), rows.get_column("first_token_ns").to_list()
    assert max(ends[:2]) < firsts[2]  # the pair ended within the third's prefill
    points = run_calibration_points(run)
    assert points.decode_stretches == 0
    assert points.decode_unknown_batch == 2
    (decode,) = (o for o in points.observations if o.phase == "decode")
    assert decode.batch == 1
    assert decode.seconds == pytest.approx(simulated_step_s(1, decode.cached_tokens), rel=0.01)


def test_a_prefill_beside_a_decode_is_a_mixed_step_point(tmp_path: Path) -> None:
    """Prompts sent while one long request decodes, each after the previous one ended: the
    prefill shares its step with that request's decode token only (a mixed step), a point
    with ``decoding == 1`` timed as the simulator's mixed step."""
    run = simulate_requests(
        tmp_path, "mixed", arrivals=[0.0, 0.2, 0.5], inputs=[64, 512, 1536], outputs=[80, 2, 2]
    )
    rows = pl.read_parquet(run / "requests.parquet").sort("trace_index")
    assert rows.get_column("end_ns")[0] > rows.get_column("first_token_ns")[2]  # still decoding
    points = run_calibration_points(run)
    assert points.prefill_beside_decodes == 2
    assert "2 of them beside decoding requests" in points.summary()
    # The probes' one gap each is the step right after their prefill: no decode point.
    assert points.decode_short == 2
    assert [o.batch for o in points.observations if o.phase == "decode"] == [1]
    mixed = {o.new_tokens: o for o in points.observations if o.decoding}
    assert sorted(mixed) == [512, 1536]
    for tokens, obs in mixed.items():
        assert obs.decoding == 1
        # The prompt and the long request's one token (its context 64-150 tokens).
        work = [SequenceWork(new_tokens=tokens), SequenceWork(new_tokens=1, cached_tokens=100)]
        assert obs.seconds == pytest.approx(simulated_work_s(work), rel=0.01), tokens


def test_a_decode_span_of_few_gaps_is_no_point(tmp_path: Path) -> None:
    """Requests alone with 2 to ``MIN_DECODE_GAPS`` output tokens give prefill points but
    no decode point; one with a gap more gives both."""
    outputs = [2, MIN_DECODE_GAPS, MIN_DECODE_GAPS + 1]
    run = simulate_requests(
        tmp_path, "short", arrivals=[0.0, 0.5, 1.0], inputs=[256, 512, 768], outputs=outputs
    )
    points = run_calibration_points(run)
    assert points.decode_short == 2
    assert points.decode == 1
    assert f"2 decode spans of under {MIN_DECODE_GAPS} gaps" in points.summary()
    assert len([o for o in points.observations if o.phase == "prefill"]) == 3


def _simulated(tmp: Path, name: str, prompts: list[int], *, prefill_efficiency: float) -> Path:
    """Requests alone 1 s apart (8 tokens out) on the module's engine at another prefill
    efficiency."""
    trace = tmp / f"{name}.parquet"
    n = len(prompts)
    write_trace(
        pa.table(
            {
                "request_id": [f"{name}{i}" for i in range(n)],
                "arrival_s": [float(i) for i in range(n)],
                "input_tokens": prompts,
                "output_tokens": [8] * n,
            }
        ),
        trace,
    )
    engine = list(ENGINE)
    engine[engine.index("--efficiency-prefill") + 1] = str(prefill_efficiency)
    run = tmp / name
    invoke("simulate", str(trace), *engine, "--no-prefix-cache", "-o", str(run))
    return run


def test_several_runs_are_pooled(tmp_path: Path) -> None:
    """Two runs of one server, slower in the second (a server whose speed drifted): a shape
    measured in both is the median of the two (here their mean), a shape in one run only is
    that run's, and the front end is the median over both runs' requests alone."""
    first = _simulated(tmp_path, "first", [256, 1024], prefill_efficiency=0.6)
    second = _simulated(tmp_path, "second", [1024, 2000], prefill_efficiency=0.3)
    out = tmp_path / "profile.toml"
    text = invoke("plan", "calibrate", str(first), str(second), "-o", str(out))
    assert text.count("ok requests") == 2  # each run's own summary
    assert "2 runs pooled: " in text
    # The offline simulator has no front end.
    assert "front end, all runs: 0.0 ms a request (median of 4 alone)" in text
    assert "loadgen plan calibrate first second" in out.read_text(encoding="utf-8")
    runs = (run_calibration_points(first), run_calibration_points(second))
    prefills = {
        o.new_tokens: o.seconds
        for o in PooledPoints(runs=runs).observations
        if o.phase == "prefill"
    }
    alone = [
        {o.new_tokens: o.seconds for o in r.observations if o.phase == "prefill"} for r in runs
    ]
    assert prefills[256] == alone[0][256]
    assert prefills[2000] == alone[1][2000]
    assert alone[1][1024] > 1.5 * alone[0][1024]  # the second run's prefill is slower
    assert prefills[1024] == pytest.approx((alone[0][1024] + alone[1][1024]) / 2, rel=1e-9)


def test_a_csv_is_calibrated_alone(idle_run: Path, tmp_path: Path) -> None:
    csv = tmp_path / "points.csv"
    csv.write_text("model,gpu,tp,tokens,batch,ms\nllama-3.1-8b,h100,1,512,1,40\n", encoding="utf-8")
    out = str(tmp_path / "p.toml")
    said = invoke("plan", "calibrate", str(idle_run), str(csv), "-o", out, code=2)
    assert "a CSV is calibrated alone" in said
    said = invoke("plan", "calibrate", str(csv), str(csv), "-o", out, code=2)
    assert "give one CSV" in said
