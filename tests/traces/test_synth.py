"""Synthesizers: determinism, statistics against parameters, classes, prefixes, sessions."""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from traces import schema as s
from traces.io import read_metadata, read_trace
from traces.prompts.image_tokens import image_tokens
from traces.synth.arrivals import ArrivalSpec, RateStep, arrival_times, expected_duration
from traces.synth.lengths import (
    Empirical,
    Fixed,
    LogNormal,
    LogUniform,
    UniformInt,
    empirical_from_file,
    empirical_from_text,
)
from traces.synth.sessions import SessionSpec
from traces.synth.trace import (
    ClassShare,
    PrefixSpec,
    Resolution,
    SynthConfig,
    image_class,
    long_context_class,
    parse_class_values,
    parse_mix,
    synthesize,
    text_class,
    write_synth,
)

ALL_CLASSES = (text_class(), long_context_class(), image_class())


def _config(**kw: object) -> SynthConfig:
    base: dict[str, object] = {"requests": 2000, "seed": 7, "classes": ALL_CLASSES}
    base.update(kw)
    return SynthConfig(**base)  # type: ignore[arg-type]


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *times[:-1]], times, strict=True)]


# ------------------------------------------------------------------ determinism
def test_same_seed_gives_byte_identical_parquet(tmp_path: Path) -> None:
    config = _config(
        mix=parse_mix("text=0.6,long_context=0.1,image=0.3"),
        prefix=PrefixSpec(groups=4, tokens=1000),
        api="mixed",
    )
    write_synth(config, tmp_path / "a.parquet")
    write_synth(config, tmp_path / "b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_other_seed_gives_other_trace() -> None:
    a = synthesize(_config(seed=1)).table
    b = synthesize(_config(seed=2)).table
    assert a.column(s.ARRIVAL_S).to_pylist() != b.column(s.ARRIVAL_S).to_pylist()


def test_metadata_has_provenance_and_no_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    write_synth(_config(block_size=256), path)
    meta = read_metadata(path)
    assert meta["source"] == "synth"
    assert meta["block_size"] == 256
    assert meta["seed"] == 7
    assert meta["schema_version"] == s.SCHEMA_VERSION
    assert "time" not in " ".join(meta).lower()


def test_written_trace_reads_back_valid(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    write_synth(_config(requests=50), path)
    rows = read_trace(path)
    assert len(rows) == 50
    assert all(r.input_tokens > 0 and r.output_tokens > 0 for r in rows)


# ------------------------------------------------------------------ arrivals
def test_poisson_mean_rate_within_5_percent() -> None:
    times = arrival_times(ArrivalSpec(kind="poisson", rate=20.0), random.Random(1), count=10_000)
    rate = len(times) / times[-1]
    assert rate == pytest.approx(20.0, rel=0.05)
    cv = statistics.pstdev(_gaps(times)) / statistics.fmean(_gaps(times))
    assert cv == pytest.approx(1.0, rel=0.1)


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_cv_within_10_percent_and_rate_kept(cv: float) -> None:
    times = arrival_times(
        ArrivalSpec(kind="gamma", rate=5.0, cv=cv), random.Random(3), count=10_000
    )
    gaps = _gaps(times)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(cv, rel=0.1)
    assert len(times) / times[-1] == pytest.approx(5.0, rel=0.05 * max(1.0, cv))


def test_constant_arrivals_are_evenly_spaced() -> None:
    times = arrival_times(ArrivalSpec(kind="constant", rate=4.0), random.Random(0), count=100)
    assert times[0] == pytest.approx(0.25)
    assert max(_gaps(times)) == pytest.approx(0.25)
    assert min(_gaps(times)) == pytest.approx(0.25)


def test_duration_bounds_the_trace() -> None:
    times = arrival_times(
        ArrivalSpec(kind="poisson", rate=50.0), random.Random(0), duration_s=200.0
    )
    assert times[-1] <= 200.0
    assert len(times) == pytest.approx(10_000, rel=0.05)


def test_count_and_duration_stop_at_first_reached() -> None:
    spec = ArrivalSpec(kind="poisson", rate=10.0)
    assert len(arrival_times(spec, random.Random(0), count=5, duration_s=1000.0)) == 5
    assert arrival_times(spec, random.Random(0), count=10**6, duration_s=10.0)[-1] <= 10.0


def test_arrival_times_need_a_bound() -> None:
    with pytest.raises(ValueError, match="count"):
        arrival_times(ArrivalSpec(), random.Random(0))


def _count_between(times: list[float], lo: float, hi: float) -> int:
    return sum(1 for t in times if lo <= t < hi)


def test_ramp_rate_rises_linearly() -> None:
    spec = ArrivalSpec(kind="ramp", rate_from=10.0, rate_to=90.0, ramp_s=100.0)
    times = arrival_times(spec, random.Random(2), duration_s=100.0)
    assert len(times) == pytest.approx(5000, rel=0.05)  # mean rate 50 over 100 s
    assert _count_between(times, 0, 10) == pytest.approx(140, rel=0.25)  # ∫ 10..18
    assert _count_between(times, 90, 100) == pytest.approx(860, rel=0.1)  # ∫ 82..90
    assert expected_duration(spec, 5000) == pytest.approx(100.0)


def test_ramp_from_zero() -> None:
    spec = ArrivalSpec(kind="ramp", rate_from=0.0, rate_to=20.0, ramp_s=100.0)
    times = arrival_times(spec, random.Random(2), duration_s=100.0)
    assert len(times) == pytest.approx(1000, rel=0.1)
    assert _count_between(times, 0, 50) < _count_between(times, 50, 100) / 2


def test_steps_follow_the_profile_and_hold_the_last() -> None:
    steps = (
        RateStep(duration_s=50, rate=10),
        RateStep(duration_s=50, rate=0),
        RateStep(duration_s=50, rate=40),
    )
    times = arrival_times(ArrivalSpec(kind="steps", steps=steps), random.Random(4), duration_s=200)
    assert _count_between(times, 0, 50) == pytest.approx(500, rel=0.15)
    assert _count_between(times, 50, 100) == 0
    assert _count_between(times, 100, 200) == pytest.approx(4000, rel=0.07)


def test_diurnal_peaks_and_troughs() -> None:
    spec = ArrivalSpec(kind="diurnal", rate=20.0, amplitude=0.8, period_s=400.0)
    times = arrival_times(spec, random.Random(5), duration_s=4000.0)
    assert len(times) / 4000.0 == pytest.approx(20.0, rel=0.05)
    phase = Counter(int((t % 400.0) // 100.0) for t in times)
    # Quarter 0-1 holds the crest (sin > 0), quarters 2-3 the trough.
    assert phase[0] + phase[1] > 3 * (phase[2] + phase[3]) * 0.9


def test_bursts_multiply_the_rate_inside_bursts() -> None:
    spec = ArrivalSpec(kind="bursts", rate=5.0, burst_factor=8.0, burst_s=10.0, burst_every_s=50.0)
    times = arrival_times(spec, random.Random(6), duration_s=5000.0)
    inside = sum(1 for t in times if t % 50.0 < 10.0)
    outside = len(times) - inside
    assert inside / (100 * 10) == pytest.approx(40.0, rel=0.07)
    assert outside / (100 * 40) == pytest.approx(5.0, rel=0.07)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "nope"},
        {"cv": 0.0},
        {"rate": 0.0},
        {"kind": "ramp", "rate_to": 0.0},
        {"kind": "steps"},
        {"kind": "steps", "steps": (RateStep(duration_s=1, rate=0),)},
        {"kind": "diurnal", "amplitude": 1.0},
        {"kind": "bursts", "burst_s": 60.0, "burst_every_s": 60.0},
    ],
)
def test_bad_arrival_specs_raise(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - one message per rule, all ValueError
        ArrivalSpec(**kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------ lengths
def test_lognormal_mean_matches() -> None:
    dist = LogNormal(mean=1000, sigma=0.8)
    rng = random.Random(0)
    xs = [dist.sample(rng) for _ in range(40_000)]
    assert statistics.fmean(xs) == pytest.approx(1000, rel=0.03)
    assert statistics.median(xs) == pytest.approx(1000 * math.exp(-0.32), rel=0.05)


def test_other_length_distributions() -> None:
    rng = random.Random(0)
    assert {Fixed(value=7).sample(rng) for _ in range(10)} == {7}
    assert LogNormal(mean=300, sigma=0).sample(rng) == 300
    lu = [LogUniform(low=32, high=1024).sample(rng) for _ in range(5000)]
    assert min(lu) >= 32
    assert max(lu) <= 1024
    assert sum(1 for x in lu if x < 181) == pytest.approx(2500, rel=0.1)  # √(32·1024) = 181
    ui = {UniformInt(low=16, high=20).sample(rng) for _ in range(500)}
    assert ui == {16, 17, 18, 19, 20}
    assert {Empirical(values=(3, 9)).sample(rng) for _ in range(100)} == {3, 9}


def test_empirical_from_text_and_file(tmp_path: Path) -> None:
    assert empirical_from_text("10, 20,30").values == (10, 20, 30)
    with pytest.raises(ValueError, match="integers"):
        empirical_from_text("10,x")
    path = tmp_path / "t.parquet"
    write_synth(_config(requests=30), path)
    emp = empirical_from_file(path, "output_tokens")
    assert sorted(emp.values) == sorted(pq.read_table(path).column("output_tokens").to_pylist())


# ------------------------------------------------------------------ classes
def test_mix_proportions_and_class_shapes() -> None:
    table = synthesize(
        _config(requests=5000, mix=parse_mix("text=0.7,long_context=0.1,image=0.2"))
    ).table
    rows = table.to_pylist()
    counts = Counter(r[s.WORKLOAD] for r in rows)
    assert counts["text"] == pytest.approx(3500, rel=0.05)
    assert counts["long_context"] == pytest.approx(500, rel=0.15)
    assert counts["image"] == pytest.approx(1000, rel=0.1)
    for r in rows:
        if r[s.WORKLOAD] == "long_context":
            assert 32_768 <= r[s.INPUT_TOKENS] <= 1_048_576
            assert 16 <= r[s.OUTPUT_TOKENS] <= 128
        if r[s.WORKLOAD] == "image":
            assert 1 <= len(r[s.IMAGES]) <= 2
            assert r[s.IMAGE_TOKENS] == sum(
                image_tokens("qwen2.5-vl", im["width"], im["height"]) for im in r[s.IMAGES]
            )
        else:
            assert r[s.IMAGES] is None
            assert r[s.IMAGE_TOKENS] is None


def test_image_model_and_resolutions() -> None:
    cls = image_class(images_max=5, resolutions=(Resolution(width=448, height=448),))
    table = synthesize(
        _config(
            requests=200,
            classes=(cls,),
            mix=(ClassShare(name="image", weight=1),),
            image_model="internvl2.5",
        )
    ).table
    n_images = [len(x) for x in table.column(s.IMAGES).to_pylist()]
    assert set(n_images) == {1, 2, 3, 4, 5}
    tokens = table.column(s.IMAGE_TOKENS).to_pylist()
    assert tokens == [256 * n for n in n_images]


def test_parse_mix_and_class_values() -> None:
    assert parse_mix("text=1,image=3") == (
        ClassShare(name="text", weight=1.0),
        ClassShare(name="image", weight=3.0),
    )
    for bad in ("video=1", "text", "text=x", "text=0", "text=1,text=2", "text=-1"):
        with pytest.raises(ValueError):  # noqa: PT011
            parse_mix(bad)
    values = parse_class_values("500,long_context=30000")
    assert [(v.workload, v.value) for v in values] == [(None, 500.0), ("long_context", 30000.0)]
    for bad in ("x", "video=5", "0", "text=-3"):
        with pytest.raises(ValueError):  # noqa: PT011
            parse_class_values(bad)


def test_slo_columns_per_class() -> None:
    table = synthesize(
        _config(
            requests=500,
            mix=parse_mix("text=1,long_context=1"),
            slo_ttft_ms=parse_class_values("400,long_context=20000"),
            slo_tpot_ms=parse_class_values("text=50"),
        )
    ).table
    for r in table.to_pylist():
        if r[s.WORKLOAD] == "text":
            assert (r[s.SLO_TTFT_MS], r[s.SLO_TPOT_MS]) == (400.0, 50.0)
        else:
            assert (r[s.SLO_TTFT_MS], r[s.SLO_TPOT_MS]) == (20000.0, None)


@pytest.mark.parametrize(
    ("api", "expected"), [("chat", {"chat"}), ("completions", {"completions"})]
)
def test_api_choice(api: str, expected: set[str]) -> None:
    table = synthesize(_config(requests=100, api=api)).table
    assert set(table.column(s.API).to_pylist()) == expected


def test_api_mixed_is_about_half() -> None:
    apis = Counter(synthesize(_config(requests=4000, api="mixed")).table.column(s.API).to_pylist())
    assert apis["chat"] == pytest.approx(2000, rel=0.06)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"requests": None},
        {"requests": 0},
        {"duration_s": -1.0},
        {"block_size": 0},
        {"mix": (ClassShare(name="video", weight=1),)},
        {"mix": (ClassShare(name="text", weight=0),)},
    ],
)
def test_bad_configs_raise(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        _config(**kwargs)


# ------------------------------------------------------------------ prefixes
def test_prefix_blocks_cover_the_prompt_and_tails_are_fresh() -> None:
    bs = 512
    table = synthesize(_config(requests=3000, prefix=PrefixSpec(groups=5, tokens=1000))).table
    rows = table.to_pylist()
    owners: dict[int, set[str]] = {}
    for r in rows:
        blocks = r[s.PREFIX_BLOCKS]
        assert len(blocks) == math.ceil(r[s.INPUT_TOKENS] / bs)
        assert r[s.INPUT_TOKENS] > 1024  # 1000 rounds up to two whole blocks, plus its own
        for b in blocks[2:]:
            owners.setdefault(b, set()).add(r[s.REQUEST_ID])
    assert all(len(who) == 1 for who in owners.values())
    groups = Counter(tuple(r[s.PREFIX_BLOCKS][:2]) for r in rows)
    assert len(groups) == 5
    ranked = [n for _, n in groups.most_common()]
    # Zipf s=1.1 over 5 groups: rank 1 takes 1/H ≈ 46%.
    harmonic = sum(r**-1.1 for r in range(1, 6))
    assert ranked[0] / 3000 == pytest.approx(1 / harmonic, abs=0.035)
    assert ranked[0] > ranked[1] > ranked[-1]


def test_prefix_fraction_and_zipf_zero() -> None:
    table = synthesize(
        _config(requests=3000, prefix=PrefixSpec(groups=3, tokens=512, zipf_s=0.0, fraction=0.5))
    ).table
    firsts = Counter(b[0] for b in table.column(s.PREFIX_BLOCKS).to_pylist())
    shared = {k: v for k, v in firsts.items() if k < 3}
    assert sum(shared.values()) == pytest.approx(1500, rel=0.07)
    assert all(v == pytest.approx(500, rel=0.15) for v in shared.values())


# ------------------------------------------------------------------ sessions
def test_sessions_grow_their_prefix_turn_by_turn() -> None:
    table = synthesize(
        _config(
            requests=3000,
            sessions=SessionSpec(turns_mean=4.0, think_mean_s=5.0),
            prefix=PrefixSpec(groups=2, tokens=512),
            arrival=ArrivalSpec(rate=10.0),
        )
    ).table
    rows = table.to_pylist()
    assert len(rows) == 3000
    arrivals = [r[s.ARRIVAL_S] for r in rows]
    assert arrivals == sorted(arrivals)
    assert len(rows) / arrivals[-1] == pytest.approx(10.0, rel=0.15)
    by_session: dict[str, list[dict[str, object]]] = {}
    for r in rows:
        by_session.setdefault(r[s.SESSION_ID], []).append(r)
    turns = [len(v) for v in by_session.values()]
    assert statistics.fmean(turns) == pytest.approx(4.0, rel=0.2)
    for session in by_session.values():
        session.sort(key=lambda r: r[s.TURN])  # type: ignore[arg-type, return-value]
        assert [r[s.TURN] for r in session] == list(range(1, len(session) + 1))
        for prev, cur in itertools.pairwise(session):
            pb, cb = prev[s.PREFIX_BLOCKS], cur[s.PREFIX_BLOCKS]
            assert isinstance(pb, list)
            assert isinstance(cb, list)
            assert cb[: len(pb)] == pb
            assert cur[s.INPUT_TOKENS] > prev[s.INPUT_TOKENS] + prev[s.OUTPUT_TOKENS]  # type: ignore[operator]
            assert cur[s.ARRIVAL_S] >= prev[s.ARRIVAL_S]  # type: ignore[operator]
            assert cur[s.WORKLOAD] == prev[s.WORKLOAD]


def test_sessions_with_duration_and_single_turns() -> None:
    table = synthesize(
        _config(
            requests=None,
            duration_s=100.0,
            sessions=SessionSpec(turns_mean=1.0, think_mean_s=0.0),
            arrival=ArrivalSpec(rate=5.0),
        )
    ).table
    assert max(table.column(s.ARRIVAL_S).to_pylist()) <= 100.0
    assert set(table.column(s.TURN).to_pylist()) == {1}
    ids = table.column(s.SESSION_ID).to_pylist()
    assert len(set(ids)) == len(ids)


def test_no_arrival_within_duration_raises() -> None:
    with pytest.raises(ValueError, match="no request"):
        synthesize(_config(requests=None, duration_s=0.001, arrival=ArrivalSpec(rate=0.001)))


def test_hundred_thousand_requests() -> None:
    # Scale, not speed: the synthesizer's time is measured by bench/prompts.py.
    table = synthesize(
        SynthConfig(requests=100_000, seed=1, prefix=PrefixSpec(groups=8, tokens=2048))
    ).table
    assert table.num_rows == 100_000
