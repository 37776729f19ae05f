"""SLO files and command-line rules: parsing, rejection by name, evaluation."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzers.errors import SLOError
from analyzers.slo.evaluate import check
from analyzers.slo.parse import (
    load_slo_file,
    parse_rule,
    parse_rules,
    parse_slo_document,
    scale_slos,
)

GOOD = """
[goodput]
ttft_ms = 500
tpot_ms = 50

[validity]
allow_client_bound = false
min_tail_samples = 1

[[slo]]
metric = "ttft_ms"
percentile = 99
max = 200
workload = "text"

[[slo]]
metric = "goodput"
min = 0.95

[[slo]]
metric = "tpot_ms"
stat = "mean"
max = 30

[[slo]]
metric = "error_rate"
max = 0.01
"""


def test_file_parses(tmp_path: Path) -> None:
    path = tmp_path / "slo.toml"
    path.write_text(GOOD)
    slos = load_slo_file(path)
    assert [o.metric for o in slos.objectives] == ["ttft_ms", "goodput", "tpot_ms", "error_rate"]
    first = slos.objectives[0]
    assert (first.percentile, first.op, first.threshold, first.workload) == (99, "<=", 200, "text")
    assert slos.objectives[1].op == ">="
    assert slos.objectives[2].stat == "mean"
    assert slos.goodput.ttft_ms == 500
    assert slos.goodput.tpot_ms == 50
    assert slos.percentiles == (99.0,)
    assert first.label == "text:ttft_ms.p99 <= 200 ms"


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"slo": [{"metric": "ttft_ms", "percentile": 99, "max": 1, "maxx": 2}]}, "maxx"),
        ({"slos": []}, "slos"),
        ({"goodput": {"ttft": 1}}, "ttft"),
        ({"validity": {"client_bound": False}}, "client_bound"),
        ({"slo": [{"metric": "latency", "percentile": 99, "max": 1}]}, "latency"),
        ({"slo": [{"metric": "ttft_ms", "max": 1}]}, "needs a percentile"),
        ({"slo": [{"metric": "ttft_ms", "percentile": 100, "max": 1}]}, "strictly between"),
        ({"slo": [{"metric": "ttft_ms", "percentile": 99, "max": 1, "min": 0}]}, "exactly one"),
        ({"slo": [{"metric": "goodput", "min": 95}]}, "fraction"),
        ({"slo": [{"metric": "ttft_ms", "stat": "median", "max": 1}]}, "median"),
    ],
)
def test_rejections_name_the_problem(doc: dict[str, object], needle: str) -> None:
    with pytest.raises(SLOError, match=needle):
        parse_slo_document(doc, "slo.toml")


def test_bad_toml(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[[slo]\n")
    with pytest.raises(SLOError, match="not valid TOML"):
        load_slo_file(path)


@pytest.mark.parametrize(
    ("rule", "metric", "stat", "percentile", "op", "threshold", "workload"),
    [
        ("ttft_ms.p99<=200", "ttft_ms", "percentile", 99.0, "<=", 200.0, None),
        ("text:tpot_ms.p50 <= 30ms", "tpot_ms", "percentile", 50.0, "<=", 30.0, "text"),
        ("goodput>=95%", "goodput", "value", None, ">=", 0.95, None),
        ("error_rate<0.01", "error_rate", "value", None, "<=", 0.01, None),
        ("e2e_ms.mean<=5000", "e2e_ms", "mean", None, "<=", 5000.0, None),
        ("itl_ms.p99.9<=80", "itl_ms", "percentile", 99.9, "<=", 80.0, None),
    ],
)
def test_rules(
    rule: str,
    metric: str,
    stat: str,
    percentile: float | None,
    op: str,
    threshold: float,
    workload: str | None,
) -> None:
    o = parse_rule(rule)
    assert (o.metric, o.stat, o.percentile, o.op, o.workload) == (
        metric,
        stat,
        percentile,
        op,
        workload,
    )
    assert o.threshold == pytest.approx(threshold)


@pytest.mark.parametrize("rule", ["ttft_ms<=", "ttft.p99<=1", "goodput.p50>=0.9", "ttft_ms.p99=1"])
def test_bad_rules(rule: str) -> None:
    with pytest.raises(SLOError):
        parse_rule(rule)


def test_check_margins() -> None:
    upper = parse_rule("ttft_ms.p99<=200")
    ok = check(upper, 150.0, 500)
    assert ok.passed
    assert ok.margin == 50
    assert ok.margin_fraction == pytest.approx(0.25)
    bad = check(upper, 250.0, 500)
    assert bad.status == "fail"
    assert bad.margin == -50
    lower = parse_rule("goodput>=0.95")
    assert check(lower, 0.97, 100).margin == pytest.approx(0.02)
    assert check(lower, None, 0).status == "no_data"


def test_merge_and_scale() -> None:
    slos = parse_rules(["ttft_ms.p99<=200", "requests_per_s>=4", "goodput>=0.9"])
    scaled = scale_slos(slos, 0.5)
    assert [o.threshold for o in scaled.objectives] == [100.0, 8.0, 0.9]
