"""Calibration: fit the prefill efficiency and ``prefill(n) = a + b n + c n^2`` to measurements;
fit a GPU type's ``StepProfile`` (the free parameters of ``engine.terms``) to measured
prefill and decode steps (``fit_profile``).

Input: measured (prompt tokens, prefill seconds) pairs, from an idle probe sweep or a
run's low-load requests. Output: the achieved FLOP/s and its fraction of the peak, and a
deployment with the fitted efficiency. Least squares in pure Python (normal equations,
Gaussian elimination). This module must not import ``loadgen``, httpx or polars.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from analyzers.budget.engine.step import SequenceWork, step_cost
from analyzers.budget.engine.terms import StepTerms, step_terms
from analyzers.budget.measurements import Observation
from analyzers.budget.prefill import prefill_costs
from analyzers.budget.profile import PhaseProfile, StepProfile
from analyzers.budget.specs import Deployment, HardwareSpec, ModelSpec
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


# --- Step-time profiles: fit the free parameters of ``engine.terms`` per GPU type ---------

# Efficiencies are fitted as their inverse (a time multiplier >= 1), the rest as >= 0.
_LOWER: tuple[float, ...] = (1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0)
_MAX_ROUNDS = 20
_RIDGE = 1e-9
# Starting points of the alternation: typical efficiencies, and per-layer launch times
# from none to 1 ms (the fit keeps the start with the least squared relative error).
_START: tuple[float, ...] = (1 / 0.6, 1 / 0.8, 1 / 0.3, 0.0, 0.0, 0.0, 0.0)
_LAUNCH_STARTS: tuple[float, ...] = (0.0, 1e-4, 2e-4, 3e-4, 5e-4, 7e-4, 1e-3)


@dataclass(frozen=True, slots=True, kw_only=True)
class Residual:
    """One measured point against the fitted profile; ``held_out`` points were not fitted."""

    observation: Observation
    predicted_s: float
    held_out: bool

    @property
    def ratio(self) -> float:
        """Predicted over measured."""
        return self.predicted_s / self.observation.seconds

    @property
    def abs_error(self) -> float:
        """``|predicted / measured - 1|``."""
        return abs(self.ratio - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileFit:
    """A fitted profile and every point's residual (fitted and held out)."""

    profile: StepProfile
    residuals: tuple[Residual, ...]

    def select(
        self,
        *,
        phase: str,
        held_out: bool | None = None,
        batched: bool | None = None,
        mixed: bool | None = None,
    ) -> list[Residual]:
        """The residuals of one phase, optionally only held-out/fitted, batch 1/batched,
        alone/beside decoding sequences (``mixed``)."""
        return [
            r
            for r in self.residuals
            if r.observation.phase == phase
            and (held_out is None or r.held_out == held_out)
            and (batched is None or (r.observation.batch > 1) == batched)
            and (mixed is None or (r.observation.decoding > 0) == mixed)
        ]


def observation_terms(model: ModelSpec, hardware: HardwareSpec, obs: Observation) -> StepTerms:
    """The ``StepTerms`` of the step ``obs`` measured (its FLOPs and bytes as ``step_cost``)."""
    deploy = Deployment(hardware=hardware, tensor_parallel=obs.tensor_parallel)
    work = [SequenceWork(new_tokens=obs.new_tokens, cached_tokens=obs.cached_tokens)] * obs.batch
    # A mixed step's decoding sequences: one token each, their contexts unknown (their
    # attention is negligible beside the prefill's).
    work += [SequenceWork(new_tokens=1)] * obs.decoding
    cost = step_cost(model, deploy, work)
    decode = obs.phase == "decode"
    return step_terms(
        model,
        hardware,
        tensor_parallel=obs.tensor_parallel,
        flops=cost.flops,
        bytes_read=cost.bytes,
        tokens=obs.new_tokens * obs.batch + obs.decoding,
        prefills=0 if decode else 1,
        decode_sequences=obs.batch if decode else obs.decoding,
    )


