"""The shared option groups (``loadgen.cli.options``): their public names, one declaration
read alike by every command that has it, and the values they hand a command."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from analyzers.frames import RowSelection
from loadgen.cli.options.budget import budget_options
from loadgen.cli.options.selection import selection_options
from loadgen.cli.options.slo import load_slos
from loadgen.cli.root import cli


def _commands() -> dict[str, click.Command]:
    """The root's commands by name (the shared groups are on top-level commands only)."""
    ctx = click.Context(cli)
    found = {name: cli.get_command(ctx, name) for name in cli.list_commands(ctx)}
    return {name: command for name, command in found.items() if command is not None}


# Options of the shared groups and the commands that must have them.
SHARED = {
    "--trim-start": ("analyze", "decompose", "gate", "report"),
    "--trim-end": ("analyze", "decompose", "gate", "report"),
    "--start": ("analyze", "decompose"),
    "--include-warmup": ("analyze", "decompose"),
    "--budget": ("decompose", "report"),
    "--by": ("analyze", "decompose", "compare"),
    "--json": ("analyze", "decompose", "gate"),
    "--markdown": ("gate", "compare", "report"),
    "--resamples": ("gate", "compare"),
    "--slo": ("gate", "compare", "report"),
}


@pytest.mark.parametrize("flag", sorted(SHARED))
def test_a_shared_option_reads_alike_in_every_command(flag: str) -> None:
    commands = _commands()
    seen = {}
    for name in SHARED[flag]:
        (param,) = [p for p in commands[name].params if flag in getattr(p, "opts", ())]
        assert isinstance(param, click.Option)
        seen[name] = (param.help, param.default, param.show_default, repr(param.type))
    assert len(set(seen.values())) == 1, seen


def test_selection_options_hand_the_command_one_row_selection() -> None:
    got: list[RowSelection] = []

    @click.command()
    @selection_options(window=True)
    def probe(selection: RowSelection) -> None:
        got.append(selection)

    result = CliRunner().invoke(probe, ["--trim-start", "2", "--end", "9", "--include-warmup"])
    assert result.exit_code == 0, result.output
    assert got == [RowSelection(exclude_warmup=False, trim_start_s=2.0, end_s=9.0)]
    result = CliRunner().invoke(probe, ["--start", "5", "--end", "5"])
    assert result.exit_code == 2
    assert "--end must be after --start" in result.output


def test_budget_options_refuse_contradictions_before_the_command_runs() -> None:
    @click.command()
    @budget_options
    def probe(budget: object) -> None:
        raise AssertionError("not reached")

    result = CliRunner().invoke(probe, ["--model", "llama-3.1-8b"])
    assert result.exit_code == 2
    assert "--model and --gpu go together" in result.output


def test_load_slos_reads_files_then_rules(tmp_path: Path) -> None:
    slo_file = tmp_path / "slo.toml"
    slo_file.write_text(
        "[goodput]\nttft_ms = 150\n\n[[slo]]\nmetric = 'ttft_ms'\npercentile = 99\nmax = 150\n"
    )
    slos = load_slos(["goodput>=0.9", str(slo_file)])
    assert [o.metric for o in slos.objectives] == ["ttft_ms", "goodput"]
    assert slos.goodput.ttft_ms == 150
