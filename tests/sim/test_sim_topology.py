"""The physics engine in real time, in process: monolith vs disaggregated on the same GPUs.

Times are read from the engine's planned emissions (``due_ns``) and ground-truth phases,
converted to model time with the time scale, so they do not depend on timer jitter.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

import pytest

from analyzers.budget import catalog, kv_transfer_time_s, prefill_time_s
from loadgen.errors import RequestError
from loadgen.sim.config import EngineConfig, SimConfig
from loadgen.sim.physics import HardwareChoice, Physics, link_spec
from loadgen.sim.request import SimRequest
from loadgen.sim.topology import PhysicsEngine

pytestmark = pytest.mark.serial  # times a real server or process: run alone

PROMPT = 6000
OUTPUT = 48
SCALE = 0.5


@dataclass(frozen=True)
class Outcome:
    ttft_ms: float
    tpot_ms: float
    transfer_ms: float
    prefill_ms: float
    queue_ms: float


def _request(max_tokens: int) -> SimRequest:
    return SimRequest(
        api="completions",
        model=None,
        stream=True,
        max_tokens=max_tokens,
        prompt_tokens=0,
        include_usage=True,
        continuous_usage=False,
    )


async def _replay(engine: PhysicsEngine, n: int, interval_s: float, prompt: int) -> list[Outcome]:
    scale = engine.time_scale
    out: list[Outcome] = []
    t0 = time.perf_counter_ns() + 5_000_000

    async def one(i: int) -> None:
        # Distinct words per request: no prefix sharing between them.
        body = {"prompt": " ".join(f"r{i}w{j}" for j in range(prompt))}
        request = engine.prepare(_request(OUTPUT), body)
        await asyncio.sleep(
            max(0.0, (t0 + i * interval_s * scale * 1e9 - time.perf_counter_ns()) / 1e9)
        )
        received = time.perf_counter_ns()
        ems = [e async for e in engine.generate(request, received_ns=received)]
        ph = ems[0].phases
        out.append(
            Outcome(
                ttft_ms=(ems[0].due_ns - received) / scale / 1e6,
                tpot_ms=(ems[-1].due_ns - ems[0].due_ns) / (len(ems) - 1) / scale / 1e6,
                transfer_ms=ph.transfer_ns / 1e6,
                prefill_ms=ph.prefill_ns / 1e6,
                queue_ms=ph.queue_ns / 1e6,
            )
        )

    async with engine.running(), asyncio.TaskGroup() as group:
        for i in range(n):
            group.create_task(one(i))
    return out


def _engine(**kw: object) -> PhysicsEngine:
    spec = EngineConfig(model="llama-3.1-8b", gpu="h100", time_scale=SCALE, **kw)  # type: ignore[arg-type]
    return PhysicsEngine(SimConfig(engine=spec))


@pytest.mark.slow
def test_disagg_cuts_tpot_interference_and_adds_the_transfer_to_ttft() -> None:
    mono = asyncio.run(_replay(_engine(replicas=2, router="round-robin"), 16, 0.2, PROMPT))
    disagg = asyncio.run(_replay(_engine(topology="disagg", link_gbps=100.0), 16, 0.2, PROMPT))
    tpot_mono = statistics.mean(o.tpot_ms for o in mono)
    tpot_dis = statistics.mean(o.tpot_ms for o in disagg)
    ttft_mono = statistics.median(o.ttft_ms for o in mono)
    ttft_dis = statistics.median(o.ttft_ms for o in disagg)
    print(f"TPOT mono {tpot_mono:.2f} ms, disagg {tpot_dis:.2f} ms")
    print(f"TTFT p50 mono {ttft_mono:.2f} ms, disagg {ttft_dis:.2f} ms")
    model = catalog.model("llama-3.1-8b")
    transfer_ms = kv_transfer_time_s(model, PROMPT, link_spec(gbps=100.0, latency_us=0)) * 1e3
    print(
        f"transfer {statistics.median(o.transfer_ms for o in disagg):.2f} ms "
        f"(budget {transfer_ms:.2f})"
    )
    # Prefill chunks no longer share steps with decodes: TPOT drops by a clear margin.
    assert tpot_dis < 0.8 * tpot_mono
    # Every disaggregated request pays the KV transfer (here uncontended: the budget's number).
    assert min(o.transfer_ms for o in disagg) == pytest.approx(transfer_ms, rel=1e-3)
    assert all(o.transfer_ms == 0.0 for o in mono)
    # ... so its TTFT is at least prefill + transfer, above the monolith's at this load.
    assert ttft_dis > ttft_mono
    assert min(o.ttft_ms - o.prefill_ms - o.queue_ms for o in disagg) >= transfer_ms * 0.999


@pytest.mark.slow
def test_batch_one_prefill_matches_the_budget_in_real_time() -> None:
    engine = _engine(max_batched_tokens=1024)
    (only,) = asyncio.run(_replay(engine, 1, 0.0, 3000))
    phys = Physics(HardwareChoice(model="llama-3.1-8b", gpu="h100"))
    expected = prefill_time_s(phys.model, phys.deploy, 3000, chunk_tokens=1024) * 1e3
    assert only.queue_ms == 0.0
    assert only.prefill_ms == pytest.approx(expected, abs=1e-5)


def test_a_request_larger_than_the_kv_cache_is_rejected() -> None:
    engine = _engine(kv_capacity_tokens=1000)
    with pytest.raises(RequestError, match="KV cache"):
        engine.prepare(_request(100), {"prompt": "w " * 950})
    with pytest.raises(RequestError, match="empty"):
        engine.prepare(_request(10), {"prompt": ""})


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request's outcome, with when it reached the engine's door and when it ended (ms of
    model time after the start)."""

    outcome: Outcome
    received_ms: float
    end_ms: float


