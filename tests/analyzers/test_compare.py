"""Compare: known, controlled shifts are recovered inside the bootstrap interval."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from runbuilders import make_run

from analyzers.compare.identity import trace_identity
from analyzers.compare.runs import CompareOptions, compare_runs
from analyzers.errors import DifferentTracesError
from loadgen.cli.root import cli
from reports.compare import comparison_markdown


def test_ttft_shift_recovered_with_component(tmp_path: Path) -> None:
    a = make_run(tmp_path / "mono", seed=1)
    b = make_run(tmp_path / "disagg", seed=2, transfer_ms=9.0, ttft_shift_ms=3.0)
    c = compare_runs([a, b], CompareOptions(labels=("mono", "disagg"), percentiles=(50.0, 99.0)))
    assert c.same_trace
    p50 = next(d for d in c.metrics if d.metric == "ttft_ms" and d.percentile == 50.0)
    assert p50.workload == "all"
    # The same seed-free shift of 12 ms (9 transfer + 3 elsewhere) at every request.
    diff = p50.difference.absolute
    assert diff.low <= 12.0 <= diff.high
    transfer = next(x for x in c.components if x.term == "transfer" and x.percentile == 50.0)
    assert transfer.difference.absolute.estimate == pytest.approx(9.0)
    assert transfer.attributed_ms == pytest.approx(9.0, abs=0.5)
    line = next(v for v in c.verdicts if "p50 TTFT" in v)
    assert line.startswith("disagg raises p50 TTFT by")
    assert "of which transfer 9" in line


def test_tpot_scaling_recovered(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", seed=3)
    b = make_run(tmp_path / "b", seed=4, slow=0.62)
    c = compare_runs([a, b], CompareOptions(metrics=("tpot_ms", "itl_ms"), components=False))
    tpot = next(d for d in c.metrics if d.metric == "tpot_ms" and d.percentile == 99.0)
    rel = tpot.difference.relative
    assert rel is not None
    assert rel.low <= -0.38 <= rel.high
    line = next(v for v in c.verdicts if "p99 TPOT" in v)
    assert "lowers p99 TPOT by" in line
    assert "%" in line
    assert "| metric | stat |" in comparison_markdown(c)


def test_no_difference_is_reported_as_such(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", seed=5)
    b = make_run(tmp_path / "b", seed=6)
    c = compare_runs([a, b], CompareOptions(metrics=("e2e_ms",), components=False))
    assert any("no significant change" in v for v in c.verdicts)


def test_different_traces_refused_unless_allowed(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", n=300)
    b = make_run(tmp_path / "b", n=200)
    assert trace_identity(a).fingerprint != trace_identity(b).fingerprint
    with pytest.raises(DifferentTracesError, match="allow-different-traces"):
        compare_runs([a, b])
    result = CliRunner().invoke(cli, ["compare", str(a), str(b)])
    assert result.exit_code == 2
    assert "different traces" in result.output
    c = compare_runs([a, b], CompareOptions(allow_different_traces=True, components=False))
    assert not c.same_trace
    assert c.notes


def test_three_runs_and_cli(tmp_path: Path) -> None:
    runs = [make_run(tmp_path / name, seed=i) for i, name in enumerate(("a", "b", "c"))]
    c = compare_runs(runs, CompareOptions(components=False, metrics=("ttft_ms",)))
    assert {d.label for d in c.metrics} == {"b", "c"}
    md = tmp_path / "cmp.md"
    result = CliRunner().invoke(
        cli, ["compare", *map(str, runs), "--metrics", "ttft_ms", "--markdown", str(md)]
    )
    assert result.exit_code == 0, result.output
    assert "TTFT" in result.output
    assert md.read_text().startswith("## ")
