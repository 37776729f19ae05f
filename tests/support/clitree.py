"""Every command path of the ``loadgen`` group, walked as ``--help`` lists them (shared by
the help and exit-code tests; on the test path via pytest's ``pythonpath``)."""

from __future__ import annotations

import click

from loadgen.cli.root import cli


def command_paths() -> list[list[str]]:
    """``[["analyze"], ["plan"], ["plan", "calibrate"], ...]``: every command and group."""
    ctx = click.Context(cli)
    paths: list[list[str]] = []

    def walk(group: click.Group, prefix: list[str]) -> None:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None, name
            paths.append([*prefix, name])
            if isinstance(command, click.Group):
                walk(command, [*prefix, name])

    walk(cli, [])
    return paths


def command_at(path: list[str]) -> click.Command:
    """The command at ``path`` (``["plan", "calibrate"]``)."""
    ctx = click.Context(cli)
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(ctx, name)
        assert found is not None, path
        command = found
    return command
