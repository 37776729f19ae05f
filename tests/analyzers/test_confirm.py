"""An offline crossover confirmed by measured checks: declared only when every check is
valid and agrees with the offline engine, withheld with the reason otherwise."""

from __future__ import annotations

from analyzers.compare.confirm import CheckPoint, bisected, confirm, offline_verdict
from analyzers.compare.crossover import CurvePoint
from analyzers.compare.sweep import StepResult
from analyzers.validity import ValidityFlag

SIDES = ("monolith", "disagg")
LATE = ValidityFlag(kind="client_bound", reason="client-bound: schedule lag p99 9.2 ms > 5 ms")


def _step(goodput: float, *flags: ValidityFlag) -> StepResult:
    return StepResult(
        index=0, label="x", run_dir="x", offered=1.0, achieved_rps=1.0,
        output_tokens_per_s=1.0, requests=40, error_rate=0.0, ttft_p50_ms=100.0,
        ttft_p99_ms=200.0, tpot_p50_ms=10.0, tpot_p99_ms=12.0, e2e_p99_ms=3000.0,
        goodput=goodput, goodput_rate=None, meets_slo=None, failing=(), validity=(),
        flags=flags,
    )  # fmt: skip


def _check(load: float, offline: tuple[float, float], http: tuple[StepResult, ...]) -> CheckPoint:
    a, b = http
    return CheckPoint(
        load=load, labels=SIDES, offline=(_step(offline[0]), _step(offline[1])), http=(a, b)
    )


def _offline() -> tuple[CurvePoint, ...]:
    curve = ((3.0, 1.0, 1.0), (5.0, 1.0, 1.0), (6.0, 0.925, 1.0), (7.0, 0.775, 1.0))
    return tuple(CurvePoint(load=x, a=a, b=b) for x, a, b in curve)


def test_the_offline_curves_give_the_crossover_and_a_bisection_narrows_it() -> None:
    verdict = offline_verdict(_offline(), *SIDES)
    assert verdict.kind == "crossover"
    assert verdict.winner == "disagg"
    assert verdict.load is not None
    assert 5.0 < verdict.load < 6.0
    narrowed = bisected(verdict, 5.74, 5.75)
    assert narrowed.load == 5.75
    assert "from 5.75 req/s (offline engine, bisected to 5.74-5.75" in narrowed.text
    # No lead anywhere: nothing to declare; a lead everywhere: a winner.
    flat = [CurvePoint(load=x, a=1.0, b=1.0) for x in (3.0, 7.0)]
    assert offline_verdict(flat, *SIDES).kind == "none"
    ahead = [CurvePoint(load=x, a=0.5, b=1.0) for x in (3.0, 7.0)]
    assert offline_verdict(ahead, *SIDES).winner == "disagg"


def test_checks_that_agree_confirm_the_crossover() -> None:
    offline = bisected(offline_verdict(_offline(), *SIDES), 5.74, 5.75)
    checks = [
        _check(4.31, (1.0, 1.0), (_step(1.0), _step(0.975))),
        _check(7.19, (0.7, 1.0), (_step(0.725), _step(1.0))),
    ]
    verdict = confirm(offline, checks)
    assert verdict.declared
    assert (verdict.winner, verdict.load) == ("disagg", 5.75)
    assert verdict.text.endswith(
        "confirmed over HTTP at 4.31 (-2.5 pts) and 7.19 (+27.5 pts) req/s"
    )


def test_an_invalid_check_withholds_the_crossover_with_its_reason() -> None:
    offline = bisected(offline_verdict(_offline(), *SIDES), 5.74, 5.75)
    checks = [
        _check(4.31, (1.0, 1.0), (_step(1.0, LATE), _step(1.0))),
        _check(7.19, (0.7, 1.0), (_step(0.7), _step(1.0))),
    ]
    verdict = confirm(offline, checks)
    assert verdict.kind == "invalid"
    assert verdict.winner is None
    assert verdict.text == (
        "no verdict: crossover withheld, monolith at 4.31 req/s (HTTP check): client-bound: "
        "schedule lag p99 9.2 ms > 5 ms"
    )


def test_a_check_that_disagrees_withholds_the_crossover() -> None:
    offline = bisected(offline_verdict(_offline(), *SIDES), 5.74, 5.75)
    # Over HTTP the winner already leads below the crossover: the crossover is not there.
    below = _check(4.31, (1.0, 1.0), (_step(0.8), _step(1.0)))
    above = _check(7.19, (0.7, 1.0), (_step(0.7), _step(1.0)))
    verdict = confirm(offline, [below, above])
    assert verdict.kind == "unconfirmed"
    assert verdict.withheld
    assert verdict.text == (
        "no verdict: crossover withheld, the HTTP check at 4.31 req/s disagrees with the "
        "offline engine: disagg leads by +20.0 pts over HTTP, +0.0 pts offline (by no more "
        "than 5 pts expected)"
    )
    # ... and above it the winner must lead over HTTP as it does offline.
    flat = _check(7.19, (0.7, 1.0), (_step(0.975), _step(1.0)))
    below_ok = _check(4.31, (1.0, 1.0), (_step(1.0), _step(1.0)))
    assert confirm(offline, [below_ok, flat]).kind == "unconfirmed"