async def _arrivals(engine: PhysicsEngine, plan: list[tuple[float, int, int]]) -> list[Arrival]:
    """Requests (model seconds after the start, prompt words, output tokens), each with its
    outcome, its arrival and its end."""
    scale = engine.time_scale
    out: list[Arrival] = [None] * len(plan)  # type: ignore[list-item]
    t0 = time.perf_counter_ns() + 5_000_000

    async def one(i: int, at_s: float, words: int, tokens: int) -> None:
        request = engine.prepare(
            _request(tokens), {"prompt": " ".join(f"q{i}w{j}" for j in range(words))}
        )
        await asyncio.sleep(max(0.0, (t0 + at_s * scale * 1e9 - time.perf_counter_ns()) / 1e9))
        received = time.perf_counter_ns()
        ems = [e async for e in engine.generate(request, received_ns=received)]
        ph = ems[0].phases
        outcome = Outcome(
            ttft_ms=(ems[0].due_ns - received) / scale / 1e6,
            tpot_ms=(ems[-1].due_ns - ems[0].due_ns) / max(1, len(ems) - 1) / scale / 1e6,
            transfer_ms=ph.transfer_ns / 1e6,
            prefill_ms=ph.prefill_ns / 1e6,
            queue_ms=ph.queue_ns / 1e6,
        )
        out[i] = Arrival(
            outcome, (received - t0) / scale / 1e6, (ems[-1].due_ns - t0) / scale / 1e6
        )

    async with engine.running(), asyncio.TaskGroup() as group:
        for i, (at_s, words, tokens) in enumerate(plan):
            group.create_task(one(i, at_s, words, tokens))
    return out


def _frontend_engine(frontend_ms: float, share: float = 1.0) -> PhysicsEngine:
    spec = EngineConfig(model="llama-3.1-8b", gpu="h100", time_scale=SCALE)
    return PhysicsEngine(SimConfig(engine=spec, frontend_ms=frontend_ms, frontend_share=share))


def test_a_front_end_delays_the_engine_and_stops_its_steps() -> None:
    """A front end of 20 ms a request on the engine's core: a request alone reaches the
    engine 20 ms late (its reported queue and prefill unchanged, its TTFT 20 ms longer);
    four arriving together while another decodes pass it one at a time, and the decoding
    request's steps stop for their 80 ms."""
    plan = [(0.0, 16, 48), *[(0.15, 16, 4)] * 4]
    alone_without, alone_with = (
        asyncio.run(_arrivals(_frontend_engine(ms), [(0.0, 16, 4)]))[0].outcome
        for ms in (0.0, 20.0)
    )
    assert alone_with.queue_ms == alone_without.queue_ms == 0.0
    assert alone_with.prefill_ms == pytest.approx(alone_without.prefill_ms, abs=1e-3)
    assert alone_with.ttft_ms - alone_without.ttft_ms == pytest.approx(20.0, abs=2.0)
    without = asyncio.run(_arrivals(_frontend_engine(0.0), plan))
    with_front = asyncio.run(_arrivals(_frontend_engine(20.0), plan))
    # The long request ends 100 ms later: its own 20 ms at the front end, then its steps
    # stopped for the four's 80 ms (they join its batch at the next step in both runs).
    # Each run's long request is timed from its own arrival: on a loaded machine the loop
    # may wake it a few ms late in one run and not the other.
    stalled = (with_front[0].end_ms - with_front[0].received_ms) - (
        without[0].end_ms - without[0].received_ms
    )
    assert stalled == pytest.approx(100.0, abs=8.0), (stalled, without, with_front)
    # One at a time: each of the four reaches the engine 20 ms after the later of its own
    # arrival and the one before it. The four are due together, but on a loaded machine the
    # loop may wake them a few ms apart, so each is held against its own arrival.
    reached = sorted(
        (
            (w.received_ms + w.outcome.ttft_ms - w.outcome.queue_ms - w.outcome.prefill_ms, w)
            for w in with_front[1:]
        ),
        key=lambda pair: pair[0],
    )
    previous = 0.0
    for at, w in reached:
        assert at == pytest.approx(max(w.received_ms, previous) + 20.0, abs=3.0), reached
        previous = at
    assert reached[-1][0] - reached[0][0] >= 57.0, reached


def test_a_front_end_costs_its_engine_its_share_of_the_core() -> None:
    """The same four arrivals beside a decoding request, the engine losing half of the front
    end's time (``frontend_share`` 0.5): the long request's own 20 ms at the front end (the
    engine idle then) and half of the four's 80 ms: 60 ms; the four still pass the front end
    20 ms apart."""
    plan = [(0.0, 16, 48), *[(0.15, 16, 4)] * 4]
    without = asyncio.run(_arrivals(_frontend_engine(0.0), plan))
    half = asyncio.run(_arrivals(_frontend_engine(20.0, share=0.5), plan))
    stalled = (half[0].end_ms - half[0].received_ms) - (without[0].end_ms - without[0].received_ms)
    assert stalled == pytest.approx(60.0, abs=8.0), (stalled, without, half)
    reached = sorted(
        w.received_ms + w.outcome.ttft_ms - w.outcome.queue_ms - w.outcome.prefill_ms
        for w in half[1:]
    )
    arrived = sorted(w.received_ms for w in half[1:])
    previous = 0.0
    for at, came in zip(reached, arrived, strict=True):  # each against its own arrival
        assert at == pytest.approx(max(came, previous) + 20.0, abs=3.0), (reached, arrived)
        previous = at
