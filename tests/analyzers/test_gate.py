"""The gate: exit codes 0/1/3/4, JUnit XML, Markdown, GITHUB_STEP_SUMMARY, baselines."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from runbuilders import make_run

from analyzers.slo.gate import GateOptions, gate
from analyzers.slo.parse import parse_rules
from loadgen.cli.root import cli
from reports.gate import gate_markdown, junit_xml

SLO_FILE = """
[goodput]
ttft_ms = 1000
tpot_ms = 50

[[slo]]
metric = "ttft_ms"
percentile = 99
max = 400

[[slo]]
metric = "tpot_ms"
percentile = 50
max = 20

[[slo]]
metric = "goodput"
min = 0.95

[[slo]]
metric = "error_rate"
max = 0.02
"""


@pytest.fixture
def slo_file(tmp_path: Path) -> Path:
    path = tmp_path / "slo.toml"
    path.write_text(SLO_FILE)
    return path


def _gate(runner: CliRunner, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = runner.invoke(cli, ["gate", *args], env=env)
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({}, 0),
        ({"slow": 3.0}, 1),
        ({"schedule_lag_ms": 40.0}, 3),
        # A --max-inflight cap's hold is a caveat, not a late client: the SLOs are judged.
        ({"held_ms": 40.0}, 0),
        ({"held_ms": 40.0, "schedule_lag_ms": 8.0}, 3),
        # A simulator that wrote 30 ms late (30% of its TTFT) did not model its deployment.
        ({"slip_ms": 30.0}, 3),
        ({"slip_ms": 1.0}, 0),
        ({"n": 40}, 3),
        ({"fail_first": 300, "outcome": "connect_error"}, 4),
        ({"fail_first": 400, "outcome": "timeout"}, 4),
    ],
)
def test_exit_codes(tmp_path: Path, slo_file: Path, kwargs: dict[str, object], code: int) -> None:
    run = make_run(tmp_path / "run", **kwargs)  # type: ignore[arg-type]
    exit_code, output = _gate(CliRunner(), str(run), "--slo", str(slo_file))
    assert exit_code == code, output


def test_breach_names_the_objective_and_margin(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", slow=3.0)
    report = gate(run, GateOptions(slos=parse_rules(["ttft_ms.p99<=400", "tpot_ms.p50<=20"])))
    assert report.verdict == "breach"
    assert report.exit_code == 1
    failed = [r for r in report.objectives if not r.passed]
    assert failed
    assert all(r.margin is not None and r.margin < 0 for r in failed)
    assert "SLO BREACH" in report.summary


def test_junit_and_markdown(tmp_path: Path, slo_file: Path) -> None:
    run = make_run(tmp_path / "run", slow=3.0)
    junit, md, summary = tmp_path / "g.xml", tmp_path / "g.md", tmp_path / "summary.md"
    code, _ = _gate(
        CliRunner(),
        str(run),
        "--slo",
        str(slo_file),
        "--slo",
        "e2e_ms.p99<=100000",
        "--junit",
        str(junit),
        "--markdown",
        str(md),
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert code == 1
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    cases = suites[0].findall("testcase")
    # endpoint + validity + 5 objectives
    assert len(cases) == 7
    assert all(c.get("name") and c.get("classname") for c in cases)
    failures = [c for c in cases if c.find("failure") is not None]
    assert int(suites[0].get("failures", "0")) == len(failures) >= 1
    assert int(suites[0].get("tests", "0")) == len(cases)
    for c in failures:
        assert c.find("failure").get("message")  # type: ignore[union-attr]
    text = md.read_text()
    assert text.startswith("## ")
    assert "| objective | observed | margin |" in text
    assert "|---|" in text
    assert "BREACH" in text
    assert summary.read_text().strip() == text.strip()


def test_report_renders_without_cli(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    report = gate(run, GateOptions(slos=parse_rules(["ttft_ms.p99<=400"])))
    assert report.verdict == "pass"
    ET.fromstring(junit_xml(report).split("\n", 1)[1])
    assert "PASS" in gate_markdown(report)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_baseline_same_deployment_passes(tmp_path: Path, seed: int) -> None:
    base = make_run(tmp_path / "base", seed=seed)
    again = make_run(tmp_path / "again", seed=seed + 100)
    report = gate(again, GateOptions(baseline=base, max_regression=0.10, seed=seed))
    assert report.regressions
    assert report.verdict == "pass", [r.message for r in report.regressions]


def test_baseline_30_percent_slowdown_fails(tmp_path: Path) -> None:
    base = make_run(tmp_path / "base", seed=1)
    slower = make_run(tmp_path / "slower", seed=2, slow=1.3)
    report = gate(slower, GateOptions(baseline=base, max_regression=0.10))
    assert report.verdict == "breach"
    failed = [r for r in report.regressions if r.failed]
    assert failed
    for r in failed:
        assert r.worse_by is not None
        assert r.worse_by > 0.1
        assert r.difference.absolute.low > 0
    code, output = _gate(
        CliRunner(), str(slower), "--baseline", str(base), "--max-regression", "10%"
    )
    assert code == 1
    assert "REGRESSION" in output


def test_baseline_of_another_trace_is_refused(tmp_path: Path) -> None:
    base = make_run(tmp_path / "base", n=300)
    run = make_run(tmp_path / "run", n=400)
    code, output = _gate(CliRunner(), str(run), "--baseline", str(base))
    assert code == 2
    assert "different traces" in output


def test_nothing_to_check_is_bad_input(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    code, output = _gate(CliRunner(), str(run))
    assert code == 2
    assert "nothing to check" in output


def test_unknown_key_is_bad_input(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    slo = tmp_path / "bad.toml"
    slo.write_text('[[slo]]\nmetric = "ttft_ms"\npercentile = 99\nmax = 1\nmaximum = 2\n')
    code, output = _gate(CliRunner(), str(run), "--slo", str(slo))
    assert code == 2
    assert "maximum" in output


@pytest.mark.parametrize("command", ["gate", "compare", "sweep", "demo-compare"])
def test_help(command: str) -> None:
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output


def test_backpressure_is_printed_with_the_verdict(tmp_path: Path, slo_file: Path) -> None:
    run = make_run(tmp_path / "run", held_ms=40.0)
    exit_code, output = _gate(CliRunner(), str(run), "--slo", str(slo_file))
    assert exit_code == 0, output
    assert "backpressure: 399 requests waited for --max-inflight 4" in output
    report = gate(run, GateOptions(slos=parse_rules(["ttft_ms.p99<=400"])))
    assert report.verdict == "pass"
    assert report.problems == ()
    assert [w for w in report.warnings if w.startswith("backpressure:")]
    assert "warning: backpressure" in gate_markdown(report)


def test_simulator_slip_makes_the_gate_invalid(tmp_path: Path, slo_file: Path) -> None:
    run = make_run(tmp_path / "run", slip_ms=30.0)
    exit_code, output = _gate(CliRunner(), str(run), "--slo", str(slo_file))
    assert exit_code == 3, output
    assert "simulator slip" in output
