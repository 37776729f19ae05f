"""When each prompt of a slot engine entered its batches, read from the run's own tokens.

A slot engine (llama.cpp, ``-np`` slots) runs one step at a time: a step's batch holds one
token of every slot that generates, then the prompts of its slots, one slot after another,
up to ``batch_tokens`` (llama.cpp's ``-b``); a prompt that does not fit whole takes what is
left and goes on in the next step, and a prompt that finds the batch full waits in its
slot. llama.cpp starts a prompt's clock (``prompt_ms``) when the prompt first enters a
batch, and samples its first token at the end of the step that takes its last tokens.

Every step's end is in the run: it is when the engine's streams got their tokens (each
request's chunk arrivals, on the client's clock, which shifts every server event by the
same return trip; one step's tokens arrive over a few milliseconds, ``SAME_STEP_NS``). So a
prompt that fitted the step that sampled its first token began where that step began: the
end of the step before (the last token any stream got before it), or, on an engine that had
run nothing since, the latest arrival among the prompts of that step, plus the time the
engine takes to hand a request to its queue (``HANDOVER_NS``). A prompt that did not fit
began a step earlier: a step with room left (its batch less its generating slots' tokens
and the prompts it finished) and a free slot took part of the prompt of a request waiting
then whose prompt was longer than that room (one that fitted would have finished there);
of several, the one whose first token came first (the engine sends its slots' tokens in the
order it batches them). A prompt longer than a whole step goes back step by step.

``prompt_starts`` gives each request the time from that start to its first token. The
prefill then comes from the run (less the predicted first token), the queue is the rest,
instead of the prefill being the replay's prediction, which cannot follow how the engine
ordered and batched a burst. It needs neither the budget's speed nor which request took
which slot. Requests without a first token (errors, cancellations) are not in the input:
their tokens are missing from the steps. Must not import loadgen or httpx.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Final

import polars as pl

from analyzers.decompose.load import ROW

PROMPT_MS: Final = "_prompt_ms"
"""Per request: from the start of the step its prompt first entered to its first token, in
ms."""
SAME_STEP_NS: Final = 5_000_000
"""Tokens this close before a request's first token came from the step that sampled it
(an engine writes one step's tokens to its streams one after another): a step's end is
the last token before that."""
HANDOVER_NS: Final = 1_000_000
"""The least time from a request's arrival to its place in a slot engine's queue:
llama-server's HTTP thread reads the request and tokenizes its prompt first (2.4-9 ms
beyond the network on an idle server in the suite's runs). A request that arrives within
it of a step's start is not in that step."""


def prompt_starts(
    requests: pl.DataFrame,
    *,
    slots: int,
    batch_tokens: int | None = None,
    time_scale: float = 1.0,
    handover_ns: int = HANDOVER_NS,
) -> pl.DataFrame:
    """``ROW`` and ``PROMPT_MS`` for every row of ``requests``.

    ``requests`` carries ``ROW``, ``arrival_ns`` (request written plus its network),
    ``first_ns`` (first token), ``end_ns`` (last byte), ``steps_ns`` (the arrival of each
    of its chunks: the ends of the steps that gave it tokens), all on the client's clock,
    and ``tokens`` (its prompt's uncached tokens), one row per request with a first token.
    ``slots``: the slots of the whole deployment; ``batch_tokens``: the step's token budget
    (None: unbounded, no prompt is split); ``time_scale`` divides the result (wall seconds
    per server second).
    """
    rows = requests.get_column(ROW).to_list()
    arrivals = [a + handover_ns for a in requests.get_column("arrival_ns").to_list()]
    firsts: list[int] = requests.get_column("first_ns").to_list()
    tokens = [max(int(t), 1) for t in requests.get_column("tokens").to_list()]
    events = sorted(requests.get_column("steps_ns").explode().drop_nulls().to_list())
    started = sorted(firsts)
    ended = sorted(e for e in requests.get_column("end_ns").to_list() if e is not None)
    budget = batch_tokens if batch_tokens is not None else 2**62

    def step_before(at: int) -> int | None:
        """The end of the step before the one that ends at ``at``: the last token any
        stream got before ``at``'s step."""
        k = bisect_left(events, at - SAME_STEP_NS)
        return int(events[k - 1]) if k else None

    def generating(at: int) -> int:
        """Slots generating in the step that starts at ``at`` (a first token by then, the
        last byte after it)."""
        return bisect_right(started, at + SAME_STEP_NS) - bisect_right(ended, at + SAME_STEP_NS)

    # Requests by the step that sampled their first token (first tokens within
    # ``SAME_STEP_NS`` of the one before), in time order.
    order = sorted(range(len(rows)), key=firsts.__getitem__)
    in_order = [firsts[i] for i in order]
    cohorts: list[list[int]] = []
    for i in order:
        if cohorts and firsts[i] - firsts[cohorts[-1][-1]] <= SAME_STEP_NS:
            cohorts[-1].append(i)
        else:
            cohorts.append([i])
    start = [0] * len(rows)
    split = [0] * len(rows)  # tokens of each prompt taken by steps before its last
    filled: set[int] = set()  # steps (by their start) whose room a split prompt took
    for cohort in cohorts:
        before = step_before(firsts[cohort[0]])
        begun = max(arrivals[i] for i in cohort)
        last_step = begun if before is None else max(before, begun)
        for i in cohort:
            start[i] = last_step
        if before is None or last_step != before:
            continue  # the engine ran nothing before this step: nothing began earlier
        # Prompts this step finished that began in an earlier step: walk back.
        end_at, candidates = last_step, cohort
        for _ in range(len(rows)):
            step_start = step_before(end_at)
            if step_start is None or step_start in filled:
                break
            finished = order[
                bisect_left(in_order, end_at - SAME_STEP_NS) : bisect_right(
                    in_order, end_at + SAME_STEP_NS
                )
            ]
            running = generating(step_start)
            room = budget - running - sum(tokens[j] - split[j] for j in finished)
            if room <= 0 or slots - running - len(finished) <= 0:
                break
            waiting = [
                i
                for i in candidates
                if arrivals[i] <= step_start and tokens[i] - split[i] > room and start[i] == end_at
            ]
            if not waiting:
                break
            taker = waiting[0]
            start[taker] = step_start
            split[taker] += room
            filled.add(step_start)
            # A prompt longer than a whole step began further back still.
            if tokens[taker] - split[taker] <= budget - generating(last_step):
                break
            end_at, candidates = step_start, [taker]
    ms = [(first - at) / 1e6 / time_scale for first, at in zip(firsts, start, strict=True)]
    return pl.DataFrame({ROW: rows, PROMPT_MS: ms}, schema={ROW: pl.UInt32, PROMPT_MS: pl.Float64})
