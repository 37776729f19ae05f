"""Calibration: fit the prefill efficiency and ``prefill(n) = a + b n + c n^2`` to measurements.

Input: measured (prompt tokens, prefill seconds) pairs, from an idle probe sweep or a
run's low-load requests. Output: the achieved FLOP/s and its fraction of the peak, and a
deployment with the fitted efficiency. Least squares in pure Python (normal equations,
Gaussian elimination). This module must not import ``loadgen``, httpx or polars.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from analyzers.budget.prefill import prefill_costs
from analyzers.budget.specs import Deployment, ModelSpec
from analyzers.errors import BudgetError


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillSample:
    """One measured prefill: ``prompt_tokens`` uncached tokens took ``prefill_s`` seconds."""

    prompt_tokens: int
    prefill_s: float
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """The fits. ``efficiency`` from the through-origin fit of measured against ideal time;
    ``a_s + b_s_per_token n + c_s_per_token2 n^2`` from the quadratic fit (None when fewer
    than three distinct lengths). Achieved FLOP/s and fraction of peak follow from
    ``efficiency``."""

    samples: int
    efficiency: float
    achieved_flops_per_s: float
    peak_flops_per_s: float
    a_s: float | None
    b_s_per_token: float | None
    c_s_per_token2: float | None

    @property
    def fraction_of_peak(self) -> float:
        """Achieved over peak FLOP/s (equal to ``efficiency``)."""
        return self.achieved_flops_per_s / self.peak_flops_per_s


def solve_linear(matrix: Sequence[Sequence[float]], rhs: Sequence[float]) -> list[float]:
    """Solve ``A x = y`` by Gaussian elimination with partial pivoting."""
    n = len(rhs)
    a = [[*list(map(float, row)), float(y)] for row, y in zip(matrix, rhs, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-300:
            raise BudgetError("calibration: the measurements do not determine the fit")
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            f = a[r][col] / a[col][col]
            for k in range(col, n + 1):
                a[r][k] -= f * a[col][k]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (a[r][n] - sum(a[r][k] * x[k] for k in range(r + 1, n))) / a[r][r]
    return x


def fit_polynomial(xs: Sequence[float], ys: Sequence[float], degree: int = 2) -> list[float]:
    """Least-squares coefficients ``[c0, c1, ..., c_degree]`` of ``y = sum c_k x^k``.

    ``x`` is scaled by its largest value before forming the normal equations, so that
    token counts in the hundred thousands do not ruin the conditioning.
    """
    if len(xs) != len(ys) or len(set(xs)) <= degree:
        raise BudgetError(f"calibration: need at least {degree + 1} distinct prompt lengths")
    scale = max(abs(x) for x in xs) or 1.0
    us = [x / scale for x in xs]
    m = degree + 1
    ata = [[sum(u ** (i + j) for u in us) for j in range(m)] for i in range(m)]
    aty = [sum(y * u**i for u, y in zip(us, ys, strict=True)) for i in range(m)]
    coeffs = solve_linear(ata, aty)
    return [c / scale**k for k, c in enumerate(coeffs)]


def calibrate_prefill(
    model: ModelSpec, deploy: Deployment, samples: Sequence[PrefillSample]
) -> Calibration:
    """Fit the prefill efficiency (and the quadratic) to measured prefill times.

    With ``x_i`` the ideal time at 100% of peak (all prefill FLOPs / (tp x peak)) and
    ``t_i`` the measured one, ``t = x / eff`` by least squares through the origin:
    ``1/eff = sum(x t) / sum(x^2)``. Achieved FLOP/s = ``eff x tp x peak``.
    """
    if not samples:
        raise BudgetError("calibration: no measurements")
    if any(s.prompt_tokens <= 0 or s.prefill_s <= 0 for s in samples):
        raise BudgetError("calibration: prompt tokens and times must be positive")
    ideal = deploy.ideal()
    xs = [
        sum(c.compute_s for c in prefill_costs(model, ideal, s.prompt_tokens, s.cached_tokens))
        for s in samples
    ]
    ts = [s.prefill_s for s in samples]
    inv_eff = sum(x * t for x, t in zip(xs, ts, strict=True)) / sum(x * x for x in xs)
    peak = deploy.tensor_parallel * deploy.hardware.peak_flops(model.weight_dtype)
    efficiency = 1 / inv_eff
    a = b = c = None
    if len({s.prompt_tokens for s in samples}) >= 3:
        a, b, c = fit_polynomial([float(s.prompt_tokens) for s in samples], ts)
    return Calibration(
        samples=len(samples),
        efficiency=efficiency,
        achieved_flops_per_s=efficiency * peak,
        peak_flops_per_s=peak,
        a_s=a,
        b_s_per_token=b,
        c_s_per_token2=c,
    )


def calibrated(deploy: Deployment, calibration: Calibration) -> Deployment:
    """``deploy`` with the fitted prefill efficiency (capped at 1)."""
    return replace(deploy, prefill_efficiency=min(1.0, calibration.efficiency))
