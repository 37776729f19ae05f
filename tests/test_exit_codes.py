"""One exit-code scheme for every command (README's "Exit codes" table), table-driven:
each command against each error class that applies to it, checking the code and that
stderr is one line (``error: ...``) without a traceback.

Error classes (README's codes):

- ``usage``: an unknown option or a bad option value: 2
- ``missing``: an input path that does not exist: 2
- ``malformed``: an input that is not what the command reads (a text file where a trace
  belongs, a trace where a run belongs, a ``-o`` that is not ``.parquet``): 2
- ``invalid``: a run directory whose files cannot be analysed: 3
- ``breach``: an SLO breached (``gate``): 1; the verdict is the gate's output, printed once on
  stdout, so stderr stays empty
- ``usage`` also covers a ``--config`` file with an unknown key or a bad value: one line
  naming the key and the file
- ``down``: the endpoint is unreachable (a closed loopback port) or the port is busy: 4
- ``interrupted``: Ctrl-C during a replay (its rows kept, one ``interrupted:`` line): 130;
  a real process and signal, so it lives in tests/e2e/test_replay_e2e.py (and
  test_signals_e2e.py checks it at random points).

Every command the root group lists must have at least one row: a new command fails
``test_every_command_is_in_the_table`` until it is added here.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from click.testing import CliRunner
from clitree import command_paths
from runbuilders import make_run

from loadgen.cli.root import cli

pytestmark = pytest.mark.serial

EXIT = {"ok": 0, "breach": 1, "usage": 2, "missing": 2, "malformed": 2, "invalid": 3, "down": 4}


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One row: a command, an error class and the arguments that provoke it (``{X}`` is
    replaced by a path or URL of the fixture directory)."""

    command: str
    error: str
    args: tuple[str, ...]


def _c(command: str, error: str, *args: str) -> Case:
    return Case(command=command, error=error, args=(*command.split(), *args))


RUN_COMMANDS = ("analyze", "decompose", "gate", "compare", "report", "server-metrics", "export")
TRACE_COMMANDS = {
    "trace info": (),
    "trace validate": (),
    "trace slice": ("-o", "{D}/out.parquet"),
    "trace scale": ("-o", "{D}/out.parquet", "--rate", "2"),
    "trace merge": ("{D}/t.parquet", "-o", "{D}/out.parquet"),
    "replay": ("--base-url", "{DOWN}", "-o", "{D}/r-new"),
    "sweep": ("--base-url", "{DOWN}", "-o", "{D}/s-new", "--rates", "1x"),
    "simulate": ("--model", "llama-3.1-8b", "--gpu", "h200", "-o", "{D}/m-new"),
    "plan": ("--model", "llama-3.1-8b", "--gpu", "h200"),
}
SLO = ("--slo", "ttft_ms.p99<=100000")


def _extra(command: str) -> tuple[str, ...]:
    """What a run command needs besides its RUN: an SLO (gate), a second run (compare)."""
    return {"gate": SLO, "compare": ("{D}/run",)}.get(command, ())


