"""The decomposition's calibration fits on the run itself (``--calibrate``): the prefill
quadratic on low-load requests (``fit_prefill``), the decode efficiency from the gap to the
second token (``fit_decode``) and, when the deployment names none, the chunk size under
which the load-aware replay best explains the run (``fit_chunk``).

Must not import loadgen or httpx.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Final, Literal

import polars as pl

from analyzers.budget.calibrate import (
    Calibration,
    PrefillSample,
    calibrate_prefill,
    calibrated,
)
from analyzers.budget.prefill import prefill_time_s
from analyzers.budget.specs import Deployment
from analyzers.decompose.columns import (
    IN_FLIGHT,
    IN_FLIGHT_TO_FIRST,
    NETWORK_MS,
    PROMPT,
    SERVER_SIDE_MS,
    UNCACHED,
)
from analyzers.decompose.load import (
    ROW,
    SECOND_COL,
    LoadAwareResult,
    load_aware_phases,
)
from analyzers.decompose.model import BudgetModel
from analyzers.decompose.options import DecomposeOptions
from analyzers.decompose.results import (
    CalibrationResult,
)
from analyzers.errors import AnalyzerError, BudgetError
from traces import schema as s

MIN_LENGTHS: Final = 3
"""Distinct prompt lengths the prefill quadratic needs."""


def low_load(frame: pl.DataFrame, options: DecomposeOptions) -> pl.Expr:
    """Which requests the prefill fit takes (and ``samples_waited`` checks): those sent with
    at most the ``low_load_quantile`` of the run's in-flight requests at send and in flight
    with at most the same quantile of its requests in flight before a first token
    (``IN_FLIGHT_TO_FIRST``); where that leaves fewer than ``MIN_LENGTHS`` prompt lengths,
    the first condition alone; where that does too, every request.

    In flight at send alone misses a request sent into an idle server that others reached
    before its prefill ended: a burst's first request, whose prompt then shared steps with
    theirs (llama.cpp: 267 ms for a 256-token prompt that takes 44 ms alone), and one such
    sample bent the fitted quadratic to 3.7 times the truth at 256 tokens."""
    at_send = pl.col(IN_FLIGHT) <= _quantile(frame, IN_FLIGHT, options.low_load_quantile)
    until_first = _quantile(frame, IN_FLIGHT_TO_FIRST, options.low_load_quantile)
    alone = at_send & (pl.col(IN_FLIGHT_TO_FIRST) <= until_first)
    for chosen in (alone, at_send):
        if frame.filter(chosen).get_column(UNCACHED).n_unique() >= MIN_LENGTHS:
            return chosen
    return pl.lit(True)


def _quantile(frame: pl.DataFrame, column: str, q: float) -> int:
    cutoff = frame.get_column(column).quantile(q, "lower")
    return int(cutoff) if isinstance(cutoff, int | float) else 1


def fit_prefill(
    frame: pl.DataFrame, budget: BudgetModel, network_ms: float, options: DecomposeOptions
) -> CalibrationResult:
    """Fit prefill on low-load requests (``low_load``): the server's prefill, else what the
    others leave."""
    measured = pl.coalesce(
        pl.col("_s_prefill"),
        pl.col(SERVER_SIDE_MS)
        - pl.col(NETWORK_MS).fill_null(network_ms)
        - pl.col("_s_first_token").fill_null(pl.col("_p_first"))
        - pl.col("_s_transfer").fill_null(pl.col("_p_transfer")),
    )
    source: Literal["server", "derived"] = (
        "server" if frame.get_column("_s_prefill").null_count() < frame.height else "derived"
    )
    rows = frame.select(
        pl.col(UNCACHED),
        pl.col(s.CACHED_TOKENS),
        pl.col(IN_FLIGHT),
        measured.alias("_m"),
        low_load(frame, options).alias("_low"),
    ).filter(pl.col("_m") > 0)
    low = rows.filter(pl.col("_low"))
    if low.get_column(UNCACHED).n_unique() < MIN_LENGTHS:
        low = rows
    low = low.drop("_low")
    if low.height == 0:
        raise AnalyzerError("calibration: no request with a positive measured prefill")
    samples = [
        PrefillSample(prompt_tokens=int(n), prefill_s=float(ms) / 1e3, cached_tokens=int(c))
        for n, c, _, ms in low.iter_rows()
    ]
    try:
        cal: Calibration = calibrate_prefill(budget.model, budget.deployment, samples)
    except BudgetError as exc:
        raise AnalyzerError(f"calibration failed: {exc}") from exc
    a = b = c = None
    if cal.a_s is not None and cal.b_s_per_token is not None and cal.c_s_per_token2 is not None:
        a, b, c = cal.a_s * 1e3, cal.b_s_per_token * 1e6, cal.c_s_per_token2 * 1e9
    return CalibrationResult(
        samples=cal.samples,
        max_in_flight=int(low.get_column(IN_FLIGHT).max() or 0),  # type: ignore[arg-type]
        measured=source,
        a_ms=a,
        b_us_per_token=b,
        c_ns_per_token2=c,
        achieved_flops_per_s=cal.achieved_flops_per_s,
        peak_flops_per_s=cal.peak_flops_per_s,
        fraction_of_peak=cal.fraction_of_peak,
        tokens_range=(
            int(low.get_column(UNCACHED).min()),  # type: ignore[arg-type]
            int(low.get_column(UNCACHED).max()),  # type: ignore[arg-type]
        ),
    )


CHUNK_CANDIDATES: Final = (None, 256, 512, 1024, 2048, 4096, 8192, 16384)
"""Step token budgets ``--calibrate`` tries when the deployment names none (None:
unchunked): vLLM's, SGLang's and llama.cpp's usual values."""
CHUNK_FIT_GAIN: Final = 0.10
"""A fitted chunk size replaces "unchunked" only if it lowers the replay's error by this."""


