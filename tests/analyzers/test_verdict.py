"""Comparisons that refuse to guess: a winner or crossover is withheld on an invalid step or
run and within noise, with one line that says why."""

from __future__ import annotations

from pathlib import Path

import pytest
from runbuilders import make_run, make_sweep

from analyzers.compare.crossover import CurvePoint, compare_sweeps, sweep_verdict
from analyzers.compare.runs import CompareOptions, compare_runs
from analyzers.compare.sweep import SweepAnalysis, SweepOptions
from analyzers.compare.verdict import goodput_lead
from analyzers.goodput import SLOTargets
from analyzers.slo.parse import SLOSet

GOODPUT = SweepOptions(slos=SLOSet(goodput=SLOTargets(tpot_ms=15.0)))


def _bare(label: str) -> SweepAnalysis:
    return SweepAnalysis(
        path=label, label=label, trace_sha256=None, mode="rate", load_unit="req/s",
        time_scale=1.0, steps=(), knee=None, knee_note="",
    )  # fmt: skip


def _points(a: list[float], b: list[float], n: int = 40) -> list[CurvePoint]:
    return [
        CurvePoint(load=x, a=ya, b=yb, a_requests=n, b_requests=n)
        for x, ya, yb in zip((3.0, 5.0, 7.0), a, b, strict=True)
    ]


def test_goodput_lead_keeps_its_uncertainty_at_all_or_nothing() -> None:
    clear = goodput_lead(40, 40, 29, 40)
    assert clear.estimate == pytest.approx(-11 / 40)
    assert clear.high < 0
    close = goodput_lead(40, 40, 37, 40)
    assert close.low < 0 < close.high
    same = goodput_lead(40, 40, 40, 40)
    assert same.low < 0 < same.high


def test_a_significant_lead_is_a_crossover() -> None:
    cross, verdict = sweep_verdict(
        _bare("mono"), _bare("disagg"), _points([1.0, 1.0, 0.6], [1.0, 1.0, 1.0])
    )
    assert cross is not None
    assert verdict.kind == "crossover"
    assert verdict.winner == "disagg"
    assert verdict.withheld_reason is None
    assert verdict.load == cross.load
    assert 5.0 < cross.load < 7.0
    assert verdict.text.startswith("crossover: disagg beats mono on goodput from")
    assert "between the steps at 5 and 7" in verdict.text


def test_a_lead_within_noise_is_no_verdict() -> None:
    # 37 of 40 against 40 of 40: 7.5 points, more than the 5% tie, but not significant.
    cross, verdict = sweep_verdict(
        _bare("mono"), _bare("disagg"), _points([1.0, 1.0, 0.925], [1.0, 1.0, 1.0])
    )
    assert cross is None
    assert verdict.kind == "noise"
    assert verdict.withheld
    assert verdict.text.startswith("no verdict: crossover within noise (at 7 req/s disagg")
    assert "leads by 7.5 pts of goodput, 95% interval [-2.9, +17.1] includes 0" in verdict.text
    # The other way round (the flip two runs of demo-compare showed): the interval is
    # still written low to high, from the leader's side.
    _, flipped = sweep_verdict(
        _bare("mono"), _bare("disagg"), _points([1.0, 1.0, 0.775], [1.0, 1.0, 0.6])
    )
    assert flipped.kind == "noise"
    assert "mono leads by 17.5 pts of goodput, 95% interval [-3.0, +36.3]" in flipped.text


def test_a_lead_everywhere_is_a_winner_without_crossover() -> None:
    cross, verdict = sweep_verdict(
        _bare("mono"), _bare("disagg"), _points([0.5, 0.4, 0.2], [1.0, 1.0, 0.9])
    )
    assert cross is None
    assert verdict.kind == "winner"
    assert verdict.winner == "disagg"
    assert verdict.text.startswith("winner: disagg beats mono on goodput at every swept load")


def test_no_lead_is_no_crossover() -> None:
    _, verdict = sweep_verdict(_bare("a"), _bare("b"), _points([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]))
    assert verdict.kind == "none"
    assert not verdict.withheld
    assert verdict.text.startswith("no crossover within the swept loads")


def test_an_invalid_step_withholds_the_crossover(tmp_path: Path) -> None:
    mono = make_sweep(tmp_path / "mono", {1.0: 1.0, 2.0: 1.0, 4.0: 1.45, 8.0: 2.0})
    clean = make_sweep(tmp_path / "clean", {1.0: 1.0, 2.0: 1.0, 4.0: 1.0, 8.0: 1.2})
    assert compare_sweeps(mono, clean, GOODPUT).verdict.kind == "crossover"
    lagging = make_sweep(
        tmp_path / "lag", {1.0: 1.0, 2.0: 1.0, 4.0: 1.0, 8.0: 1.2}, lag_ms={4.0: 20.0}
    )
    c = compare_sweeps(mono, lagging, GOODPUT)
    assert c.crossover is None
    assert c.verdict.kind == "invalid"
    reason = c.verdict.withheld_reason
    assert reason is not None
    assert reason.startswith("lag at 4/s: client-bound: schedule lag p99 20.0 ms > 5 ms")
    assert c.verdict.text == f"no verdict: crossover withheld, {reason}"
    assert "\n" not in c.verdict.text
    assert c.verdicts[-1] == c.verdict.text
    step = c.b.steps[2]
    assert not step.valid
    assert [f.kind for f in step.flags] == ["client_bound"]
    # The knee of the lagging sweep rests on that step too.
    assert c.b.knee is None
    assert c.b.knee_note.startswith("no verdict: knee withheld, lag at 4/s: client-bound")


def test_a_client_bound_run_withholds_every_winner(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", n=200, seed=1)
    b = make_run(tmp_path / "b", n=200, seed=2, slow=1.5)
    fine = compare_runs([a, b], CompareOptions(labels=("a", "b"), resamples=100))
    assert fine.verdict is None
    assert any(v.startswith("b raises p99 TPOT") for v in fine.verdicts)
    late = make_run(tmp_path / "late", n=200, seed=2, slow=1.5, schedule_lag_ms=30.0)
    c = compare_runs([a, late], CompareOptions(labels=("a", "late"), resamples=100))
    assert c.verdict is not None
    assert c.verdict.kind == "invalid"
    assert c.verdicts == (c.verdict.text,)
    assert c.verdict.text.startswith("no verdict: winner withheld, late: client-bound: schedule")
    assert c.metrics  # the differences are still there, only the verdicts are withheld


def test_a_percentile_on_too_few_requests_has_no_verdict(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", n=40, seed=1)
    b = make_run(tmp_path / "b", n=40, seed=2, slow=2.0)
    c = compare_runs([a, b], CompareOptions(labels=("a", "b"), resamples=100))
    assert c.verdict is None
    p99 = [v for v in c.verdicts if "p99 TTFT" in v]
    assert p99 == ["no verdict on p99 TTFT: too few samples (40 requests; p99 needs >= 100)"]
    assert any(v.startswith("b raises p50 TTFT") for v in c.verdicts)
