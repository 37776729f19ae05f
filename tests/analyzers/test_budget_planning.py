"""Queueing, claims, calibration and disaggregation: hand-computed cases."""

from __future__ import annotations

from dataclasses import replace

import pytest

from analyzers.budget import catalog
from analyzers.budget.calibrate import (
    PrefillSample,
    calibrate_prefill,
    calibrated,
    fit_polynomial,
)
from analyzers.budget.claims import check_claim
from analyzers.budget.disagg import disagg_break_even, pool_ratio
from analyzers.budget.prefill import prefill_time_s
from analyzers.budget.queueing import erlang_c, max_utilisation, mdc_wait_s, mg1_wait_s
from analyzers.budget.specs import Deployment
from analyzers.errors import BudgetError

L70 = catalog.model("llama-3.3-70b")
L8 = catalog.model("llama-3.1-8b")
H100 = catalog.gpu("h100")
H200 = catalog.gpu("h200")


def test_mg1_and_md1() -> None:
    assert mg1_wait_s(0.5, 1.0) == pytest.approx(0.5)  # 0.5 x 1 / (2 x 0.5)
    assert mg1_wait_s(0.5, 1.0, 1.0) == pytest.approx(1.0)  # M/M/1: rho S / (1 - rho)
    assert mdc_wait_s(0.5, 1.0, 1) == pytest.approx(mg1_wait_s(0.5, 1.0))
    with pytest.raises(BudgetError):
        mg1_wait_s(1.0, 1.0)


def test_erlang_c_known_values() -> None:
    assert erlang_c(1, 0.7) == pytest.approx(0.7)
    # M/M/2 at rho 0.5 (a = 1): C = 1/3
    assert erlang_c(2, 0.5) == pytest.approx(1 / 3)
    assert 0 < erlang_c(500, 0.9) < 1  # no overflow


def test_max_utilisation_inverts_the_wait() -> None:
    rho = max_utilisation(0.1, 0.2)  # w = 0.1: rho = 0.2 / (0.1 + 0.2)
    assert rho == pytest.approx(2 / 3)
    assert 0.1 + mg1_wait_s(rho, 0.1) == pytest.approx(0.2)
    assert max_utilisation(0.3, 0.2) == 0.0
    rho4 = max_utilisation(0.1, 0.2, servers=4)
    assert rho4 > rho
    assert 0.1 + mdc_wait_s(rho4, 0.1, 4) == pytest.approx(0.2, rel=1e-6)


def test_claim_above_the_compute_peak_is_rejected_with_the_bound() -> None:
    deploy = Deployment(hardware=H100)
    bound = 989.4e12 / (2 * 70.55e9)  # 7,012 tokens/s
    verdict = check_claim(L70, deploy, 1.01 * bound, phase="input")
    assert not verdict.possible
    assert verdict.compute_bound_tokens_per_s == pytest.approx(bound)
    assert "compute bound" in verdict.reasons[0]
    assert any("memory" in r for r in verdict.reasons)  # 141 GB does not fit in 80 GB


def test_routine_claims_pass() -> None:
    eight = check_claim(L8, Deployment(hardware=H100), 5000, context_len=1024)
    assert eight.possible
    assert eight.bandwidth_bound_tokens_per_s is not None
    assert eight.bandwidth_bound_tokens_per_s > 5000
    inputs = check_claim(
        replace(L70, weight_dtype="fp8"), Deployment(hardware=H200), 10_000, phase="input"
    )
    assert inputs.possible


def test_claim_above_the_bandwidth_bound_is_rejected() -> None:
    verdict = check_claim(L8, Deployment(hardware=H100), 5000, batch=1)
    assert not verdict.possible
    assert "bandwidth" in verdict.reasons[0]
    assert verdict.bandwidth_bound_tokens_per_s == pytest.approx(
        3.35e12 / (16.06e9 + 1024 * 131_072), rel=1e-6
    )


def test_polynomial_fit_recovers_coefficients() -> None:
    xs = [500.0, 1000.0, 2000.0, 4000.0, 8000.0]
    ys = [0.01 + 2e-4 * x + 3e-9 * x * x for x in xs]
    a, b, c = fit_polynomial(xs, ys)
    assert (a, b, c) == pytest.approx((0.01, 2e-4, 3e-9), rel=1e-6)
    with pytest.raises(BudgetError, match="distinct"):
        fit_polynomial([1.0, 1.0, 2.0], [1.0, 1.0, 2.0])


def test_calibration_recovers_the_efficiency() -> None:
    m = replace(L70, weight_dtype="fp8")
    truth = Deployment(hardware=H200, prefill_efficiency=0.45, decode_efficiency=1.0)
    samples = [
        PrefillSample(prompt_tokens=n, prefill_s=prefill_time_s(m, truth, n))
        for n in (1000, 2000, 4000, 8000)
    ]
    cal = calibrate_prefill(m, Deployment(hardware=H200), samples)
    assert cal.efficiency == pytest.approx(0.45, rel=1e-6)
    assert cal.fraction_of_peak == pytest.approx(0.45, rel=1e-6)
    assert cal.achieved_flops_per_s == pytest.approx(0.45 * 1979e12, rel=1e-6)
    assert cal.b_s_per_token == pytest.approx(2 * 70.55e9 / (0.45 * 1979e12), rel=0.02)
    assert calibrated(Deployment(hardware=H200), cal).prefill_efficiency == pytest.approx(0.45)
    with pytest.raises(BudgetError):
        calibrate_prefill(m, truth, [])


def test_pool_ratio_by_hand() -> None:
    deploy = Deployment(hardware=H100, tensor_parallel=8)
    ratio = pool_ratio(L70, deploy, [2000, 4000], [100, 300], decode_batch=64)
    p = (prefill_time_s(L70, deploy, 2000) + prefill_time_s(L70, deploy, 4000)) / 2
    assert ratio.prefill_s_per_request == pytest.approx(p)
    assert ratio.mean_output_tokens == 200
    longer = pool_ratio(L70, deploy, [2000, 4000], [1000, 3000], decode_batch=64)
    assert longer.prefill_per_decode < ratio.prefill_per_decode  # more output, more decode


def test_disaggregation_wins_under_a_tight_tpot_with_long_prompts() -> None:
    deploy = Deployment(hardware=H100, tensor_parallel=8)
    be = disagg_break_even(
        L70, deploy, replicas=8, prompt_tokens=2000, output_tokens=300,
        slo_ttft_s=2.0, slo_tpot_s=0.05, link=catalog.link("400g"),
    )  # fmt: skip
    assert be.prefill_replicas + be.decode_replicas == 8
    assert be.monolith_max_rate_per_s > 0
    assert be.break_even_rate_per_s == be.monolith_max_rate_per_s
    assert be.disagg_max_rate_per_s > be.monolith_max_rate_per_s
    with pytest.raises(BudgetError):
        disagg_break_even(
            L70, deploy, replicas=1, prompt_tokens=1, output_tokens=1,
            slo_ttft_s=1, slo_tpot_s=1, link=1e9,
        )  # fmt: skip
