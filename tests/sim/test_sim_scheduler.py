"""The pure scheduler: step times equal the budget model, batching, KV waits, preemption.

Everything here runs in model time without a clock: ``drive`` is a tiny discrete-event loop
(arrivals join at step boundaries, exactly what loadgen.sim.instance does in real time).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from analyzers.budget import decode_step_time_s, prefill_time_s
from analyzers.budget.engine.scheduler import (
    Role,
    Scheduler,
    SchedulerLimits,
    SeqSpec,
    StepResult,
)
from analyzers.errors import CapacityError
from loadgen.sim.physics import HardwareChoice, Physics

PHYS = Physics(HardwareChoice(model="llama-3.1-8b", gpu="h100"), chunk_tokens=512)


def sched(role: Role = "mixed", **kw: object) -> Scheduler:
    limits = SchedulerLimits(**{"num_blocks": 100_000, "max_batched_tokens": 512, **kw})  # type: ignore[arg-type]
    return Scheduler(PHYS.step_s, limits, role=role)


@dataclass
class Timeline:
    """Per sequence: arrival, first step start, prefill end, token times (model s)."""

    arrival: dict[int, float] = field(default_factory=dict)
    first_step: dict[int, float] = field(default_factory=dict)
    prefill_end: dict[int, float] = field(default_factory=dict)
    tokens: dict[int, list[float]] = field(default_factory=dict)
    cached: dict[int, int] = field(default_factory=dict)

    def queue(self, i: int) -> float:
        return self.first_step[i] - self.arrival[i]

    def prefill(self, i: int) -> float:
        return self.prefill_end[i] - self.first_step[i]

    def tpot(self, i: int) -> float:
        t = self.tokens[i]
        return (t[-1] - t[0]) / (len(t) - 1)


def drive(s: Scheduler, arrivals: list[tuple[float, SeqSpec]]) -> Timeline:
    tl = Timeline()
    pending = sorted(arrivals, key=lambda a: a[0])
    now = 0.0
    while pending or s.has_work():
        while pending and pending[0][0] <= now:
            t, spec = pending.pop(0)
            tl.arrival[spec.seq_id] = t
            s.add(spec)
        result = s.step()
        if result is None:
            assert pending, "blocked with nothing left to arrive"
            now = max(now, pending[0][0])
            continue
        record(tl, result, now)
        now += result.duration_s
    return tl


def record(tl: Timeline, r: StepResult, start: float) -> None:
    end = start + r.duration_s
    for a in r.admitted:
        tl.first_step.setdefault(a.seq_id, start)
        tl.cached[a.seq_id] = a.cached_tokens
    for i in r.prefilled:
        tl.prefill_end[i] = end
    for i in r.sampled:
        tl.tokens.setdefault(i, []).append(end)


def test_batch_one_equals_the_budget_model() -> None:
    s = sched()
    tl = drive(s, [(0.0, SeqSpec(seq_id=1, prompt_tokens=1500, max_tokens=6))])
    expected = prefill_time_s(PHYS.model, PHYS.deploy, 1500, chunk_tokens=512)
    assert tl.queue(1) == 0.0
    assert tl.prefill(1) == pytest.approx(expected, rel=1e-12)
    gaps = [b - a for a, b in zip(tl.tokens[1], tl.tokens[1][1:], strict=False)]
    predicted = [decode_step_time_s(PHYS.model, PHYS.deploy, [1500 + k]) for k in range(5)]
    assert gaps == pytest.approx(predicted, rel=1e-12)
    assert len(tl.tokens[1]) == 6
    assert s.pool.usage() == 0.0  # all blocks back


def test_chunked_prefill_and_decode_share_steps() -> None:
    s = sched()
    s.add(SeqSpec(seq_id=1, prompt_tokens=10, max_tokens=50))
    s.step()  # 1 is decoding now
    s.add(SeqSpec(seq_id=2, prompt_tokens=2000, max_tokens=5))
    r = s.step()
    assert r is not None
    assert r.batch_tokens == 512  # 1 decode token + 511 prompt tokens of 2
    assert r.sampled == (1,)
    assert r.admitted[0].seq_id == 2


def test_max_num_seqs_limits_the_batch() -> None:
    s = sched(max_num_seqs=2)
    for i in range(3):
        s.add(SeqSpec(seq_id=i, prompt_tokens=8, max_tokens=4))
    s.step()
    assert (s.num_running, s.num_waiting) == (2, 1)


def test_queue_grows_past_saturation_while_prefill_stays_flat() -> None:
    def run(rate: float) -> tuple[float, float]:
        n = 120
        arrivals = [
            (i / rate, SeqSpec(seq_id=i, prompt_tokens=1000, max_tokens=200)) for i in range(n)
        ]
        tl = drive(sched(max_num_seqs=16, max_batched_tokens=2048), arrivals)
        tail = range(n - 20, n)
        queue = sum(tl.queue(i) for i in tail) / 20
        prefill = sum(tl.prefill(i) for i in tail) / 20
        return queue, prefill

    light_q, light_p = run(5.0)
    heavy_q, heavy_p = run(60.0)
    assert light_q < 0.01
    assert heavy_q > 50 * max(light_q, 0.01)
    assert heavy_p < 3 * light_p  # prefill is per-step work, not waiting


def test_kv_exhaustion_makes_requests_wait() -> None:
    # 40 blocks x 16 = 640 tokens: two 300-token lifetimes fit, the third waits.
    s = sched(num_blocks=40)
    arrivals = [(0.0, SeqSpec(seq_id=i, prompt_tokens=200, max_tokens=100)) for i in range(3)]
    tl = drive(s, arrivals)
    assert tl.queue(0) == tl.queue(1) == 0.0
    assert tl.queue(2) == pytest.approx(tl.tokens[0][-1])  # admitted when 0 finished
    with pytest.raises(CapacityError):
        s.add(SeqSpec(seq_id=9, prompt_tokens=600, max_tokens=100))


def test_preemption_frees_memory_for_running_sequences() -> None:
    s = sched(num_blocks=30, preempt=True)
    arrivals = [(0.0, SeqSpec(seq_id=i, prompt_tokens=150, max_tokens=150)) for i in range(3)]
    tl = drive(s, arrivals)
    assert s.preemptions > 0
    assert all(len(tl.tokens[i]) == 150 for i in range(3))
    assert s.pool.usage() == 0.0


def test_prefix_cache_skips_shared_blocks() -> None:
    s = sched(block_size=16)
    shared = tuple(range(1, 51))  # 50 blocks = 800 tokens
    first = SeqSpec(seq_id=1, prompt_tokens=900, max_tokens=2, block_hashes=(*shared, 77, 78))
    second = SeqSpec(seq_id=2, prompt_tokens=900, max_tokens=2, block_hashes=(*shared, 88, 89))
    tl = drive(s, [(0.0, first), (1.0, second)])
    assert tl.cached == {1: 0, 2: 800}
    assert tl.prefill(2) < tl.prefill(1) / 3
    expected = prefill_time_s(PHYS.model, PHYS.deploy, 100, 800, chunk_tokens=512)
    assert tl.prefill(2) == pytest.approx(expected, rel=1e-12)
    assert (s.prefix_queries, s.prefix_hits) == (1800, 800)


def test_fully_cached_prompt_still_computes_its_last_token() -> None:
    s = sched(block_size=16)
    spec = {"prompt_tokens": 64, "max_tokens": 1, "block_hashes": (1, 2, 3, 4)}
    tl = drive(s, [(0.0, SeqSpec(seq_id=1, **spec)), (1.0, SeqSpec(seq_id=2, **spec))])  # type: ignore[arg-type]
    assert tl.cached[2] == 48


def test_prefill_role_holds_blocks_until_release() -> None:
    s = sched(role="prefill", num_blocks=100)
    s.add(SeqSpec(seq_id=1, prompt_tokens=160, max_tokens=50))
    r = s.step()
    assert r is not None
    assert r.prefilled == (1,)
    assert r.sampled == ()
    assert not s.has_work()
    assert s.pool.num_free == 90
    s.release(1)
    assert s.pool.num_free == 100


def test_decode_role_samples_the_first_token_in_its_first_step() -> None:
    s = sched(role="decode")
    s.add(SeqSpec(seq_id=1, prompt_tokens=1000, max_tokens=3))
    r = s.step()
    assert r is not None
    assert r.sampled == (1,)
    assert r.batch_tokens == 1
    assert r.duration_s == pytest.approx(decode_step_time_s(PHYS.model, PHYS.deploy, [999]))


@pytest.mark.parametrize("kw", [{}, {"num_blocks": 200}, {"num_blocks": 200, "preempt": True}])
def test_the_step_clock_fast_path_equals_the_per_sequence_timer(kw: dict[str, object]) -> None:
    # With a StepClock the decoding head of the batch is applied as it is planned and a
    # queue head that did not fit is not retried until the pool changes; with a plain
    # timer every sequence goes through the plan. The steps must be the same, bit for bit.
    limits = SchedulerLimits(**{"num_blocks": 100_000, "max_batched_tokens": 512, **kw})  # type: ignore[arg-type]
    arrivals = [
        (
            0.02 * i,
            SeqSpec(
                seq_id=i,
                prompt_tokens=150 + 97 * (i % 5),
                max_tokens=5 + 11 * (i % 4),
                block_hashes=tuple(range(1, 1 + (i % 3) * 6)),
            ),
        )
        for i in range(24)
    ]
    fast = Scheduler(PHYS.clock, limits)
    plain = Scheduler(PHYS.step_s, limits)
    assert fast._clock is not None
    assert plain._clock is None
    assert drive(fast, arrivals) == drive(plain, arrivals)
