"""Chunked prefill in the tail: what the chunk size does to decode ITL and TTFT at p99.

A chunked-prefill engine gives every step a token budget ``C`` (vLLM's
``max_num_batched_tokens``): the running decodes take one token each, a prompt the rest,
so a prompt of ``P`` tokens is computed over ``k = ceil(P / C)`` steps, each also carrying
the ``B`` decodes, and every decode that shares a step with a chunk waits for the whole
step. The same total prefill work is done chunked or not; what moves is *where* it lands:

    t_dec = step(B x [1 token over ctx])                     a decode step alone
    t_mix = step([min(C, P) tokens] + B x [1 token over ctx])  a decode beside a chunk
    TTFT  >= k x t_mix                                       the prompt's own steps
    g     = lambda k / (lambda k + (1 - lambda k t_mix) / t_dec)   share of steps (of
                                                             a decode's gaps) with a chunk
    ITL p99 ~ t_mix when g > 1 %, else t_dec                 (lambda: per instance)

Small ``C``: short mixed steps (good ITL) but many of them per prompt (TTFT grows, and the
weights are read once per step, so capacity falls); large ``C`` or none: the opposite.
The figures that decide come from the virtual-time engine
(:mod:`analyzers.budget.engine.timeline`, the simulator's scheduler and step model): the
same arrivals replayed once per chunk size at the offered load (TTFT and ITL p50/p99) and
once all at once (capacity, output tokens/s); the closed form above is printed beside
them as the arithmetic. ``recommend`` picks the chunk size of the highest capacity whose
TTFT and ITL p99 meet both targets, or says which target binds.

Pure Python: must not import ``loadgen``, httpx or polars, and does no I/O.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from analyzers.budget.chunksteps import closed_form, ms
from analyzers.budget.engine.scheduler import Scheduler, SchedulerLimits, SeqSpec, StepTimer
from analyzers.budget.engine.step import SequenceWork
from analyzers.budget.engine.timeline import (
    UNCHUNKED_BUDGET,
    Arrival,
    RouterPolicy,
    VirtualCluster,
    VirtualInstance,
)
from analyzers.budget.formatting import fmt
from analyzers.errors import BudgetError

DEFAULT_CHUNKS: tuple[int | None, ...] = (256, 512, 1024, 2048, 4096, 8192, 16384, None)
"""The chunk sizes ``plan chunk`` compares (None: unchunked prefill)."""
MIXED_SHARE_FOR_P99 = 0.01
"""Above this share of steps carrying a chunk, a decode's p99 gap is a mixed step."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSetup:
    """One monolith the chunk sizes are tried on: its step timer, its batch and memory
    limits (``max_batched_tokens`` is replaced by each chunk size), replicas and router."""

    timer: StepTimer
    limits: SchedulerLimits
    replicas: int = 1
    router: RouterPolicy = "least-loaded"
    max_steps: int = 2_000_000

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise BudgetError(f"need at least one replica, got {self.replicas}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkRun:
    """One chunk size over the arrivals, in the virtual-time engine (model seconds)."""

    chunk_tokens: int | None
    served: int
    ttft_p50_s: float
    ttft_p99_s: float
    itl_p50_s: float
    itl_p99_s: float
    itl_max_s: float
    """The longest gap: rarer spikes than 1 in 100 (unchunked prefill at a low rate) show
    here and not in the p99."""
    mean_batch: float
    """Sequences per step (tokens sampled / steps) at the offered load."""
    capacity_tokens_per_s: float
    """Output tokens per second with every request arriving at once (0: not measured)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkRow:
    """One chunk size: the engine's figures and the closed form beside them."""

    run: ChunkRun
    steps_per_prompt: int
    decode_step_s: float
    mixed_step_s: float
    mixed_share: float
    itl_p99_closed_s: float
    ttft_floor_s: float
    meets_ttft: bool | None = None
    meets_itl: bool | None = None

    @property
    def label(self) -> str:
        """The chunk size as printed (``unchunked`` for None)."""
        c = self.run.chunk_tokens
        return "unchunked" if c is None else str(c)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkLine:
    """One figure and the arithmetic that gives it."""

    label: str
    value: str
    chain: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkPlan:
    """``loadgen plan chunk``'s answer: one row per chunk size, the arithmetic of each and
    the recommendation for the targets (``recommended``: a row's label; "" for none)."""

    model: str
    where: str
    load: str
    rows: tuple[ChunkRow, ...]
    lines: tuple[ChunkLine, ...]
    ttft_target_s: float | None
    itl_target_s: float | None
    recommended: str
    verdict: str
    deployment_line: str = ""
    """What chunking at the deployment's own chunk size does against unchunked prefill."""


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default); 0 when empty."""
    if not sorted_values:
        return 0.0
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def poisson_arrivals(
    n: int, rate: float, prompt_tokens: int, output_tokens: int, *, seed: int = 1
) -> list[Arrival]:
    """``n`` requests of one shape, Poisson at ``rate`` per second (seeded)."""
    if n < 1 or not rate > 0:
        raise BudgetError(f"need n >= 1 requests at a rate > 0, got {n} at {rate}")
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        out.append(
            Arrival(key=i, arrival_s=t, prompt_tokens=prompt_tokens, output_tokens=output_tokens)
        )
        t += rng.expovariate(rate)
    return out


def _replay(
    arrivals: Sequence[Arrival], setup: EngineSetup, chunk: int | None, *, at_once: bool
) -> VirtualCluster:
    longest = max(a.prompt_tokens for a in arrivals)
    budget = chunk if chunk is not None else max(UNCHUNKED_BUDGET, longest)
    limits = replace(setup.limits, max_batched_tokens=budget)
    front = [
        VirtualInstance(f"r{i}", Scheduler(setup.timer, limits)) for i in range(setup.replicas)
    ]
    cluster = VirtualCluster(front, router=setup.router, record_tokens=not at_once)
    origin = min(a.arrival_s for a in arrivals)
    for a in arrivals:
        spec = SeqSpec(
            seq_id=a.key,
            prompt_tokens=a.prompt_tokens,
            max_tokens=a.output_tokens,
            cached_tokens=min(a.cached_tokens, a.prompt_tokens - 1),
        )
        cluster.arrive(spec, 0.0 if at_once else a.arrival_s - origin)
    cluster.run(max_steps=setup.max_steps)
    return cluster


def chunk_run(
    arrivals: Sequence[Arrival], setup: EngineSetup, chunk: int | None, *, capacity: bool = True
) -> ChunkRun:
    """Replay ``arrivals`` with a step budget of ``chunk`` tokens (None: unchunked): TTFT
    and ITL at their own times, and (``capacity``) output tokens/s with all at once."""
    if not arrivals:
        raise BudgetError("no requests to replay")
    if chunk is not None and chunk < 1:
        raise BudgetError(f"chunk size must be >= 1 token, got {chunk}")
    cluster = _replay(arrivals, setup, chunk, at_once=False)
    ttfts: list[float] = []
    gaps: list[float] = []
    sampled = 0
    for track in cluster.tracks.values():
        if track.sample is None:
            continue
        ttfts.append(track.sample - track.arrival)
        times = track.times
        sampled += len(times)
        gaps.extend(b - a for a, b in itertools.pairwise(times))
    if not ttfts:
        raise BudgetError("no request fits the KV cache: nothing to replay")
    ttfts.sort()
    gaps.sort()
    tokens_per_s = 0.0
    if capacity:
        full = _replay(arrivals, setup, chunk, at_once=True)
        served = [a for a in arrivals if a.key not in full.rejected]
        span = max(inst.floor for inst in full.front)  # the last step's end
        tokens_per_s = sum(a.output_tokens for a in served) / span if span > 0 else 0.0
    return ChunkRun(
        chunk_tokens=chunk,
        served=len(ttfts),
        ttft_p50_s=quantile(ttfts, 0.5),
        ttft_p99_s=quantile(ttfts, 0.99),
        itl_p50_s=quantile(gaps, 0.5),
        itl_p99_s=quantile(gaps, 0.99),
        itl_max_s=gaps[-1] if gaps else 0.0,
        mean_batch=sampled / cluster.steps if cluster.steps else 0.0,
        capacity_tokens_per_s=tokens_per_s,
    )


def plan_chunks(
    arrivals: Sequence[Arrival],
    setup: EngineSetup,
    *,
    chunks: Sequence[int | None] = DEFAULT_CHUNKS,
    ttft_target_s: float | None = None,
    itl_target_s: float | None = None,
    model: str,
    where: str,
    load: str,
    capacity: bool = True,
    deployment_chunk: int | None = None,
) -> ChunkPlan:
    """Every chunk size of ``chunks`` over ``arrivals`` on ``setup``, with the closed form
    and, given both targets, the recommendation (see the module docstring); with
    ``deployment_chunk``, the line of what that chunk size does against unchunked."""
    if not chunks:
        raise BudgetError("no chunk size to compare")
    if len(arrivals) < 2:
        raise BudgetError("need at least 2 requests")
    first, last = min(a.arrival_s for a in arrivals), max(a.arrival_s for a in arrivals)
    rate = (len(arrivals) - 1) / (last - first) if last > first else 0.0
    lam = rate / setup.replicas
    prompt = round(sum(a.prompt_tokens - a.cached_tokens for a in arrivals) / len(arrivals))
    output = round(sum(a.output_tokens for a in arrivals) / len(arrivals))
    rows: list[ChunkRow] = []
    lines: list[ChunkLine] = []
    for chunk in chunks:
        run = chunk_run(arrivals, setup, chunk, capacity=capacity)
        batch = max(0, round(run.mean_batch) - 1)
        k, t_dec, t_mix, share = closed_form(
            setup.timer, chunk, prompt_tokens=prompt, output_tokens=output, batch=batch, rate=lam
        )
        itl_closed = t_mix if share > MIXED_SHARE_FOR_P99 else t_dec
        row = ChunkRow(
            run=run,
            steps_per_prompt=k,
            decode_step_s=t_dec,
            mixed_step_s=t_mix,
            mixed_share=share,
            itl_p99_closed_s=itl_closed,
            ttft_floor_s=k * t_mix,
            meets_ttft=None if ttft_target_s is None else run.ttft_p99_s <= ttft_target_s,
            meets_itl=None if itl_target_s is None else run.itl_p99_s <= itl_target_s,
        )
        rows.append(row)
        c = prompt if chunk is None else chunk
        two = ""
        if chunk is None or chunk >= 2 * prompt:
            t_two = setup.timer(
                [
                    SequenceWork(new_tokens=prompt, cached_tokens=0),
                    SequenceWork(new_tokens=prompt, cached_tokens=0),
                    *[SequenceWork(new_tokens=1, cached_tokens=prompt + output // 2)] * batch,
                ]
            )
            two = f"; two prompts queued together share one step: {ms(t_two)}"
        lines.append(
            ChunkLine(
                label=f"chunk {row.label}",
                value=f"ITL p99 {ms(run.itl_p99_s)}, TTFT p99 {ms(run.ttft_p99_s)}",
                chain=(
                    f"k = ceil({prompt:,} / {c:,}) = {k} steps per prompt; t_dec = step({batch} "
                    f"decodes) = {ms(t_dec)}; t_mix = step({min(c, prompt):,} prefill + {batch} "
                    f"decodes) = {ms(t_mix)}; g = {fmt(lam * k, 3)}/s mixed steps among "
                    f"{fmt(lam * k, 3)} + (1 - {fmt(lam * k, 3)} x {ms(t_mix)}) / {ms(t_dec)} "
                    f"per s = {share:.2%} of the steps -> ITL p99 ~ "
                    f"{'t_mix' if share > MIXED_SHARE_FOR_P99 else 't_dec'} = {ms(itl_closed)} "
                    f"(engine {ms(run.itl_p99_s)}); TTFT >= k x t_mix = {ms(k * t_mix)} "
                    f"(engine p99 {ms(run.ttft_p99_s)}){two}"
                ),
            )
        )
    recommended, verdict = recommend(rows, ttft_target_s, itl_target_s)
    effect = ""
    if deployment_chunk is not None:
        runs = {row.run.chunk_tokens: row.run for row in rows}
        base = runs.get(None) or chunk_run(arrivals, setup, None, capacity=False)
        mine = runs.get(deployment_chunk) or chunk_run(
            arrivals, setup, deployment_chunk, capacity=False
        )
        effect = chunk_effect_line(base, mine)
    return ChunkPlan(
        model=model,
        where=where,
        load=load,
        rows=tuple(rows),
        lines=tuple(lines),
        ttft_target_s=ttft_target_s,
        itl_target_s=itl_target_s,
        recommended=recommended,
        verdict=verdict,
        deployment_line=effect,
    )


def recommend(
    rows: Sequence[ChunkRow], ttft_target_s: float | None, itl_target_s: float | None
) -> tuple[str, str]:
    """The label of the row of highest capacity meeting both targets (ties: the larger
    chunk, listed later), and a sentence; ``("", why)`` when none does or no targets."""
    if ttft_target_s is None or itl_target_s is None:
        return "", "no recommendation: give both a TTFT and an ITL p99 target"
    both = [r for r in rows if r.meets_ttft and r.meets_itl]
    targets = f"TTFT p99 <= {ms(ttft_target_s)} and ITL p99 <= {ms(itl_target_s)}"
    if both:
        best = max(enumerate(both), key=lambda pair: (pair[1].run.capacity_tokens_per_s, pair[0]))[
            1
        ]
        return best.label, (
            f"recommended chunk size: {best.label} (max_num_batched_tokens), the highest "
            f"capacity ({fmt(best.run.capacity_tokens_per_s, 4)} output tokens/s) of the "
            f"{len(both)} of {len(rows)} sizes meeting {targets}: TTFT p99 "
            f"{ms(best.run.ttft_p99_s)}, ITL p99 {ms(best.run.itl_p99_s)}"
        )
    itl_ok = [r for r in rows if r.meets_itl]
    ttft_ok = [r for r in rows if r.meets_ttft]
    best_itl = min(rows, key=lambda r: r.run.itl_p99_s)
    best_ttft = min(rows, key=lambda r: r.run.ttft_p99_s)
    if not itl_ok and not ttft_ok:
        binds = (
            f"both bind: the best ITL p99 is {ms(best_itl.run.itl_p99_s)} (chunk "
            f"{best_itl.label}), the best TTFT p99 {ms(best_ttft.run.ttft_p99_s)} (chunk "
            f"{best_ttft.label})"
        )
    elif not itl_ok:
        binds = (
            f"the ITL target binds: the best ITL p99 is {ms(best_itl.run.itl_p99_s)} "
            f"(chunk {best_itl.label})"
        )
    elif not ttft_ok:
        binds = (
            f"the TTFT target binds: the best TTFT p99 is {ms(best_ttft.run.ttft_p99_s)} "
            f"(chunk {best_ttft.label})"
        )
    else:
        binds = (
            "the two targets pull apart: ITL is met by "
            f"{', '.join(r.label for r in itl_ok)}, TTFT by {', '.join(r.label for r in ttft_ok)}"
        )
    return "", f"no chunk size meets {targets}; {binds} (add replicas or lower the load)"


def chunk_effect_line(base: ChunkRun, chunked: ChunkRun) -> str:
    """One sentence: what chunking at ``chunked.chunk_tokens`` does against ``base``
    (unchunked) to ITL p99 and TTFT p99."""
    d_itl = chunked.itl_p99_s - base.itl_p99_s
    d_ttft = chunked.ttft_p99_s - base.ttft_p99_s
    return (
        f"chunked prefill at {chunked.chunk_tokens} tokens per step: ITL p99 "
        f"{ms(chunked.itl_p99_s)} vs {ms(base.itl_p99_s)} unchunked ({d_itl * 1e3:+.1f} ms), "
        f"TTFT p99 {ms(chunked.ttft_p99_s)} vs {ms(base.ttft_p99_s)} "
        f"({d_ttft * 1e3:+.1f} ms), schedule replay of {chunked.served:,} requests"
    )
