"""Prefill/decode disaggregation: the pool ratio a traffic mix needs, and when it pays.

Two pools replace one: prefill replicas run prompts back to back (compute-bound), decode
replicas run batches of sequences (bandwidth-bound), and every request's KV cache crosses
a link between them. The model here is a steady-state, mean-value one (documented in
docs/arithmetic.md, "Disaggregation"): M/D/c queues for prefill, Little's law for the
decode batch, and for the monolith, decode slowed by the share of time spent in prefill.
Pure arithmetic: this module must not import ``loadgen``, httpx or polars, and does no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from analyzers.budget.decode import tpot_s
from analyzers.budget.kv import kv_transfer_exposed_s, max_concurrent_requests
from analyzers.budget.prefill import prefill_time_s
from analyzers.budget.queueing import mdc_wait_quantile_s, mdc_wait_s
from analyzers.budget.specs import Deployment, LinkSpec, ModelSpec
from analyzers.errors import BudgetError

_DEFAULT_BATCH_CAP = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolRatio:
    """Replica-seconds each request costs in each pool, and the prefill:decode ratio."""

    prefill_s_per_request: float
    decode_s_per_request: float
    decode_batch: int
    mean_prompt_tokens: float
    mean_output_tokens: float

    @property
    def prefill_per_decode(self) -> float:
        """Prefill replicas per decode replica that keep both pools equally busy."""
        return self.prefill_s_per_request / self.decode_s_per_request


def _mean(values: Sequence[int], what: str) -> float:
    if not values:
        raise BudgetError(f"need at least one {what}")
    if min(values) < 0:
        raise BudgetError(f"{what} must not be negative")
    return sum(values) / len(values)


def default_decode_batch(model: ModelSpec, deploy: Deployment, seq_tokens: int) -> int:
    """The batch a decode replica runs: as many sequences as KV holds, at most 256."""
    return max(
        1, min(_DEFAULT_BATCH_CAP, max_concurrent_requests(model, deploy, max(1, seq_tokens)))
    )


def pool_ratio(
    model: ModelSpec,
    deploy: Deployment,
    prompt_tokens: Sequence[int],
    output_tokens: Sequence[int],
    *,
    decode_batch: int | None = None,
) -> PoolRatio:
    """The prefill:decode replica ratio for a traffic mix (e.g. a trace's lengths).

    prefill per request = mean over requests of ``prefill_time_s(prompt)``;
    decode per request = ``mean(output) x tpot(b, ctx) / b`` with ``ctx = mean(prompt) +
    mean(output) / 2`` (the mean context over a request's decode); ratio = prefill/decode.
    """
    mean_in = _mean(prompt_tokens, "prompt length")
    mean_out = _mean(output_tokens, "output length")
    prefill_s = sum(prefill_time_s(model, deploy, p) for p in prompt_tokens) / len(prompt_tokens)
    batch = decode_batch or default_decode_batch(model, deploy, round(mean_in + mean_out))
    ctx = round(mean_in + mean_out / 2)
    decode_s = mean_out * tpot_s(model, deploy, batch, ctx) / batch
    return PoolRatio(
        prefill_s_per_request=prefill_s,
        decode_s_per_request=max(decode_s, 1e-12),
        decode_batch=batch,
        mean_prompt_tokens=mean_in,
        mean_output_tokens=mean_out,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakEven:
    """Highest SLO-meeting arrival rates of both layouts of the same replicas.

    ``break_even_rate_per_s`` is the rate above which disaggregation wins (the
    monolith's limit, when the disaggregated limit is higher), else None.
    """

    replicas: int
    prefill_replicas: int
    decode_replicas: int
    monolith_max_rate_per_s: float
    disagg_max_rate_per_s: float

    @property
    def break_even_rate_per_s(self) -> float | None:
        """Arrival rate (requests/s) beyond which the disaggregated layout is better."""
        if self.disagg_max_rate_per_s > self.monolith_max_rate_per_s:
            return self.monolith_max_rate_per_s
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Load:
    model: ModelSpec
    deploy: Deployment
    prompt: int
    output: int
    prefill_s: float
    transfer_s: float
    capacity: int
    slo_ttft_s: float
    slo_tpot_s: float
    wait_quantile: float | None = None

    def wait_s(self, rho: float, servers: int = 1) -> float:
        """The prefill queue's mean wait, or its ``wait_quantile`` when one is set."""
        if self.wait_quantile is None:
            return mdc_wait_s(rho, self.prefill_s, servers)
        return mdc_wait_quantile_s(rho, self.prefill_s, servers, self.wait_quantile)


def _decode_tpot(load: _Load, rate_per_replica: float, slowdown: float) -> float | None:
    """TPOT at the batch Little's law gives (``b = rate x output x tpot``), or None."""
    ctx = load.prompt + load.output // 2
    batch = 1.0
    for _ in range(60):
        tpot = tpot_s(load.model, load.deploy, math.ceil(batch), ctx) / slowdown
        nxt = max(1.0, rate_per_replica * load.output * tpot)
        if nxt > load.capacity:
            return None
        if abs(nxt - batch) < 1e-3:
            break
        batch = nxt
    return tpot_s(load.model, load.deploy, math.ceil(batch), ctx) / slowdown


def _monolith_ok(load: _Load, rate: float, replicas: int) -> bool:
    per = rate / replicas
    rho = per * load.prefill_s
    if rho >= 1:
        return False
    tpot = _decode_tpot(load, per, 1 - rho)
    if tpot is None or tpot > load.slo_tpot_s:
        return False
    ttft = load.prefill_s + load.wait_s(rho) + tpot
    return ttft <= load.slo_ttft_s


def _disagg_ok(load: _Load, rate: float, prefill_replicas: int, decode_replicas: int) -> bool:
    rho = rate * load.prefill_s / prefill_replicas
    if rho >= 1:
        return False
    tpot = _decode_tpot(load, rate / decode_replicas, 1.0)
    if tpot is None or tpot > load.slo_tpot_s:
        return False
    wait = load.wait_s(rho, prefill_replicas)
    return load.prefill_s + wait + load.transfer_s + tpot <= load.slo_ttft_s


def _max_rate(ok: Callable[[float], bool], upper: float) -> float:
    """Bisection for the highest rate in (0, upper] where ``ok`` holds (0 if none)."""
    if not ok(upper * 1e-9):
        return 0.0
    lo, hi = upper * 1e-9, upper
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def monolith_capacity(
    model: ModelSpec,
    deploy: Deployment,
    *,
    prompt_tokens: int,
    output_tokens: int,
    slo_ttft_s: float,
    slo_tpot_s: float,
    cached_tokens: int = 0,
    wait_quantile: float | None = None,
) -> float:
    """The highest arrival rate (requests/s) one monolithic replica serves within both SLOs.

    The break-even's monolith (:func:`disagg_break_even`) for one replica: prefill
    utilisation ``rho = r t_p`` with ``t_p = prefill(prompt - cached, cached)``, TPOT =
    ``tpot(b) / (1 - rho)`` at the Little's-law batch (capped by KV capacity), TTFT =
    ``t_p + W(rho) + TPOT`` with ``W`` the M/D/1 mean wait, or its ``wait_quantile``
    (e.g. 0.99 for a p99 TTFT budget). Found by bisection.
    """
    if prompt_tokens <= 0 or output_tokens <= 0:
        raise BudgetError("prompt and output lengths must be positive")
    if not 0 <= cached_tokens < prompt_tokens:
        raise BudgetError(
            f"cached tokens must be in [0, prompt), got {cached_tokens} of {prompt_tokens}"
        )
    prefill_s = prefill_time_s(model, deploy, prompt_tokens - cached_tokens, cached_tokens)
    load = _Load(
        model=model,
        deploy=deploy,
        prompt=prompt_tokens,
        output=output_tokens,
        prefill_s=prefill_s,
        transfer_s=0.0,
        capacity=max_concurrent_requests(model, deploy, prompt_tokens + output_tokens),
        slo_ttft_s=slo_ttft_s,
        slo_tpot_s=slo_tpot_s,
        wait_quantile=wait_quantile,
    )
    return _max_rate(lambda r: _monolith_ok(load, r, 1), 1 / prefill_s)


def disagg_break_even(
    model: ModelSpec,
    deploy: Deployment,
    *,
    replicas: int,
    prompt_tokens: int,
    output_tokens: int,
    slo_ttft_s: float,
    slo_tpot_s: float,
    link: LinkSpec | float,
) -> BreakEven:
    """The arrival rate at which ``replicas`` split into two pools beat the same monoliths.

    Monolith replica at rate ``r``: prefill utilisation ``rho = r t_p``; decode runs in the
    remaining ``1 - rho`` of the time, so ``TPOT = tpot(b) / (1 - rho)``; TTFT =
    ``t_p + W_MD1(rho) + TPOT``. Disaggregated, ``p + d = replicas``: TTFT =
    ``t_p + W_MDc(rate t_p / p, c = p) + exposed transfer + tpot``, TPOT = ``tpot(b)``.
    ``b`` is the Little's-law batch, capped by KV capacity. Each layout's highest rate
    meeting both SLOs is found by bisection (the best ``p`` for the split).
    """
    if replicas < 2:
        raise BudgetError("disaggregation needs at least 2 replicas")
    if prompt_tokens <= 0 or output_tokens <= 0:
        raise BudgetError("prompt and output lengths must be positive")
    prefill_s = prefill_time_s(model, deploy, prompt_tokens)
    load = _Load(
        model=model,
        deploy=deploy,
        prompt=prompt_tokens,
        output=output_tokens,
        prefill_s=prefill_s,
        transfer_s=kv_transfer_exposed_s(model, prompt_tokens, link, prefill_s),
        capacity=max_concurrent_requests(model, deploy, prompt_tokens + output_tokens),
        slo_ttft_s=slo_ttft_s,
        slo_tpot_s=slo_tpot_s,
    )
    upper = replicas / prefill_s
    mono = _max_rate(lambda r: _monolith_ok(load, r, replicas), upper)
    best_p, best = 1, 0.0
    for p in range(1, replicas):

        def ok(rate: float, p: int = p) -> bool:
            return _disagg_ok(load, rate, p, replicas - p)

        rate = _max_rate(ok, upper)
        if rate > best:
            best_p, best = p, rate
    return BreakEven(
        replicas=replicas,
        prefill_replicas=best_p,
        decode_replicas=replicas - best_p,
        monolith_max_rate_per_s=mono,
        disagg_max_rate_per_s=best,
    )
