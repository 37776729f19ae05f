"""The iteration-level scheduler of one instance: continuous batching, chunked prefill, KV.

Pure and clock-free: :meth:`Scheduler.step` plans one forward step, applies it and returns
what happened (:class:`StepResult`) and how long it took in *model* seconds. Two drivers
use it: the engine simulator steps it in real time (``loadgen.sim.instance``), and the
TTFT decomposition replays a run's arrivals through it in virtual time
(:mod:`analyzers.budget.engine.timeline`) to predict each request's terms under the run's own
load. The policy follows vLLM's v1 scheduler:

- every step has a token budget (``max_batched_tokens``); running sequences are served
  first, in admission order, each taking the tokens it still needs (1 when decoding, the
  rest of its prompt, chunked to the budget, when prefilling); then waiting sequences are
  admitted first come first served while the budget, ``max_num_seqs`` and the KV cache
  allow. A waiting sequence that does not fit blocks the ones behind it;
- a sequence samples a token in the step that computes its last known token: the step that
  finishes its prompt yields the first output token, every later step one more;
- KV blocks: without ``preempt`` a sequence reserves blocks for its whole life (prompt plus
  ``max_tokens``) at admission, so it never runs out later; with ``preempt`` it takes blocks
  as its tokens are computed, and when none is left the newest running sequence is
  preempted (its blocks freed, recomputed from scratch when readmitted);
- the prefix cache (:mod:`analyzers.budget.engine.kvblocks`): at first admission the longest run
  of cached prompt blocks is taken instead of computed, keeping at least one token to
  compute; a sequence without block hashes may instead state how many of its prompt
  tokens the cache held (``SeqSpec.cached_tokens``, from a server's reported usage);
- roles: ``mixed`` (a monolith replica), ``prefill`` (a sequence leaves once its prompt is
  computed; its blocks stay held until :meth:`Scheduler.release`, i.e. until its KV cache
  has been shipped) and ``decode`` (a sequence arrives with its prompt's KV already computed
  but for the last token, whose step samples the first output token).

Pure Python: must not import ``loadgen``, httpx or polars.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from analyzers.budget.engine.kvblocks import BlockPool
from analyzers.budget.engine.step import EXACT_SUMS, SequenceWork, StepClock
from analyzers.errors import CapacityError

Role = Literal["mixed", "prefill", "decode"]
StepTimer = Callable[[Sequence[SequenceWork]], float]


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerLimits:
    """Batch and memory limits of one instance."""

    num_blocks: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_batched_tokens: int = 2048
    prefix_cache: bool = True
    preempt: bool = False

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` tokens of KV."""
        return -(-tokens // self.block_size)


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqSpec:
    """What one request asks of an instance."""

    seq_id: int
    prompt_tokens: int
    max_tokens: int
    block_hashes: tuple[int, ...] = ()
    encoder_s: float = 0.0
    cached_tokens: int = 0
    """Prompt tokens known to be cached when there are no ``block_hashes`` to match (a
    reconstruction from reported usage); their blocks are allocated, not shared."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """A sequence admitted for the first time, with the prompt tokens the cache supplied."""

    seq_id: int
    cached_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    """One forward step: its duration in model seconds and what it did to which sequences."""

    duration_s: float
    batch_tokens: int
    admitted: tuple[Admission, ...]
    """Sequences scheduled for the first time: their queueing ends as this step starts."""
    prefilled: tuple[int, ...]
    """Sequences whose prompt this step finished computing (their prefill ends with it)."""
    sampled: tuple[int, ...]
    """Sequences that produced one output token at the end of this step."""
    finished: tuple[int, ...]
    """Sequences that produced their last token (their blocks are free again)."""
    preempted: tuple[int, ...]


class _Seq:
    __slots__ = (
        "admitted",
        "blocks",
        "computed",
        "encoded",
        "generated",
        "hashed",
        "max_tokens",
        "prompt",
        "registered",
        "seq_id",
        "spec",
    )

    def __init__(self, spec: SeqSpec) -> None:
        self.spec = spec
        # The spec's fields the step reads for every sequence, every step, kept at hand.
        self.seq_id = spec.seq_id
        self.prompt = spec.prompt_tokens
        self.max_tokens = spec.max_tokens
        self.computed = 0
        self.generated = 0
        self.blocks: list[int] = []
        self.registered = 0
        self.hashed = len(spec.block_hashes)
        """Prompt blocks with a hash (``registered`` reaches it once the prompt is done)."""
        self.encoded = False
        self.admitted = False

    @property
    def known(self) -> int:
        """Tokens whose KV must exist before the next token can be sampled."""
        return self.spec.prompt_tokens + self.generated


class _Head:
    """The decoding sequences at the head of a step's batch, applied as the step is planned
    (one new token each; a ``StepClock`` with sums times the step): their sums, the ids
    that sampled and the sequences that finished (their blocks are freed after the
    step's admissions, as for the rest of the batch)."""

    __slots__ = ("done", "held", "sampled", "seqs", "twice")

    def __init__(self) -> None:
        self.seqs: list[_Seq] = []
        self.held = 0
        self.twice = 0
        self.sampled: list[int] = []
        self.done: list[_Seq] = []


class Scheduler:
    """Waiting and running sequences of one instance and its KV cache (see module doc)."""

    def __init__(self, timer: StepTimer, limits: SchedulerLimits, *, role: Role = "mixed") -> None:
        self.limits = limits
        self.role: Role = role
        self.pool = BlockPool(limits.num_blocks, caching=limits.prefix_cache and role != "decode")
        self._timer = timer
        self._clock = timer if isinstance(timer, StepClock) and timer.sums else None
        self._waiting: deque[_Seq] = deque()
        self._running: list[_Seq] = []
        self._held: dict[int, _Seq] = {}
        self._seqs: dict[int, _Seq] = {}
        self._blocked: tuple[_Seq, int] | None = None
        """The queue's head and the pool's version when it last did not fit (no
        preemption): it cannot fit before the pool changes, so it is not asked again."""
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.preemptions = 0

    @property
    def num_waiting(self) -> int:
        """Sequences not yet (or no longer, after preemption) in the batch."""
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        """Sequences in the batch."""
        return len(self._running)

    def has_work(self) -> bool:
        """Whether any sequence waits or runs."""
        return bool(self._waiting or self._running)

    def prefill_backlog(self) -> int:
        """Prompt tokens still to compute, of every waiting and running sequence (the
        prefix cache not counted: an upper bound)."""
        total = 0
        for seq in self._waiting:
            total += max(0, seq.spec.prompt_tokens - seq.computed)
        for seq in self._running:
            total += max(0, seq.spec.prompt_tokens - seq.computed)
        return total

    def contexts(self) -> list[int]:
        """Known tokens of every running and waiting sequence (what each will decode over)."""
        return [seq.known for seq in self._running] + [seq.known for seq in self._waiting]

    def _lifetime_tokens(self, spec: SeqSpec) -> int:
        if self.role == "prefill":
            return spec.prompt_tokens
        return spec.prompt_tokens + spec.max_tokens

    def check(self, spec: SeqSpec) -> None:
        """Raise CapacityError if ``spec`` could never fit in this instance's KV cache."""
        need = self.limits.blocks_for(self._lifetime_tokens(spec))
        if need > self.limits.num_blocks:
            cap = self.limits.num_blocks * self.limits.block_size
            raise CapacityError(
                f"request needs {self._lifetime_tokens(spec)} tokens of KV cache, "
                f"the instance holds {cap}"
            )

    def add(self, spec: SeqSpec) -> None:
        """Queue a new sequence (FCFS); raises CapacityError if it can never fit."""
        if spec.seq_id in self._seqs:
            raise ValueError(f"sequence {spec.seq_id} already known")
        self.check(spec)
        seq = _Seq(spec)
        self._seqs[spec.seq_id] = seq
        self._waiting.append(seq)

    def abort(self, seq_id: int) -> None:
        """Forget a sequence wherever it is and free its blocks (client went away)."""
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            return
        if seq in self._running:
            self._running.remove(seq)
        elif seq_id in self._held:
            del self._held[seq_id]
        else:
            self._waiting.remove(seq)
        self.pool.free(seq.blocks)
        seq.blocks = []

    def release(self, seq_id: int) -> None:
        """Free the blocks of a prefilled sequence once its KV cache has left (prefill role)."""
        seq = self._held.pop(seq_id, None)
        if seq is not None:
            self._seqs.pop(seq_id, None)
            self.pool.free(seq.blocks)
            seq.blocks = []

    def _preempt(self, seq: _Seq) -> None:
        self._running.remove(seq)
        self.pool.free(seq.blocks)
        seq.blocks, seq.computed, seq.registered = [], 0, 0
        self._waiting.appendleft(seq)
        self.preemptions += 1

    def _grow(self, seq: _Seq, tokens: int, preempted: list[int]) -> bool:
        """Give ``seq`` blocks for ``tokens`` tokens, preempting the newest; False if it lost."""
        need = self.limits.blocks_for(tokens) - len(seq.blocks)
        while need > self.pool.num_free:
            victim = self._running[-1]
            self._preempt(victim)
            preempted.append(victim.spec.seq_id)
            if victim is seq:
                return False
        if need > 0:
            seq.blocks.extend(self.pool.allocate(need))
        return True

    def _admit(self, seq: _Seq, budget: int, admitted: list[Admission]) -> bool:
        """Try to admit the head of the queue; False when it does not fit."""
        limits, spec = self.limits, seq.spec
        blocked = self._blocked
        if blocked is not None and blocked[0] is seq and blocked[1] == self.pool.version:
            return False  # as last time: nothing it depends on has changed
        first = not seq.admitted
        matched: list[int] = []
        if self.role != "decode" and seq.computed == 0:
            max_hit = (seq.known - 1) // limits.block_size  # compute at least one token
            matched = self.pool.match(spec.block_hashes[:max_hit])
        hit = len(matched) * limits.block_size
        if not matched and first and self.role != "decode" and spec.cached_tokens > 0:
            hit = min(spec.cached_tokens, seq.known - 1)
        # A decode instance gets the prompt's KV over the link, all but the last token.
        start = spec.prompt_tokens - 1 if self.role == "decode" and first else hit
        if limits.preempt:
            tokens = start + min(seq.known - start, budget)
        else:
            tokens = max(start, self._lifetime_tokens(spec))
        new = limits.blocks_for(tokens) - len(matched)
        if not self.pool.can_allocate(new, matched):
            if not limits.preempt:  # with preemption, the step's budget matters too
                self._blocked = (seq, self.pool.version)
            return False
        self.pool.take(matched)
        seq.blocks = [*matched, *self.pool.allocate(new)]
        seq.computed = start
        seq.registered = len(matched)
        self._waiting.popleft()
        self._running.append(seq)
        if first:
            seq.admitted = True
            if self.role != "decode":
                self.prefix_queries += spec.prompt_tokens
                self.prefix_hits += hit
            admitted.append(Admission(seq_id=spec.seq_id, cached_tokens=hit))
        return True

    def step(self) -> StepResult | None:
        """Plan, apply and time one step; None when nothing can run (idle or blocked)."""
        limits = self.limits
        budget = limits.max_batched_tokens
        plan: list[tuple[_Seq, int]] = []
        preempted: list[int] = []
        admitted: list[Admission] = []
        running = self._running
        head = _Head()
        if limits.preempt:
            i = 0
            while i < len(running) and budget > 0:
                seq = running[i]
                n = min(seq.known - seq.computed, budget)
                if not self._grow(seq, seq.computed + n, preempted):
                    break
                plan.append((seq, n))
                budget -= n
                i += 1
        else:  # the same loop without growth (nothing is preempted): the hot path
            append = plan.append
            # The decoding sequences at the head of the batch (most of a busy one) are
            # applied here as they are planned (``_Head``); the rest go through the plan.
            inline = self._clock is not None
            seqs, sampled, done = head.seqs, head.sampled, head.done
            held = twice = 0
            for seq in running:
                if budget <= 0:
                    break
                g = seq.generated
                c = seq.computed
                n = seq.prompt + g - c
                if inline:
                    if n == 1 and g and seq.registered >= seq.hashed:
                        budget -= 1
                        seqs.append(seq)
                        held += c
                        twice += c + c + 1
                        seq.computed = c + 1
                        g = seq.generated = g + 1
                        sampled.append(seq.seq_id)
                        if g >= seq.max_tokens:
                            done.append(seq)  # freed in _apply, after admissions
                        continue
                    inline = False
                if n > budget:
                    n = budget
                append((seq, n))
                budget -= n
            head.held, head.twice = held, twice
        while (
            not preempted
            and self._waiting
            and budget > 0
            and len(self._running) < limits.max_num_seqs
        ):
            seq = self._waiting[0]
            if not self._admit(seq, budget, admitted):
                break
            n = min(seq.known - seq.computed, budget)
            plan.append((seq, n))
            budget -= n
        if not plan and not head.seqs:
            return None
        return self._apply(plan, admitted, preempted, head)

    def _apply(
        self,
        plan: list[tuple[_Seq, int]],
        admitted: list[Admission],
        preempted: list[int],
        head: _Head,
    ) -> StepResult:
        clock = self._clock
        duration = 0.0
        if clock is None:
            duration = self._timer(
                [SequenceWork(new_tokens=n, cached_tokens=seq.computed) for seq, n in plan]
            )
        encoders: list[float] = []
        prefilled: list[int] = []
        sampled = head.sampled
        finished: list[int] = []
        leaving: set[int] = set()
        bs = self.limits.block_size
        role, pool = self.role, self.pool
        for seq in head.done:  # the head's finished sequences, first in the batch
            seq_id = seq.seq_id
            finished.append(seq_id)
            leaving.add(seq_id)
            pool.free(seq.blocks)
            seq.blocks = []
            del self._seqs[seq_id]
        # The step's sums for the clock (before this step's tokens are counted as computed).
        batch_tokens = decoding = busy = len(head.seqs)
        held, twice = head.held, head.twice
        for seq, n in plan:
            c = seq.computed
            g = seq.generated
            if g and c + 1 == seq.prompt + g and seq.registered >= seq.hashed:
                # A decoding sequence (n is 1; encoded and registered long ago): the same
                # sums and bookkeeping as below, without the branches that cannot apply.
                batch_tokens += 1
                held += c
                twice += c + c + 1
                busy += 1
                decoding += 1
                seq.computed = c + 1
                g = seq.generated = g + 1
                seq_id = seq.seq_id
                sampled.append(seq_id)
                if g >= seq.max_tokens:
                    finished.append(seq_id)
                    leaving.add(seq_id)
                    pool.free(seq.blocks)
                    seq.blocks = []
                    del self._seqs[seq_id]
                continue
            batch_tokens += n
            held += c
            twice += n * (c + c + n)
            if n:
                busy += 1
                if n == 1 and c:
                    decoding += 1
            spec = seq.spec
            if not seq.encoded:
                seq.encoded = True
                if spec.encoder_s:
                    encoders.append(spec.encoder_s)  # the vision encoder runs in the first step
            computed = seq.computed = seq.computed + n
            if seq.registered < seq.hashed:
                hashes = spec.block_hashes
                full = min(computed, spec.prompt_tokens) // bs
                pool.register_run(seq.blocks, hashes, seq.registered, min(full, len(hashes)))
                seq.registered = max(seq.registered, full)
            if computed < spec.prompt_tokens + seq.generated:
                continue
            seq_id = spec.seq_id
            if seq.generated == 0 and role != "decode":
                prefilled.append(seq_id)
            if role == "prefill":
                leaving.add(seq_id)
                self._held[seq_id] = seq
                continue
            seq.generated += 1
            sampled.append(seq_id)
            if seq.generated >= spec.max_tokens:
                finished.append(seq_id)
                leaving.add(seq_id)
                pool.free(seq.blocks)
                seq.blocks = []
                del self._seqs[seq_id]
        if leaving:
            self._running = [s for s in self._running if s.seq_id not in leaving]
        if clock is not None:
            if twice < EXACT_SUMS:
                duration = clock.from_sums(batch_tokens, twice, held + batch_tokens, decoding, busy)
            else:  # too large for exact float sums: the per-sequence arithmetic
                duration = clock(
                    [SequenceWork(new_tokens=1, cached_tokens=q.computed - 1) for q in head.seqs]
                    + [SequenceWork(new_tokens=n, cached_tokens=q.computed - n) for q, n in plan]
                )
        for seconds in encoders:
            duration += seconds
        return StepResult(
            duration_s=duration,
            batch_tokens=batch_tokens,
            admitted=tuple(admitted),
            prefilled=tuple(prefilled),
            sampled=tuple(sampled),
            finished=tuple(finished),
            preempted=tuple(preempted),
        )