def _features(t: StepTerms, side: int) -> list[float]:
    """The row of ``t`` on its side of the two maxima: 0 compute-, 1 memory-, 2 launch-bound."""
    gpu = side != 2
    return [
        t.compute_s if side == 0 else 0.0,
        t.memory_s if side == 1 else 0.0,
        t.payload_s if gpu else 0.0,
        t.hops if gpu else 0.0,
        0.0 if gpu else float(t.layers),
        1.0,
        float(t.decode_sequences),
    ]


def _side(t: StepTerms, x: Sequence[float]) -> int:
    compute, memory = t.compute_s * x[0], t.memory_s * x[1]
    gpu = max(compute, memory) + t.payload_s * x[2] + t.hops * x[3]
    if t.layers * x[4] > gpu:
        return 2
    return 0 if compute >= memory else 1


def _predict(t: StepTerms, x: Sequence[float]) -> float:
    compute, memory = t.compute_s * x[0], t.memory_s * x[1]
    gpu = max(compute, memory) + t.payload_s * x[2] + t.hops * x[3] + t.handoff_s
    return max(t.layers * x[4], gpu) + x[5] + t.decode_sequences * x[6]


def _bounded_least_squares(rows: Sequence[Sequence[float]], lower: Sequence[float]) -> list[float]:
    """Minimise ``sum (row . x - 1)^2`` subject to ``x >= lower`` (rows are relative).

    Active set: solve the free parameters by the normal equations (with a 1e-9 relative
    ridge so that two collinear terms split their share instead of failing), pin the one
    furthest below its bound, repeat. A parameter whose column is all zero stays at its
    bound.
    """
    n = len(lower)
    pinned = {j for j in range(n) if all(row[j] == 0 for row in rows)}
    while True:
        free = [j for j in range(n) if j not in pinned]
        x = list(map(float, lower))
        if free:
            rhs_rows = [1.0 - sum(row[j] * lower[j] for j in pinned) for row in rows]
            ata = [[sum(row[i] * row[j] for row in rows) for j in free] for i in free]
            for k in range(len(free)):  # a whisker of ridge: collinear terms share, not fail
                ata[k][k] *= 1 + _RIDGE
            aty = [sum(row[i] * y for row, y in zip(rows, rhs_rows, strict=True)) for i in free]
            for j, value in zip(free, solve_linear(ata, aty), strict=True):
                x[j] = value
        below = [j for j in free if x[j] < lower[j]]
        if not below:
            return x
        pinned.add(min(below, key=lambda j: x[j] - lower[j]))


def _alternate(
    fitted: Sequence[tuple[StepTerms, Observation]], start: Sequence[float]
) -> list[float]:
    """Alternate side assignment and bounded least squares from ``start`` until stable."""
    sides = [_side(t, start) for t, _ in fitted]
    x = list(start)
    for _ in range(_MAX_ROUNDS):
        rows = [
            [f / o.seconds for f in _features(t, side)]
            for (t, o), side in zip(fitted, sides, strict=True)
        ]
        x = _bounded_least_squares(rows, _LOWER)
        new_sides = [_side(t, x) for t, _ in fitted]
        if new_sides == sides:
            break
        sides = new_sides
    return x


