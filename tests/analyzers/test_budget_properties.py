"""Property tests: monotonic where it must be, linear where it must be, never negative."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.budget import catalog
from analyzers.budget.decode import decode_step_time_s, tpot_s
from analyzers.budget.engine.step import (
    EXACT_SUMS,
    SequenceWork,
    StepClock,
    attention_flops,
    linear_flops,
    step_cost,
    step_time_s,
)
from analyzers.budget.kv import (
    kv_bytes,
    kv_capacity_tokens,
    kv_transfer_time_s,
    max_concurrent_requests,
)
from analyzers.budget.prefill import prefill_time_s
from analyzers.budget.profile import PhaseProfile, StepProfile
from analyzers.budget.queueing import max_utilisation, mdc_wait_s, mg1_wait_s
from analyzers.budget.specs import Deployment, ModelSpec

CAT = catalog.default_catalog()
MODELS = st.sampled_from(CAT.model_names()).map(CAT.model)
GPUS = st.sampled_from(CAT.gpu_names()).map(CAT.gpu)
TOKENS = st.integers(min_value=1, max_value=200_000)
EFF = st.floats(min_value=0.05, max_value=1.0)


@st.composite
def deployments(draw: st.DrawFn) -> Deployment:
    return Deployment(
        hardware=draw(GPUS),
        tensor_parallel=draw(st.sampled_from([1, 2, 4, 8])),
        pipeline_parallel=draw(st.sampled_from([1, 2])),
        prefill_efficiency=draw(EFF),
        decode_efficiency=draw(EFF),
        step_overhead_s=draw(st.floats(min_value=0, max_value=0.01)),
        memory_fraction=draw(st.floats(min_value=0.1, max_value=1.0)),
    )


@given(MODELS, deployments(), TOKENS, TOKENS, st.integers(min_value=0, max_value=50_000))
def test_prefill_is_monotonic_in_prompt_length(m, d, a, b, cached) -> None:  # type: ignore[no-untyped-def]
    lo, hi = sorted((a, b))
    assert 0 < prefill_time_s(m, d, lo, cached) <= prefill_time_s(m, d, hi, cached)


@given(MODELS, deployments(), TOKENS, st.sampled_from([256, 512, 2048]))
def test_chunking_never_makes_prefill_faster(m, d, n, k) -> None:  # type: ignore[no-untyped-def]
    assert prefill_time_s(m, d, n, chunk_tokens=k) >= prefill_time_s(m, d, n) * (1 - 1e-9)


@given(MODELS, deployments(), st.integers(1, 512), st.integers(1, 512), st.integers(0, 100_000))
def test_decode_is_monotonic_in_batch_and_context(m, d, b1, b2, ctx) -> None:  # type: ignore[no-untyped-def]
    lo, hi = sorted((b1, b2))
    assert tpot_s(m, d, lo, ctx) <= tpot_s(m, d, hi, ctx)
    assert tpot_s(m, d, lo, ctx) <= tpot_s(m, d, lo, ctx + 1000)
    assert decode_step_time_s(m, d, [ctx] * lo) == pytest.approx(tpot_s(m, d, lo, ctx))


@given(MODELS, TOKENS, TOKENS)
def test_linear_terms_are_linear(m, a, b) -> None:  # type: ignore[no-untyped-def]
    assert linear_flops(m, a + b) == pytest.approx(linear_flops(m, a) + linear_flops(m, b))
    if m.attention == "sliding":  # local layers cap at the window: sub-linear
        assert kv_bytes(m, a + b) <= kv_bytes(m, a) + kv_bytes(m, b)
        return
    assert kv_bytes(m, a + b) == pytest.approx(kv_bytes(m, a) + kv_bytes(m, b))
    assert kv_transfer_time_s(m, a + b, 50e9) == pytest.approx(
        kv_transfer_time_s(m, a, 50e9) + kv_transfer_time_s(m, b, 50e9)
    )


@given(MODELS, TOKENS)
def test_fp8_kv_is_exactly_half_of_bf16(m, n) -> None:  # type: ignore[no-untyped-def]
    assert kv_bytes(replace(m, kv_dtype="fp8"), n) == pytest.approx(kv_bytes(m, n) / 2)


@given(MODELS, deployments(), TOKENS)
def test_capacity_is_never_negative_and_consistent(m, d, seq) -> None:  # type: ignore[no-untyped-def]
    cap = kv_capacity_tokens(m, d)
    conc = max_concurrent_requests(m, d, seq)
    assert cap >= 0
    assert conc >= 0
    if m.attention != "sliding":
        assert conc * seq <= cap + seq  # floor of a quotient of the same budget


@given(MODELS, deployments(), TOKENS)
def test_units_scale_with_hardware(m, d, n) -> None:  # type: ignore[no-untyped-def]
    """Doubling every peak at zero overhead halves each time (seconds = work / rate)."""
    d0 = replace(d, step_overhead_s=0.0)
    hw2 = replace(
        d.hardware,
        peak_flops_bf16=2 * d.hardware.peak_flops_bf16,
        peak_flops_fp8=None if d.hardware.peak_flops_fp8 is None else 2 * d.hardware.peak_flops_fp8,
        hbm_bandwidth_bytes_per_s=2 * d.hardware.hbm_bandwidth_bytes_per_s,
    )
    d2 = replace(d0, hardware=hw2)
    assert prefill_time_s(m, d2, n) == pytest.approx(prefill_time_s(m, d0, n) / 2)
    assert tpot_s(m, d2, 8, n) == pytest.approx(tpot_s(m, d0, 8, n) / 2)


@settings(max_examples=200)
@given(st.floats(0, 0.99), st.floats(0, 0.99), st.floats(1e-4, 10), st.integers(1, 64))
def test_queueing_waits_grow_with_utilisation(r1, r2, s, c) -> None:  # type: ignore[no-untyped-def]
    lo, hi = sorted((r1, r2))
    assert 0 <= mg1_wait_s(lo, s) <= mg1_wait_s(hi, s)
    assert 0 <= mdc_wait_s(lo, s, c) <= mdc_wait_s(hi, s, c) * (1 + 1e-9) + 1e-15
    assert mdc_wait_s(hi, s, c) <= mdc_wait_s(hi, s, 1) * (1 + 1e-9)


@given(st.floats(1e-3, 1.0), st.floats(0, 5.0))
def test_max_utilisation_is_a_fraction(s, extra) -> None:  # type: ignore[no-untyped-def]
    rho = max_utilisation(s, s + extra)
    assert 0 <= rho < 1


@settings(max_examples=60, deadline=None)
@given(
    MODELS,
    st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 200_000)), min_size=1, max_size=40),
)
def test_step_cost_sums_match_the_per_sequence_formulas(
    model: ModelSpec, seqs: list[tuple[int, int]]
) -> None:
    # step_cost sums a batch in one pass (sliding-window models per sequence).
    work = [SequenceWork(new_tokens=n, cached_tokens=c) for n, c in seqs]
    cost = step_cost(model, Deployment(hardware=CAT.gpu("h100")), work)
    attention = sum(attention_flops(model, n, c) for n, c in seqs)
    kv = sum(kv_bytes(model, n + c) for n, c in seqs)
    assert cost.attention_flops == pytest.approx(attention, rel=1e-12, abs=1e-6)
    assert cost.kv_bytes == pytest.approx(kv, rel=1e-12, abs=1e-6)


@settings(max_examples=200, deadline=None)
@given(
    MODELS,
    deployments(),
    # Decode-sized shares as often as prefill-sized ones: memory-bound steps are where a
    # term that shrank with more work would show.
    st.lists(
        st.tuples(st.integers(0, 8) | st.integers(0, 4000), st.integers(0, 100_000)),
        min_size=1,
        max_size=20,
    ),
    st.integers(0, 19),
    st.integers(1, 8) | st.integers(1, 4000),
    st.integers(1, 100_000),
)
def test_a_step_with_more_work_is_never_faster(
    model: ModelSpec,
    deploy: Deployment,
    seqs: list[tuple[int, int]],
    which: int,
    more_new: int,
    more_cached: int,
) -> None:
    # The soundness the load replay rests on: more new tokens, a longer context or one
    # more sequence in a step never shorten it. (A prompt can still finish sooner under
    # load when its chunk boundaries move: see test_budget_timeline's hideable_s.)
    work = [SequenceWork(new_tokens=n, cached_tokens=c) for n, c in seqs]
    base = step_time_s(model, deploy, work)
    i = which % len(work)
    w = work[i]
    heavier = [
        replace(w, new_tokens=w.new_tokens + more_new),
        replace(w, cached_tokens=w.cached_tokens + more_cached),
    ]
    for bigger in heavier:
        assert step_time_s(model, deploy, [*work[:i], bigger, *work[i + 1 :]]) >= base * (1 - 1e-12)
    extra = SequenceWork(new_tokens=more_new, cached_tokens=more_cached)
    assert step_time_s(model, deploy, [*work, extra]) >= base * (1 - 1e-12)


@settings(max_examples=150, deadline=None)
@given(
    MODELS,
    deployments(),
    st.booleans(),
    st.lists(
        st.tuples(st.integers(0, 2) | st.integers(0, 4000), st.integers(0, 1_000_000)),
        min_size=1,
        max_size=40,
    ),
)
def test_the_step_clock_from_sums_is_step_time_s_bit_for_bit(
    model: ModelSpec,
    deploy: Deployment,
    profiled: bool,
    seqs: list[tuple[int, int]],
) -> None:
    # The scheduler times steps from integer sums (no per-sequence objects): the engine's
    # outputs stay byte-identical only if that is the very same float as step_time_s.
    if profiled:
        phase = PhaseProfile(
            compute_efficiency=0.55, layer_overhead_s=2e-5, sequence_overhead_s=1e-5
        )
        deploy = replace(deploy, profile=StepProfile(name="p", gpu="x", prefill=phase))
    clock = StepClock(model, deploy)
    twice = sum(n * (2 * c + n) for n, c in seqs)
    if not clock.sums or twice >= EXACT_SUMS:
        return
    work = [SequenceWork(new_tokens=n, cached_tokens=c) for n, c in seqs]
    fast = clock.from_sums(
        sum(n for n, _ in seqs),
        twice,
        sum(n + c for n, c in seqs),
        sum(1 for n, c in seqs if n == 1 and c > 0),
        sum(1 for n, _ in seqs if n > 0),
    )
    assert fast == step_time_s(model, deploy, work) == clock(work)
