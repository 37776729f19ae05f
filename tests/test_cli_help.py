"""Every command and subcommand answers --help (exit 0, a usage line, no traceback), and
the root lists them all without importing their heavy dependencies."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner
from clitree import command_at, command_paths

from loadgen.cli.root import cli


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p))
def test_every_command_has_help(path: list[str]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: ")
    assert "Traceback" not in result.output
    # A description, not just the option list.
    assert len(result.output.split("\n\n")[1].strip()) > 20


def test_root_help_lists_every_command_and_stays_light() -> None:
    code = (
        "import sys; from click.testing import CliRunner; from loadgen.cli.root import cli;"
        "r = CliRunner().invoke(cli, ['--help']); print(r.output);"
        "print('HEAVY', sorted(m for m in ('polars', 'matplotlib', 'ray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    for name in ("replay", "trace", "analyze", "decompose", "gate", "compare", "sweep",
                 "report", "plan", "sim", "simulate", "demo", "demo-compare", "server-metrics",
                 "recover"):  # fmt: skip
        assert f"  {name} " in out.stdout
    assert "HEAVY []" in out.stdout
    assert "Examples:" in out.stdout
    assert "  loadgen replay trace.parquet" in out.stdout


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p))
def test_every_option_has_help(path: list[str]) -> None:
    command = command_at(path)
    bare = [
        "/".join(param.opts)
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip()
    ]
    assert not bare, f"options without help text: {bare}"
