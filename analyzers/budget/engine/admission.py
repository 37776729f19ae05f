"""Admission control: refuse, on arrival, a request that cannot meet its TTFT budget.

The policy (``ttft``): when a request arrives at the instance the router picks for it,
estimate its time to first token from the queue it joins and its own prompt, with the
same step model the scheduler is timed by, and refuse it at once (the HTTP simulator
answers 429 with the reason) when the estimate exceeds the budget. The estimate, for an
instance whose queue holds ``B`` prompt tokens still to compute (waiting and partly
prefilled sequences, the prefix cache not counted) and ``D`` sequences that will be
decoding beside it (running and waiting, at most ``max_num_seqs - 1``)::

    chunk  = max(1, max_batched_tokens - D)          prompt tokens per step
    steps  = ceil((B + P) / chunk)                   P: this request's prompt tokens
    step_s = step_time([chunk new tokens] + D x [1 token over the mean context])
    ttft   = steps x step_s + encoder_s (+ the KV transfer, disaggregated)

The request is refused when ``ttft + margin > budget``; the margin (10 ms unless
configured) stands for what the client's TTFT adds to the engine's: the network and the
write of the first chunk. FCFS scheduling means requests arriving later never delay this
one's prefill; the ``D`` decoders are counted as if all were decoding for the whole wait,
which errs on the side of refusing. Pure arithmetic over the
:class:`~analyzers.budget.engine.scheduler.Scheduler`'s state: must not import ``loadgen``,
httpx or polars.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from analyzers.budget.engine.scheduler import Scheduler, SeqSpec, StepTimer
from analyzers.budget.engine.step import SequenceWork
from analyzers.errors import BudgetError

ADMISSION_MARKER = "rejected by admission control"
"""The phrase every refusal's message starts with (the replay's ``rejected`` outcome)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionPolicy:
    """Refuse a request whose estimated time to first token plus ``margin_s`` (what the
    client sees beyond the engine: the network, the response write) exceeds
    ``ttft_budget_s``."""

    ttft_budget_s: float
    margin_s: float = 0.010

    def __post_init__(self) -> None:
        if not (math.isfinite(self.ttft_budget_s) and self.ttft_budget_s > 0):
            raise BudgetError(f"admission TTFT budget must be > 0 s, got {self.ttft_budget_s}")
        if not (math.isfinite(self.margin_s) and 0 <= self.margin_s < self.ttft_budget_s):
            raise BudgetError(f"admission margin must be in [0, budget) s, got {self.margin_s}")


@dataclass(frozen=True, slots=True, kw_only=True)
class TtftEstimate:
    """The estimate of one arrival on one instance (see the module docstring)."""

    backlog_tokens: int
    prompt_tokens: int
    decoders: int
    chunk_tokens: int
    steps: int
    step_s: float
    extra_s: float

    @property
    def ttft_s(self) -> float:
        """``steps x step_s + extra_s``."""
        return self.steps * self.step_s + self.extra_s


def estimate_ttft(
    scheduler: Scheduler,
    pending: Sequence[SeqSpec],
    spec: SeqSpec,
    timer: StepTimer,
    *,
    extra_s: float = 0.0,
) -> TtftEstimate:
    """Estimate ``spec``'s time to first token if it joined ``scheduler`` now, behind the
    ``pending`` arrivals not yet handed to it."""
    limits = scheduler.limits
    backlog = scheduler.prefill_backlog() + sum(p.prompt_tokens for p in pending)
    contexts = scheduler.contexts() + [p.prompt_tokens for p in pending]
    decoders = min(len(contexts), limits.max_num_seqs - 1)
    chunk = max(1, limits.max_batched_tokens - decoders)
    need = backlog + spec.prompt_tokens
    steps = -(-need // chunk)
    mean_ctx = round(sum(contexts) / len(contexts)) if contexts else 0
    work = [SequenceWork(new_tokens=min(chunk, need), cached_tokens=0)]
    work += [SequenceWork(new_tokens=1, cached_tokens=mean_ctx)] * decoders
    return TtftEstimate(
        backlog_tokens=backlog,
        prompt_tokens=spec.prompt_tokens,
        decoders=decoders,
        chunk_tokens=chunk,
        steps=steps,
        step_s=timer(work),
        extra_s=extra_s + spec.encoder_s,
    )


def refusal(policy: AdmissionPolicy, estimate: TtftEstimate, *, where: str) -> str | None:
    """The 429 message when ``estimate`` exceeds the budget, else None."""
    if estimate.ttft_s + policy.margin_s <= policy.ttft_budget_s:
        return None
    return (
        f"request {ADMISSION_MARKER}: estimated time to first token "
        f"{estimate.ttft_s:.3f} s + margin {policy.margin_s:.3f} s exceeds the budget of "
        f"{policy.ttft_budget_s:.3f} s "
        f"({estimate.backlog_tokens} prompt tokens queued ahead + {estimate.prompt_tokens} "
        f"of this prompt on {where}, {estimate.chunk_tokens} per {estimate.step_s * 1e3:.1f} "
        f"ms step beside {estimate.decoders} decoding)"
    )
