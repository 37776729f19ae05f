"""``loadgen report``: help, a run, errors as one line with their exit code."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from loadgen.cli.root import cli


def test_help() -> None:
    result = CliRunner().invoke(cli, ["report", "--help"])
    assert result.exit_code == 0
    assert "--compare" in result.output
    assert "--sweep" in result.output


def test_report_of_a_run(small_run: Path, tmp_path: Path) -> None:
    out, md = tmp_path / "x.html", tmp_path / "x.md"
    result = CliRunner().invoke(
        cli,
        ["report", str(small_run), "-o", str(out), "--markdown", str(md), "--slo-ttft-ms", "30"],
    )
    assert result.exit_code == 0, result.output
    assert f"report written to {out}" in result.output
    assert out.stat().st_size > 10_000
    assert md.exists()


def test_needs_something_to_report() -> None:
    result = CliRunner().invoke(cli, ["report"])
    assert result.exit_code == 2
    assert "give a RUN" in result.output


def test_invalid_run_exits_3(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(cli, ["report", str(empty), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 3, result.output
    assert result.output.startswith("error: ")