CASES: list[Case] = [
    *(_c(c, "missing", "{D}/no-such-run", *_extra(c)) for c in RUN_COMMANDS),
    *(_c(c, "malformed", "{D}/t.parquet", *_extra(c)) for c in RUN_COMMANDS),
    *(_c(c, "invalid", "{D}/broken", *_extra(c)) for c in RUN_COMMANDS),
    _c("analyze", "ok", "{D}/run"),
    _c("export", "ok", "{D}/run", "--format", "jsonl", "-o", "{D}/rows.jsonl"),
    _c("gate", "ok", "{D}/run", *SLO),
    _c("gate", "breach", "{D}/run", "--slo", "ttft_ms.p99<=1"),
    _c("gate", "usage", "{D}/run", "--slo", "no_such_metric<=1"),
    _c("compare", "usage", "{D}/run", "--no-such-option"),
    _c("recover", "missing", "{D}/no-such-run"),
    _c("recover", "invalid", "{D}/broken"),
    *(
        _c(c, "missing", *(("--trace",) if c == "plan" else ()), "{D}/nope.parquet", *extra)
        for c, extra in TRACE_COMMANDS.items()
    ),
    *(
        _c(c, "malformed", *(("--trace",) if c == "plan" else ()), "{D}/bad.parquet", *extra)
        for c, extra in TRACE_COMMANDS.items()
    ),
    _c("replay", "down", "{D}/t.parquet", "--base-url", "{DOWN}", "-o", "{D}/r-down"),
    _c("replay", "usage", "{D}/t.parquet", "--base-url", "notaurl", "-o", "{D}/r-url"),
    _c("replay", "usage", "{D}/t.parquet", "--rate", "0", "-o", "{D}/r-rate"),
    _c("replay", "usage", "{D}/t.parquet", "--config", "{D}/bad-key.toml", "-o", "{D}/r-cfg"),
    _c("replay", "usage", "{D}/t.parquet", "--config", "{D}/bad-value.toml", "-o", "{D}/r-v"),
    _c("replay", "usage", "{D}/t.parquet", "--config", "{D}/no-such.toml", "-o", "{D}/r-nf"),
    _c("replay", "ok", "{D}/t.parquet", "--base-url", "{DOWN}", "-o", "{D}/r-dry", "--dry-run"),
    _c("sweep", "usage", "{D}/t.parquet", "--config", "{D}/bad-key.toml", "-o", "{D}/s-cfg"),
    _c("sim", "usage", "--config", "{D}/bad-key.toml"),
    _c("gate", "usage", "{D}/run", "--config", "{D}/bad-value.toml"),
    _c(
        "sweep",
        "down",
        "{D}/t.parquet",
        "--base-url",
        "{DOWN}",
        "-o",
        "{D}/s-down",
        "--rates",
        "1x",
    ),
    _c(
        "sweep",
        "usage",
        "{D}/t.parquet",
        "--base-url",
        "notaurl",
        "-o",
        "{D}/s-url",
        "--rates",
        "1x",
    ),
    _c("simulate", "usage", "{D}/t.parquet", "-o", "{D}/m-usage"),  # needs --model
    _c("sim", "down", "--port", "{BUSY}"),
    _c("sim", "usage", "--ttft-ms", "-1"),
    _c("trace import", "missing", "mooncake", "{D}/nope.jsonl", "-o", "{D}/i.parquet"),
    _c("trace import", "malformed", "mooncake", "{D}/bad.csv", "-o", "{D}/i.parquet"),
    _c("trace import", "malformed", "aiperf", "{D}/bad-aiperf.jsonl", "-o", "{D}/i.parquet"),
    _c("trace import", "malformed", "aiperf_dag", "{D}/bad-aiperf.jsonl", "-o", "{D}/i.parquet"),
    _c("trace synth", "malformed", "--requests", "3", "-o", "{D}/x.csv"),
    _c("trace synth", "usage", "--requests", "0", "-o", "{D}/x.parquet"),
    _c("trace", "usage", "no-such-subcommand"),
    _c("plan", "usage", "--model", "no-such-model", "--gpu", "h200"),
    _c("plan calibrate", "missing", "{D}/nope.csv", "-o", "{D}/p.toml"),
    _c("plan calibrate", "malformed", "{D}/bad.csv", "-o", "{D}/p.toml"),
    _c("plan check-claim", "usage", "--tokens-per-s", "1000"),  # needs --model, --gpu
    _c("plan admission", "usage", "--model", "llama-3.1-8b", "--prompt-tokens", "2000"),
    _c("plan admission", "missing", "--deployment", "{D}/nope.toml", "--admission-ttft-ms", "5"),
    _c("plan fleet", "missing", "{D}/nope.toml"),
    _c("plan fleet", "malformed", "{D}/bad.csv"),
    _c("plan fleet", "usage", "{D}/bad.csv", "--cache-hit", "2"),
    _c("plan chunk", "usage", "--model", "llama-3.1-8b"),  # needs --rate
    _c("plan chunk", "usage", "--model", "llama-3.1-8b", "--rate", "1", "--chunk-sizes", "0"),
    _c("plan chunk", "missing", "--deployment", "{D}/nope.toml", "--rate", "1"),
    _c(
        "plan chunk",
        "malformed",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "1",
        "--trace",
        "{D}/bad.parquet",
    ),
    _c("demo", "usage", "--no-such-option"),
    _c("demo-compare", "usage", "--no-such-option"),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The fixture directory: a run, a broken run, a trace, non-Parquet files, a closed
    loopback port (``DOWN``) and a listening one (``BUSY``)."""
    d = tmp_path_factory.mktemp("exit")
    make_run(d / "run", n=120)  # enough rows for a valid p99
    (d / "broken").mkdir()
    (d / "broken" / "requests.parquet").write_text("not parquet")
    (d / "broken" / "run.json").write_text("{")
    (d / "bad.parquet").write_text("not parquet")
    (d / "bad.csv").write_text("a,b\n1,2\n")
    (d / "bad-aiperf.jsonl").write_text('{"text": "ok"}\n{"turns": "not a list"}\n')
    (d / "bad-key.toml").write_text("no_such_option = 1\n")
    (d / "bad-value.toml").write_text("rate = 0\nslo = [[1]]\n")
    synth = ["trace", "synth", "--requests", "5", "--rate", "50", "-o", str(d / "t.parquet")]
    assert CliRunner().invoke(cli, synth).exit_code == 0
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        down = closed.getsockname()[1]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield {
            "D": str(d),
            "DOWN": f"http://127.0.0.1:{down}/v1",
            "BUSY": str(busy.getsockname()[1]),
        }


def _fill(args: tuple[str, ...], files: dict[str, str]) -> list[str]:
    out = []
    for a in args:
        for key, value in files.items():
            a = a.replace("{" + key + "}", value)
        out.append(a)
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.command}-{c.error}")
def test_exit_code(case: Case, files: dict[str, str]) -> None:
    result = CliRunner().invoke(cli, _fill(case.args, files))
    expected = EXIT[case.error]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == expected, (result.exit_code, result.stderr, result.exception)
    assert "Traceback" not in result.stderr
    if case.error == "breach":
        assert not lines, result.stderr  # the verdict is on stdout, once
        assert result.stdout.count("SLO BREACH") == 1, result.stdout
    elif expected:
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("error: "), result.stderr


def test_every_command_is_in_the_table() -> None:
    in_table = {c.command for c in CASES}
    assert {" ".join(p) for p in command_paths()} <= in_table


def test_every_error_class_applies_somewhere() -> None:
    assert {c.error for c in CASES} == set(EXIT)
