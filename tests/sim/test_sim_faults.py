"""Seeded, per-request fault decisions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loadgen.sim.config import SimConfig
from loadgen.sim.faults import NO_FAULT, FaultInjector, FaultKind, uniform


def _kinds(config: SimConfig, n: int = 2000) -> list[FaultKind]:
    injector = FaultInjector(config)
    return [injector.decide(f"req-{i}").kind for i in range(n)]


def test_no_rates_means_no_faults() -> None:
    injector = FaultInjector(SimConfig())
    assert all(injector.decide(str(i)) is NO_FAULT for i in range(100))


@given(key=st.text(max_size=40), seed=st.integers(min_value=0, max_value=2**32))
def test_decisions_depend_only_on_seed_and_key(key: str, seed: int) -> None:
    config = SimConfig(seed=seed, error_rate=0.3, rate_429=0.2, drop_rate=0.2, stall_rate=0.5)
    first, second = FaultInjector(config), FaultInjector(config)
    second.decide("something else first")
    assert first.decide(key) == second.decide(key)
    assert 0.0 <= uniform(seed, key, "x") < 1.0


def test_rates_are_honoured_approximately() -> None:
    kinds = _kinds(SimConfig(error_rate=0.1, rate_429=0.2, drop_rate=0.1, seed=7))
    n = len(kinds)
    assert abs(kinds.count(FaultKind.RATE_LIMITED) / n - 0.2) < 0.03
    # Lower-priority kinds only apply to requests the earlier draws spared.
    assert abs(kinds.count(FaultKind.ERROR) / n - 0.8 * 0.1) < 0.03
    assert abs(kinds.count(FaultKind.DROP) / n - 0.8 * 0.9 * 0.1) < 0.03


def test_rate_one_always_hits_and_seed_changes_the_pattern() -> None:
    assert set(_kinds(SimConfig(error_rate=1.0), 50)) == {FaultKind.ERROR}
    a = _kinds(SimConfig(error_rate=0.5, seed=1), 200)
    b = _kinds(SimConfig(error_rate=0.5, seed=2), 200)
    assert a != b


def test_stall_combines_with_drop() -> None:
    plan = FaultInjector(SimConfig(drop_rate=1.0, stall_rate=1.0)).decide("x")
    assert plan.kind is FaultKind.DROP
    assert plan.stall
    assert not plan.is_rejection