def _observed_gaps(scanned: pl.LazyFrame, options: DecomposeOptions) -> pl.DataFrame:
    """Each request's gap from its first token to its second (one token per chunk), ms on
    the server's clock (``ROW``, ``_g``)."""
    offsets, tokens = pl.col(s.CHUNK_OFFSETS_US), pl.col(s.CHUNK_TOKENS)
    single = tokens.list.first().fill_null(1) == 1
    gap = (offsets.list.get(1, null_on_oob=True) - offsets.list.first()).cast(pl.Float64)
    return scanned.select(
        pl.col(ROW),
        pl.when(single & (offsets.list.len() > 1)).then(gap / 1e3 / options.time_scale).alias("_g"),
    ).collect()


def _replay_with_second_token(
    scanned: pl.LazyFrame,
    budget: BudgetModel,
    deploy: Deployment,
    network_ms: float,
    options: DecomposeOptions,
    *,
    alone: bool = False,
) -> LoadAwareResult | None:
    """The load-aware replay of the run under ``deploy``, with the gap to the second token
    (and with ``alone`` each prompt's prefill alone); None when the replay cannot run (too
    long, or a shape it refuses): the fits that ask then keep what they had."""
    try:
        return load_aware_phases(
            scanned,
            budget,
            network_ms=network_ms,
            time_scale=options.time_scale,
            deployment=deploy,
            max_steps=options.max_replay_steps,
            second_token=True,
            alone=alone,
        )
    except BudgetError:
        return None


