"""What admission control costs and allows at a load: ``loadgen plan admission``.

The engine figures come from the offline engine (``loadgen simulate``: the simulator's own
scheduler and step model in virtual time, :mod:`analyzers.budget.engine.admission`'s
policy included), run by the CLI and handed in as :class:`AdmissionRuns`; this module adds
the queueing arithmetic around them, each figure with its chain:

- capacity ``mu`` = requests served / makespan with every request arriving at once;
- offered load ``rho = lambda / mu``; the fluid bound on the rejected share is
  ``max(0, 1 - mu / lambda)`` (what a server that is never idle cannot take);
- the utilisation the SLO costs: the largest ``rho`` at which ``S + W_q(rho) <= budget``
  (M/D/1, ``S = 1 / mu`` per request), ``1 - rho`` of the capacity left idle for it;
- the largest prompt the budget allows: ``prefill(P) + W <= budget`` with ``W`` the
  median queue wait the served requests met at this load (the offline engine's; M/D/1's
  ``W_q`` at the admitted utilisation is shown beside it), and at idle (``W = 0``).

Pure arithmetic: must not import ``loadgen``, httpx or polars, and does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzers.budget.formatting import fmt, fmt_s
from analyzers.budget.prefill import max_prompt_for_ttft, prefill_time_s
from analyzers.budget.queueing import max_utilisation, mg1_wait_s
from analyzers.budget.specs import Deployment, ModelSpec
from analyzers.errors import BudgetError

_RHO_CAP = 0.999
"""The utilisation the M/D/1 wait is evaluated at, at most (it diverges at 1)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionRuns:
    """What the offline engine found: the saturated run (capacity) and the run at the
    offered rate with admission control on."""

    requests: int
    mean_prompt_tokens: float
    saturated_span_s: float
    saturated_served: int
    offered_rps: float
    rejected: int
    served: int
    served_ttft_p50_s: float
    served_ttft_p99_s: float
    served_queue_p50_s: float
    admitted_span_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionLine:
    """One figure and the arithmetic that gives it."""

    label: str
    value: str
    chain: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionPlan:
    """``loadgen plan admission``'s answer (see the module docstring)."""

    model: str
    where: str
    budget_s: float
    capacity_rps: float
    offered_rps: float
    rejected_share: float
    fluid_rejected_share: float
    served_ttft_p99_s: float
    max_utilisation: float
    max_prompt_at_load: int
    max_prompt_idle: int
    lines: tuple[AdmissionLine, ...]

    @property
    def meets_budget(self) -> bool:
        """Whether the served requests' p99 TTFT is within the budget."""
        return self.served_ttft_p99_s <= self.budget_s


def plan_admission(
    model: ModelSpec, deploy: Deployment, budget_s: float, runs: AdmissionRuns, *, where: str
) -> AdmissionPlan:
    """The admission plan of ``model`` on ``deploy`` for a TTFT budget of ``budget_s``."""
    if budget_s <= 0:
        raise BudgetError(f"the TTFT budget must be > 0 s, got {budget_s}")
    if runs.saturated_span_s <= 0 or runs.saturated_served < 1 or runs.requests < 1:
        raise BudgetError("the saturated run served nothing: no capacity to plan from")
    mu = runs.saturated_served / runs.saturated_span_s
    service = 1 / mu
    lam = runs.offered_rps
    rho = lam / mu
    share = runs.rejected / runs.requests
    fluid = max(0.0, 1 - mu / lam) if lam > 0 else 0.0
    rho_max = max_utilisation(service, budget_s)
    admitted_rps = runs.served / runs.admitted_span_s if runs.admitted_span_s > 0 else 0.0
    rho_adm = min(admitted_rps / mu, _RHO_CAP)
    md1_wait = mg1_wait_s(rho_adm, service)
    wait = runs.served_queue_p50_s
    prompt = max(1, round(runs.mean_prompt_tokens))
    p_load = max_prompt_for_ttft(model, deploy, budget_s, other_s=wait)
    p_idle = max_prompt_for_ttft(model, deploy, budget_s)
    prefill = prefill_time_s(model, deploy, prompt)
    lines = (
        AdmissionLine(
            label="capacity",
            value=f"{fmt(mu, 4)} req/s",
            chain=(
                f"{runs.saturated_served:,} requests (mean prompt {prompt:,} tokens) arriving "
                f"at once are served in {fmt_s(runs.saturated_span_s)}: "
                f"{runs.saturated_served:,} / {fmt_s(runs.saturated_span_s)} = {fmt(mu, 4)} "
                f"req/s, S = 1 / mu = {fmt_s(service)} per request (prefill alone "
                f"{fmt_s(prefill)})"
            ),
        ),
        AdmissionLine(
            label="offered load",
            value=f"{fmt(lam, 4)} req/s = {rho:.2f} x capacity",
            chain=f"rho = lambda / mu = {fmt(lam, 4)} / {fmt(mu, 4)} = {rho:.3f}",
        ),
        AdmissionLine(
            label="rejected (offline engine)",
            value=f"{share:.1%}",
            chain=(
                f"{runs.rejected:,} of {runs.requests:,} refused on arrival by the TTFT "
                f"budget of {fmt_s(budget_s)}; fluid bound max(0, 1 - mu / lambda) = "
                f"{fluid:.1%}"
            ),
        ),
        AdmissionLine(
            label="served TTFT",
            value=f"p99 {fmt_s(runs.served_ttft_p99_s)}",
            chain=(
                f"{runs.served:,} served: p50 {fmt_s(runs.served_ttft_p50_s)}, p99 "
                f"{fmt_s(runs.served_ttft_p99_s)} "
                + ("<=" if runs.served_ttft_p99_s <= budget_s else ">")
                + f" budget {fmt_s(budget_s)}"
            ),
        ),
        AdmissionLine(
            label="utilisation the SLO costs",
            value=f"{1 - rho_max:.1%} of capacity",
            chain=(
                f"M/D/1: S + rho S / (2 (1 - rho)) <= {fmt_s(budget_s)} with S = "
                f"{fmt_s(service)} holds up to rho = 2 w / (S + 2 w), w = budget - S: "
                f"rho_max = {rho_max:.3f}, so {1 - rho_max:.1%} stays idle for the mean TTFT"
            ),
        ),
        AdmissionLine(
            label="largest prompt at this load",
            value=f"{p_load:,} tokens",
            chain=(
                f"served requests waited W = {fmt_s(wait)} (p50, offline engine); "
                f"prefill(P) <= {fmt_s(budget_s)} - {fmt_s(wait)} gives P = {p_load:,} "
                f"(M/D/1 at the admitted {fmt(admitted_rps, 4)} req/s, rho = {rho_adm:.3f}: "
                f"W_q = rho S / (2 (1 - rho)) = {fmt_s(md1_wait)}"
                + (", the queue admission control cuts short)" if md1_wait > budget_s else ")")
            ),
        ),
        AdmissionLine(
            label="largest prompt at idle",
            value=f"{p_idle:,} tokens",
            chain=f"prefill(P) <= {fmt_s(budget_s)} gives P = {p_idle:,}",
        ),
    )
    return AdmissionPlan(
        model=model.name,
        where=where,
        budget_s=budget_s,
        capacity_rps=mu,
        offered_rps=lam,
        rejected_share=share,
        fluid_rejected_share=fluid,
        served_ttft_p99_s=runs.served_ttft_p99_s,
        max_utilisation=rho_max,
        max_prompt_at_load=p_load,
        max_prompt_idle=p_idle,
        lines=lines,
    )
