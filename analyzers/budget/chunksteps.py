"""Chunked prefill in closed form: one step's time beside a chunk, a prompt's steps.

``closed_form`` gives the figures of :mod:`analyzers.budget.chunking`'s docstring for one
chunk size (``k = ceil(P / C)`` steps per prompt, a decode step alone ``t_dec`` and beside
a chunk ``t_mix``, the share of steps that carry a chunk at a rate); ``chunk_step_lines`` are
the two lines the plain ``loadgen plan`` report prints for its ``--chunk-tokens`` (no load
given: at the planned decode batch). Pure arithmetic over a step timer: must not import
``loadgen``, httpx or polars, and does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzers.budget.engine.scheduler import StepTimer
from analyzers.budget.engine.step import SequenceWork


def ms(s: float) -> str:
    """Seconds as milliseconds, one decimal."""
    return f"{s * 1e3:.1f} ms"


def closed_form(
    timer: StepTimer,
    chunk: int | None,
    *,
    prompt_tokens: int,
    output_tokens: int,
    batch: int,
    rate: float,
) -> tuple[int, float, float, float]:
    """``(k, t_dec, t_mix, g)`` for one chunk size at ``rate`` prompts per second on one
    instance: ``g`` is the share of its steps (of a decode's gaps) that carry a chunk, the
    ``rate x k`` mixed steps per second among those and the decode steps that fill the
    rest of the second, ``(1 - rate x k x t_mix) / t_dec`` (1 when mixed steps fill it)."""
    p = max(1, prompt_tokens)
    c = p if chunk is None else chunk
    k = -(-p // c)
    ctx = p + output_tokens // 2
    decodes = [SequenceWork(new_tokens=1, cached_tokens=ctx)] * max(0, batch)
    t_dec = timer(decodes) if decodes else 0.0
    t_mix = timer([SequenceWork(new_tokens=min(c, p), cached_tokens=p // 2), *decodes])
    mixed = rate * k  # mixed steps per second
    busy = mixed * t_mix  # share of time in them
    if busy >= 1 or t_dec <= 0:
        return k, t_dec, t_mix, 1.0 if mixed > 0 else 0.0
    return k, t_dec, t_mix, mixed / (mixed + (1 - busy) / t_dec)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepLine:
    """A closed-form figure of the plain ``loadgen plan`` report (seconds)."""

    key: str
    title: str
    value_s: float
    chain: str


def chunk_step_lines(
    timer: StepTimer, chunk: int, *, prompt_tokens: int, output_tokens: int, batch: int
) -> tuple[StepLine, ...]:
    """What a chunk size of ``chunk`` does at a decode batch of ``batch``, no load given:
    the decode step beside a chunk (the ITL of every decode sharing it) and the prompt's
    steps (its TTFT floor), each as a line of arithmetic."""
    k, t_dec, t_mix, _ = closed_form(
        timer, chunk, prompt_tokens=prompt_tokens, output_tokens=output_tokens, batch=batch, rate=0
    )
    _, _, t_whole, _ = closed_form(
        timer, None, prompt_tokens=prompt_tokens, output_tokens=output_tokens, batch=batch, rate=0
    )
    c = min(chunk, max(1, prompt_tokens))
    return (
        StepLine(
            key="chunk_itl_s",
            title=f"Decode step beside a {c}-token prefill chunk (batch {batch})",
            value_s=t_mix,
            chain=(
                f"step({c} prefill + {batch} decodes) = {ms(t_mix)} vs {ms(t_dec)} decoding "
                f"alone (+{(t_mix - t_dec) * 1e3:.1f} ms on every decode of the step); "
                f"unchunked, a decode beside the whole {prompt_tokens}-token prompt waits "
                f"{ms(t_whole)}; the p99 at a load: loadgen plan chunk"
            ),
        ),
        StepLine(
            key="chunk_ttft_s",
            title=f"Prefill over {k} chunk steps, each carrying the {batch} decodes",
            value_s=k * t_mix,
            chain=(
                f"ceil({prompt_tokens} / {chunk}) = {k} steps x about {ms(t_mix)} = "
                f"{ms(k * t_mix)} vs {ms(t_whole)} in one step (the TTFT floor beside a "
                f"full decode batch)"
            ),
        ),
    )
