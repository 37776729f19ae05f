"""The decomposition's calibration fits on the run itself (``--calibrate``): the prefill
quadratic on low-load requests (``fit_prefill``), the decode efficiency from the gap to the
second token (``fit_decode``) and, when the deployment names none, the chunk size under
which the load-aware replay best explains the run (``fit_chunk``).

Must not import loadgen or httpx.
"""

from __future__ import annotations

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


def fit_prefill(
    frame: pl.DataFrame, budget: BudgetModel, network_ms: float, options: DecomposeOptions
) -> CalibrationResult:
    """Fit prefill on low-load requests: the server's prefill, else what the others leave."""
    cutoff = frame.get_column(IN_FLIGHT).quantile(options.low_load_quantile, "lower")
    max_in_flight = int(cutoff) if isinstance(cutoff, int | float) else 1
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
    rows = frame.select(pl.col(UNCACHED), pl.col(s.CACHED_TOKENS), pl.col(IN_FLIGHT), measured)
    rows = rows.rename({rows.columns[-1]: "_m"}).filter(pl.col("_m") > 0)
    low = rows.filter(pl.col(IN_FLIGHT) <= max_in_flight)
    if low.get_column(UNCACHED).n_unique() < 3:
        low = rows
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
) -> LoadAwareResult | None:
    """The load-aware replay of the run under ``deploy``, with the gap to the second token;
    None when the replay cannot run (too long, or a shape it refuses): the fits that ask
    then keep what they had."""
    try:
        return load_aware_phases(
            scanned,
            budget,
            network_ms=network_ms,
            time_scale=options.time_scale,
            deployment=deploy,
            max_steps=options.max_replay_steps,
            second_token=True,
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


def fit_chunk(
    scanned: pl.LazyFrame,
    frame: pl.DataFrame,
    budget: BudgetModel,
    deploy: Deployment,
    network_ms: float,
    options: DecomposeOptions,
) -> Deployment:
    """``deploy`` with the chunk size under which the replay of the whole run best explains
    each request's measured server-side time (least mean absolute error of the predicted
    queue + prefill + transfer + first token against ``server side - network``, plus that
    of the gap to the second token, the length of the step after the first, which the
    chunk size sets under load).

    A prompt alone costs about the same chunked or not, so the low-load fit cannot see the
    chunk size; under load it decides who waits and who shares a step, which the run's
    own queueing shows. Candidates the replay cannot run are skipped; unchunked stays unless
    a chunk size is clearly (``CHUNK_FIT_GAIN``) better."""
    observed = frame.select(
        pl.col(ROW), (pl.col(SERVER_SIDE_MS) - pl.col(NETWORK_MS).fill_null(network_ms)).alias("_o")
    )
    # The second token a step after the first: that step's length, seen by the client.
    observed = observed.join(_observed_gaps(scanned, options), on=ROW, how="left")
    best: tuple[float, Deployment] | None = None
    told: float | None = None
    for chunk in CHUNK_CANDIDATES:
        candidate = replace(deploy, chunk_tokens=chunk)
        replay = _replay_with_second_token(scanned, budget, candidate, network_ms, options)
        if replay is None:
            continue
        joined = replay.frame.join(observed, on=ROW)
        if joined.height == 0:
            continue
        predicted = pl.sum_horizontal(
            "_l_queue", "_l_prefill", "_l_transfer", "_l_wait", "_l_first"
        )
        error = joined.select(
            (predicted - pl.col("_o")).abs().mean()
            + (pl.col(SECOND_COL) - pl.col("_g")).abs().mean().fill_null(0.0)
        ).item()
        if not isinstance(error, float):
            continue
        if chunk is None:
            told = error
        if best is None or error < best[0]:
            best = (error, candidate)
    if best is None or (told is not None and best[0] > (1 - CHUNK_FIT_GAIN) * told):
        return deploy  # no candidate explains the run clearly better than unchunked
    return best[1]


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
