"""The fixed-delay engine's schedule, its ground truth, and the deadline timer."""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time

import pytest

from loadgen.sim.config import SimConfig
from loadgen.sim.deadline import SpinDeadlineTimer, make_deadline_timer
from loadgen.sim.engine import Emission, FixedDelayEngine, GroundTruth, Phases, Stall
from loadgen.sim.request import SimRequest

pytestmark = pytest.mark.serial  # times a real server or process: run alone


def _request(max_tokens: int, prompt_tokens: int = 0) -> SimRequest:
    return SimRequest(
        api="chat",
        model=None,
        stream=True,
        max_tokens=max_tokens,
        prompt_tokens=prompt_tokens,
        include_usage=True,
        continuous_usage=False,
    )


async def _collect(engine: FixedDelayEngine, request: SimRequest, **kw: object) -> list[Emission]:
    async with engine.running():
        received = time.perf_counter_ns()
        return [e async for e in engine.generate(request, received_ns=received, **kw)]  # type: ignore[arg-type]


def test_phases_add_up_to_the_configured_ttft() -> None:
    engine = FixedDelayEngine(SimConfig(ttft_ms=20, itl_ms=5, prefill_us_per_token=10))
    phases = engine.phases(1000)
    assert phases == Phases(
        queue_ns=0, prefill_ns=25_000_000, transfer_ns=0, first_token_ns=5_000_000
    )
    assert phases.planned_ttft_ns == 30_000_000
    # The first-token step never exceeds the fixed part of TTFT.
    assert FixedDelayEngine(SimConfig(ttft_ms=2, itl_ms=5)).phases(0).first_token_ns == 2_000_000


def test_chunks_follow_absolute_deadlines() -> None:
    config = SimConfig(ttft_ms=4, itl_ms=1, tokens_per_chunk=3)
    engine = FixedDelayEngine(config)
    emissions = asyncio.run(_collect(engine, _request(max_tokens=10)))
    assert [e.tokens for e in emissions] == [3, 3, 3, 1]
    assert [e.first_token for e in emissions] == [0, 3, 6, 9]
    assert [e.last for e in emissions] == [False, False, False, True]
    gaps = {b.due_ns - a.due_ns for a, b in itertools.pairwise(emissions)}
    assert gaps == {3_000_000}
    assert engine.load().running == 0


def test_stall_delays_every_later_chunk() -> None:
    config = SimConfig(ttft_ms=1, itl_ms=1)
    engine = FixedDelayEngine(config)
    emissions = asyncio.run(
        _collect(engine, _request(max_tokens=4), stall=Stall(from_chunk=2, stall_ns=5_000_000))
    )
    gaps = [b.due_ns - a.due_ns for a, b in itertools.pairwise(emissions)]
    assert gaps == [1_000_000, 6_000_000, 1_000_000]


def test_ground_truth_measure() -> None:
    phases = Phases(queue_ns=0, prefill_ns=10_000_000, transfer_ns=0, first_token_ns=10_000_000)
    truth = GroundTruth.measure(
        phases,
        received_ns=1_000_000_000,
        first_ns=1_020_300_000,
        last_ns=1_060_300_000,
        completion_tokens=5,
        instance="r0",
    )
    assert truth.ttft_ms == 20.3
    assert abs(truth.first_token_ms - 10.3) < 1e-9
    assert truth.decode_ms == 40.0
    assert truth.as_json()["mean_itl_ms"] == 10.0


async def _lateness_ms(timer_kind: str, n: int = 40) -> list[float]:
    timer = make_deadline_timer() if timer_kind == "best" else SpinDeadlineTimer()
    timer.open()
    try:
        start = time.perf_counter_ns() + 1_000_000
        late = []
        for i in range(n):
            due = start + i * 2_300_000
            await timer.sleep_until(due)
            late.append((time.perf_counter_ns() - due) / 1e6)
        return late
    finally:
        timer.close()


def test_deadline_timers_never_wake_early_and_are_sub_millisecond() -> None:
    for kind in ("best", "spin"):
        late = asyncio.run(_lateness_ms(kind))
        assert min(late) >= 0.0
        assert statistics.median(late) < 1.0, (kind, late)


def test_cancelled_sleeper_does_not_block_others() -> None:
    async def main() -> None:
        timer = make_deadline_timer()
        timer.open()
        try:
            now = time.perf_counter_ns()
            far = asyncio.ensure_future(timer.sleep_until(now + 10_000_000_000))
            await asyncio.sleep(0)
            far.cancel()
            await timer.sleep_until(now + 2_000_000)
            assert time.perf_counter_ns() >= now + 2_000_000
        finally:
            timer.close()

    asyncio.run(main())