def fit_decode(
    scanned: pl.LazyFrame,
    frame: pl.DataFrame,
    budget: BudgetModel,
    deploy: Deployment,
    network_ms: float,
    options: DecomposeOptions,
) -> Deployment:
    """``deploy`` with the decode efficiency that makes the replay's gap to the second
    token (one decode step, for a request alone) match the low-load requests' median
    (capped at 1); unchanged without such gaps or when the replay cannot run."""
    cutoff = frame.get_column(IN_FLIGHT).quantile(options.low_load_quantile, "lower")
    low = frame.filter(pl.col(IN_FLIGHT) <= (cutoff if isinstance(cutoff, int | float) else 1))
    gaps = _observed_gaps(scanned, options).join(low.select(ROW), on=ROW).drop_nulls()
    if gaps.height == 0:
        return deploy
    replay = _replay_with_second_token(scanned, budget, deploy, network_ms, options)
    if replay is None:
        return deploy
    joined = replay.frame.join(gaps, on=ROW).drop_nulls([SECOND_COL, "_g"])
    predicted = joined.get_column(SECOND_COL).median()
    observed = joined.get_column("_g").median()
    if not isinstance(predicted, float) or not isinstance(observed, float) or observed <= 0:
        return deploy
    efficiency = min(1.0, deploy.decode_efficiency * predicted / observed)
    return replace(deploy, decode_efficiency=efficiency) if efficiency > 0 else deploy


def _observed(
    scanned: pl.LazyFrame, frame: pl.DataFrame, network_ms: float, options: DecomposeOptions
) -> pl.DataFrame:
    """What the replay is judged against, per request (``ROW``): the measured server-side
    time net of the network (``_o``) and the gap from the first token to the second
    (``_g``: the length of the step after the first, seen by the client)."""
    observed = frame.select(
        pl.col(ROW), (pl.col(SERVER_SIDE_MS) - pl.col(NETWORK_MS).fill_null(network_ms)).alias("_o")
    )
    return observed.join(_observed_gaps(scanned, options), on=ROW, how="left")


def _replay_error(
    scanned: pl.LazyFrame,
    observed: pl.DataFrame,
    budget: BudgetModel,
    deploy: Deployment,
    network_ms: float,
    options: DecomposeOptions,
) -> float | None:
    """How badly the replay of the whole run under ``deploy`` explains it: the mean
    absolute error of the predicted queue + prefill + transfer + decode wait + first token
    against ``_o``, plus that of the gap to the second token against ``_g`` (ms); None when
    the replay cannot run or matches no request."""
    replay = _replay_with_second_token(scanned, budget, deploy, network_ms, options)
    if replay is None:
        return None
    joined = replay.frame.join(observed, on=ROW)
    if joined.height == 0:
        return None
    predicted = pl.sum_horizontal("_l_queue", "_l_prefill", "_l_transfer", "_l_wait", "_l_first")
    error = joined.select(
        (predicted - pl.col("_o")).abs().mean()
        + (pl.col(SECOND_COL) - pl.col("_g")).abs().mean().fill_null(0.0)
    ).item()
    return error if isinstance(error, float) else None


def fit_chunk(
    scanned: pl.LazyFrame,
    frame: pl.DataFrame,
    budget: BudgetModel,
    deploy: Deployment,
    network_ms: float,
    options: DecomposeOptions,
) -> Deployment:
    """``deploy`` with the chunk size under which the replay of the whole run best explains
    each request's measured server-side time (least ``_replay_error``: the predicted
    queue + prefill + transfer + first token against ``server side - network``, plus the
    gap to the second token, the length of the step after the first, which the chunk
    size sets under load).

    A prompt alone costs about the same chunked or not, so the low-load fit cannot see the
    chunk size; under load it decides who waits and who shares a step, which the run's
    own queueing shows. Candidates the replay cannot run are skipped; unchunked stays unless
    a chunk size is clearly (``CHUNK_FIT_GAIN``) better."""
    observed = _observed(scanned, frame, network_ms, options)
    best: tuple[float, Deployment] | None = None
    told: float | None = None
    for chunk in CHUNK_CANDIDATES:
        candidate = replace(deploy, chunk_tokens=chunk)
        error = _replay_error(scanned, observed, budget, candidate, network_ms, options)
        if error is None:
            continue
        if chunk is None:
            told = error
        if best is None or error < best[0]:
            best = (error, candidate)
    if best is None or (told is not None and best[0] > (1 - CHUNK_FIT_GAIN) * told):
        return deploy  # no candidate explains the run clearly better than unchunked
    return best[1]