def fit_phase(fitted: Sequence[tuple[StepTerms, Observation]]) -> PhaseProfile:
    """The ``PhaseProfile`` that best predicts ``fitted`` by relative least squares.

    Each point is a row ``features . x = measured`` divided by ``measured`` (each point
    counts by its relative error), ``x`` the inverse efficiencies and the overheads. The
    two maxima (compute vs memory, launch vs GPU) are handled by alternating: put each
    point on its side under the current fit, refit, until no point moves (at most 20
    rounds), from several starting launch times; the start with the least squared
    relative error wins. No points: the neutral profile (efficiencies 1, no overheads).
    """
    if not fitted:
        return PhaseProfile()
    best: tuple[float, list[float]] | None = None
    for launch in _LAUNCH_STARTS:
        x = _alternate(fitted, [*_START[:4], launch, *_START[5:]])
        sse = sum((_predict(t, x) / o.seconds - 1) ** 2 for t, o in fitted)
        if best is None or sse < best[0]:
            best = (sse, x)
    assert best is not None
    x = best[1]
    return PhaseProfile(
        compute_efficiency=min(1.0, 1 / x[0]),
        memory_efficiency=min(1.0, 1 / x[1]),
        link_efficiency=min(1.0, 1 / x[2]),
        collective_latency_s=x[3],
        layer_overhead_s=x[4],
        step_overhead_s=x[5],
        sequence_overhead_s=x[6],
    )


def fit_profile(
    name: str,
    hardware: HardwareSpec,
    points: Sequence[tuple[ModelSpec, Observation]],
    *,
    held_out: Callable[[Observation], bool] = lambda _o: False,
    source: str = "",
) -> ProfileFit:
    """Fit one GPU type's ``StepProfile`` (its prefill and decode phases, each by
    ``fit_phase``) to the points not ``held_out``; every point's residual comes back."""
    terms = [(observation_terms(m, hardware, o), o) for m, o in points]
    fitted = [(t, o) for t, o in terms if not held_out(o)]
    if not fitted:
        raise BudgetError(f"calibration of {name!r}: no measurements left to fit")
    first = fitted[0][1]
    decode = fit_phase([(t, o) for t, o in fitted if o.phase == "decode"])
    prefills = [(t, o) for t, o in fitted if o.phase == "prefill"]
    prefill = fit_phase(prefills)
    if not any(o.decoding for _, o in prefills):
        # Prefills alone only: the prefill phase cannot see what a decoding sequence adds
        # to a step that also carries a prefill (vLLM's mixed steps). Take the decode
        # phase's cost per sequence (sampling, output processing), the least it adds.
        prefill = replace(prefill, sequence_overhead_s=decode.sequence_overhead_s)
    profile = StepProfile(
        name=name, gpu=first.gpu, engine=first.engine, prefill=prefill, decode=decode,
        source=source,
    )  # fmt: skip
    residuals = tuple(
        Residual(observation=o, predicted_s=t.time_s(profile), held_out=held_out(o))
        for t, o in terms
    )
    return ProfileFit(profile=profile, residuals=residuals)


def fit_profiles(
    observations: Sequence[Observation],
    *,
    model_of: Callable[[str], ModelSpec],
    gpu_of: Callable[[str], HardwareSpec],
    held_out: Callable[[Observation], bool] = lambda _o: False,
    source: str = "",
) -> list[ProfileFit]:
    """One ``fit_profile`` per GPU type (and engine) in ``observations``, in first-seen order.

    ``model_of``/``gpu_of`` resolve the table's names (a catalog's ``model``/``gpu``).
    A profile is named after the table's GPU name, ``GPU/ENGINE`` where there is an engine.
    """
    groups: dict[tuple[str, str], list[Observation]] = {}
    for o in observations:
        groups.setdefault((o.gpu, o.engine), []).append(o)
    models = {name: model_of(name) for name in {o.model for o in observations}}
    fits = []
    for (gpu, engine), group in groups.items():
        hardware = gpu_of(gpu)
        points = [(models[o.model], o) for o in group]
        name = f"{gpu}/{engine}" if engine else gpu
        fits.append(fit_profile(name, hardware, points, held_out=held_out, source=source))
    return fits


def prompt_split(
    held_out_prompts: frozenset[int], held_out_batches: frozenset[int] = frozenset()
) -> Callable[[Observation], bool]:
    """A held-out rule: a point is held out if its prompt or its batch is in the sets."""

    def held_out(o: Observation) -> bool:
        return o.prompt_tokens in held_out_prompts or o.batch in held_out_batches

    return held_out