SAMPLE_WAIT_SHARE: Final = 0.10
"""The low-load fit is distrusted when the replay at it says its samples spent more than
this share of their server-side time waiting (queued, or stretched by shared steps)."""
EFFICIENCY_FACTORS: Final = tuple(2.0**k for k in range(-2, 7))
"""Multiples of the low-load efficiency the search starts from (1/4 to 64): queued
samples only ever make the low-load fit too slow, so the range leans upwards."""
_GOLDEN: Final = (5**0.5 - 1) / 2
_REFINE_STEPS: Final = 8
"""Golden-section steps between the best factor's neighbours (a factor of 4 narrowed to
about 2.5%)."""


def samples_waited(
    scanned: pl.LazyFrame,
    frame: pl.DataFrame,
    budget: BudgetModel,
    deploy: Deployment,
    network_ms: float,
    options: DecomposeOptions,
) -> bool:
    """Whether the replay of the run under the low-load fit (``deploy``) says that the
    fit's samples (``low_load``) were not alone: their predicted queue plus the stretch of
    their prefill by shared steps is more than ``SAMPLE_WAIT_SHARE`` of their measured
    server-side time (less network).

    A fit from samples that waited is too slow, and a too-slow replay predicts more waiting
    still, so the test cannot be fooled that way; samples that were alone get a replay
    that agrees."""
    replay = _replay_with_second_token(scanned, budget, deploy, network_ms, options, alone=True)
    if replay is None:
        return False
    samples = frame.filter(low_load(frame, options))
    joined = replay.frame.join(_observed(scanned, samples, network_ms, options), on=ROW)
    waited = pl.col("_l_queue") + (pl.col("_l_prefill") - pl.col("_l_alone")).clip(lower_bound=0)
    share = joined.select(waited.sum() / pl.col("_o").clip(lower_bound=0).sum()).item()
    return isinstance(share, float) and share > SAMPLE_WAIT_SHARE


def fit_efficiency(
    scanned: pl.LazyFrame,
    frame: pl.DataFrame,
    budget: BudgetModel,
    deploy: Deployment,
    network_ms: float,
    options: DecomposeOptions,
) -> Deployment:
    """``deploy`` with the prefill efficiency under which the replay of the whole run best
    explains it (least ``_replay_error``); ``deploy`` when no replay runs.

    The low-load fit takes each sample's whole server-side time (less network and first
    token) as its prefill. That holds only if the sample was alone on the server: where the
    "low-load" requests still waited for a slot or shared their steps with others (llama.cpp
    with 4 slots at one request per 150 ms, each prompt 0.3-1 s of one CPU thread), their
    wait is fitted as prefill and the line comes out several times too slow, which the
    replay then stretches again under load (``samples_waited`` says when). The run's own
    queueing pins the speed instead: under load each request's server-side time is mostly
    the work of those before it, so the efficiency at which the replay reproduces the
    measured times is the server's. The search: ``deploy``'s efficiency times 1/4, 1/2,
    ..., 64 (capped at 1), then golden section between the best one's neighbours in log
    space."""
    observed = _observed(scanned, frame, network_ms, options)
    start = deploy.prefill_efficiency
    cache: dict[float, float | None] = {}

    def error(efficiency: float) -> float | None:
        efficiency = min(1.0, efficiency)
        if efficiency not in cache:
            candidate = replace(deploy, prefill_efficiency=efficiency)
            cache[efficiency] = _replay_error(
                scanned, observed, budget, candidate, network_ms, options
            )
        return cache[efficiency]

    grid = sorted({min(1.0, start * f) for f in EFFICIENCY_FACTORS})
    valid = [(e, err) for e in grid if (err := error(e)) is not None]
    if not valid:
        return deploy
    i = grid.index(min(valid, key=lambda pair: pair[1])[0])
    lo, hi = math.log(grid[max(0, i - 1)]), math.log(grid[min(len(grid) - 1, i + 1)])
    a, b = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
    for _ in range(_REFINE_STEPS):
        err_a, err_b = error(math.exp(a)), error(math.exp(b))
        if err_a is None or err_b is None:
            break
        if err_a <= err_b:
            hi, b = b, a
            a = hi - _GOLDEN * (hi - lo)
        else:
            lo, a = a, b
            b = lo + _GOLDEN * (hi - lo)
    fitted = min(((e, err) for e, err in cache.items() if err is not None), key=lambda p: p[1])
    return replace(deploy, prefill_efficiency=fitted[0])


def fit_replay_deployment(
    scanned: pl.LazyFrame,
    frame: pl.DataFrame,
    budget: BudgetModel,
    calibration: CalibrationResult,
    network_ms: float,
    options: DecomposeOptions,
) -> tuple[CalibrationResult, Deployment]:
    """The deployment the load replay runs under after ``fit_prefill``, and the calibration
    updated with what was fitted on the way: the low-load prefill efficiency; with the
    replay (``options.load_aware``) the decode efficiency (``fit_decode``); when the
    low-load samples waited (``samples_waited``) the prefill efficiency under the run's own
    load instead (``fit_efficiency``; the low-load quadratic is dropped); when the
    deployment names none, the chunk size (``fit_chunk``, the load-fitted efficiency then
    refined at that size)."""
    low_load = (calibration.fraction_of_peak or budget.deployment.prefill_efficiency) or 1.0
    deploy = calibrated(budget.deployment, as_calibration(calibration, low_load))
    if not options.load_aware:
        return replace(calibration, chunk_tokens=deploy.chunk_tokens), deploy
    deploy = fit_decode(scanned, frame, budget, deploy, network_ms, options)
    calibration = replace(calibration, decode_efficiency=deploy.decode_efficiency)
    args = (scanned, frame, budget)
    from_load = samples_waited(*args, deploy, network_ms, options)
    if from_load:
        deploy = fit_efficiency(*args, deploy, network_ms, options)
    chunk_fitted = deploy.chunk_tokens is None
    if chunk_fitted:
        deploy = fit_chunk(*args, deploy, network_ms, options)
        if from_load and deploy.chunk_tokens is not None:
            deploy = fit_efficiency(*args, deploy, network_ms, options)
    calibration = replace(calibration, chunk_tokens=deploy.chunk_tokens, chunk_fitted=chunk_fitted)
    if not from_load:
        return calibration, deploy
    efficiency = deploy.prefill_efficiency
    peak = calibration.peak_flops_per_s
    return replace(
        calibration,
        a_ms=None,
        b_us_per_token=None,
        c_ns_per_token2=None,
        fraction_of_peak=efficiency,
        achieved_flops_per_s=None if peak is None else efficiency * peak,
        efficiency_from_load=True,
    ), deploy


def calibrated_prefill(
    keys: pl.DataFrame, cal: CalibrationResult, budget: BudgetModel, efficiency: float
) -> pl.DataFrame:
    """Calibrated prefill per key: the quadratic when fitted, else the budget at the fitted
    efficiency."""
    deploy = calibrated(budget.deployment, as_calibration(cal, efficiency))
    values = []
    for n, cached, prompt in keys.iter_rows():
        fitted = cal.prefill_ms(int(n))
        if fitted is None:
            fitted = prefill_time_s(budget.model, deploy, int(n), int(cached)) * 1e3
        values.append((n, cached, prompt, max(0.0, fitted)))
    return pl.DataFrame(
        values,
        schema={UNCACHED: pl.Int64, s.CACHED_TOKENS: pl.Int64, PROMPT: pl.Int64, "_c": pl.Float64},
        orient="row",
    )


def as_calibration(cal: CalibrationResult, efficiency: float) -> Calibration:
    return Calibration(
        samples=cal.samples,
        efficiency=efficiency,
        achieved_flops_per_s=cal.achieved_flops_per_s or 0.0,
        peak_flops_per_s=cal.peak_flops_per_s or 1.0,
        a_s=None,
        b_s_per_token=None,
        c_s_per_token2=None,
    )
