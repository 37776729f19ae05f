"""``--config FILE`` (replay, sweep, sim, gate), the saved ``RUN/config.toml``, ``--dry-run``,
the old option spellings, ``plan``'s options reaching ``check-claim``, and a gate's verdict
printed once. One simulator on loopback port 0 serves the round trip."""

from __future__ import annotations

import json
import socket
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from runbuilders import make_run

from loadgen.cli.options.config import dump_toml
from loadgen.cli.root import cli
from loadgen.sim.launch import SimProcess, start_sim

pytestmark = pytest.mark.serial


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "t.parquet"
    synth = ["trace", "synth", "--requests", "6", "--rate", "50", "-o", str(path)]
    result = CliRunner().invoke(cli, synth)
    assert result.exit_code == 0, result.output
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """A simulator configured by a file (``--config``), flags on top."""
    cfg = tmp_path_factory.mktemp("sim") / "sim.toml"
    cfg.write_text('ttft-ms = 1.0\nitl_ms = 1.0\nserved-model-name = "from-file"\n')
    with start_sim(["--config", str(cfg)]) as sim:
        yield sim


@pytest.fixture
def closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _invoke(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert "Traceback" not in result.stderr, result.stderr
    return result.exit_code, result.stdout, result.stderr


def test_a_saved_config_replays_the_run_with_the_same_options(
    tmp_path: Path, trace: Path, server: SimProcess
) -> None:
    first, again = tmp_path / "r1", tmp_path / "r2"
    code, _, err = _invoke(
        "replay", trace, "--base-url", server.base_url, "-o", first, "--rate", "100",
        "--max-requests", "5", "--warmup-requests", "1", "--no-progress", "--prompt-seed", "3",
        "--no-scrape-metrics",
        "--extra-body", '{"temperature": 0}',
    )  # fmt: skip
    assert code == 0, err
    saved = tomllib.loads((first / "config.toml").read_text())
    assert saved["rate"] == 100.0
    assert saved["max_requests"] == 5
    assert saved["prompt_seed"] == 3
    assert saved["trace"] == str(trace.absolute())
    assert saved["extra_body"] == '{"temperature": 0}'
    assert "out" not in saved  # a replay from the file writes a new run directory
    code, _, err = _invoke("replay", "--config", first / "config.toml", "-o", again)
    assert code == 0, err
    assert tomllib.loads((again / "config.toml").read_text()) == saved
    infos = [json.loads((d / "run.json").read_text()) for d in (first, again)]
    assert infos[0]["endpoint"]["model"] == "from-file"  # the simulator read its file
    configs = [info["config"] for info in infos]
    for config in configs:
        del config["run_dir"], config["run_id"]
    assert configs[0] == configs[1]


def test_flags_override_the_file_and_an_old_spelling_warns(tmp_path: Path, trace: Path) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'trace = "{trace}"\nmax-requests = 4\nwarmup_requests = 3\n'
        "extra-body = { temperature = 0.5 }\n"
    )
    code, out, err = _invoke("replay", "--config", cfg, "--dry-run")
    assert code == 0, err
    assert '"temperature":0.5' in out
    assert "requests: 4 (" in out
    assert "the first 3 warm-up" in out
    code, out, err = _invoke("replay", "--config", cfg, "--dry-run", "--max-requests", "2")
    assert code == 0, err
    assert "requests: 2 (" in out
    code, out, err = _invoke("replay", "--config", cfg, "--dry-run", "--warmup", "1")
    assert code == 0, err
    assert "the first 1 warm-up" in out
    assert err.strip() == (
        "warning: --warmup is deprecated and will be removed in the next release; "
        "use --warmup-requests"
    )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("no_such_option = 1\n", "no_such_option"),
        ("rate = -1\n", "rate"),
        ('base-url = "notaurl"\n', "base-url"),
        ("header = [1, [2]]\n", "header"),
        ('extra-body = { model = "x" }\n', "extra-body"),
    ],
)
def test_a_bad_key_or_value_is_one_line_naming_key_and_file(
    tmp_path: Path, trace: Path, text: str, key: str
) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    code, _, err = _invoke("replay", trace, "--config", cfg, "--dry-run")
    assert code == 2
    assert err.startswith(f"error: {cfg}: key '{key}'"), err
    assert len(err.splitlines()) == 1, err


def test_a_redacted_secret_in_a_file_is_refused_unless_given(tmp_path: Path, trace: Path) -> None:
    cfg = tmp_path / "saved.toml"
    cfg.write_text(dump_toml({"trace": str(trace), "header": ["X-Api-Key: <redacted>"]}))
    code, _, err = _invoke("replay", "--config", cfg, "--dry-run")
    assert code == 2
    assert "key 'header': holds a redacted secret" in err
    code, out, err = _invoke(
        "replay", "--config", cfg, "--dry-run", "--header", "X-Api-Key: k-123456"
    )
    assert code == 0, err
    assert "k-123456" not in out
    assert "X-Api-Key: <redacted>" in out


def test_dump_toml_reads_back() -> None:
    values = {"a": 'quo"te\\\n\x01', "b": [1, 2], "c": 1.5, "d": True, "e": ["x: y"]}
    assert tomllib.loads(dump_toml(values, comment="two\nlines")) == values


def test_a_dry_run_connects_nowhere_and_makes_no_directory(
    tmp_path: Path, trace: Path, closed_url: str
) -> None:
    secret_url = closed_url.replace("http://", "http://user:pw-secret@")
    run_dir, sweep_dir = tmp_path / "r", tmp_path / "s"
    code, out, err = _invoke(
        "replay", trace, "--base-url", secret_url, "-o", run_dir, "--dry-run", "--model", "m"
    )
    assert code == 0, err
    assert not run_dir.exists()
    assert "requests: 6 (open loop" in out
    assert "classes: text/chat 6" in out
    assert '"model":"m"' in out
    assert "pw-secret" not in out
    assert "user:" not in out
    code, out, err = _invoke(
        "sweep", trace, "--base-url", closed_url, "-o", sweep_dir, "--rates", "1x,2x",
        "--dry-run", "--server-time-scale", "2",
    )  # fmt: skip
    assert code == 0, out + err
    assert not sweep_dir.exists()
    assert "steps: 2: 1x (" in out
    assert "--server-time-scale is deprecated" in err
    assert "--clock-scale" in err


def test_config_reaches_sim_and_gate(tmp_path: Path) -> None:
    cfg = tmp_path / "sim.toml"
    cfg.write_text("ttft_ms = -5\n")
    code, _, err = _invoke("sim", "--config", cfg)
    assert code == 2, err
    assert f"{cfg}: key 'ttft_ms'" in err, err
    make_run(tmp_path / "run", n=120)
    gate_cfg = tmp_path / "gate.toml"
    gate_cfg.write_text('slo = ["ttft_ms.p99<=1"]\nmax-regression = 0.2\n')
    code, out, err = _invoke("gate", tmp_path / "run", "--config", gate_cfg)
    assert code == 1, out + err  # the file's SLO breaks
    code, out, err = _invoke(
        "gate", tmp_path / "run", "--config", gate_cfg, "--slo", "ttft_ms.p99<=100000"
    )
    assert code == 0, out + err  # the flag's SLO replaces it


def test_a_gate_prints_its_verdict_once_on_stdout(tmp_path: Path) -> None:
    make_run(tmp_path / "run", n=120)
    code, out, err = _invoke("gate", tmp_path / "run", "--slo", "ttft_ms.p99<=1")
    assert code == 1
    assert out.count("SLO BREACH") == 1
    assert err == ""


def test_check_claim_takes_the_plan_groups_options() -> None:
    code, out, err = _invoke(
        "plan", "--model", "llama-3.1-8b", "--gpu", "h200", "--gpus", "2",
        "check-claim", "--tokens-per-s", "1000",
    )  # fmt: skip
    assert code == 0, err
    assert "llama-3.1-8b on 2 x h200: POSSIBLE" in out
    # The subcommand's own flag wins over the group's.
    code, out, err = _invoke(
        "plan", "--model", "llama-3.1-8b", "--gpu", "h200", "--gpus", "2",
        "check-claim", "--gpus", "1", "--tokens-per-s", "1000",
    )  # fmt: skip
    assert code == 0, err
    assert "on 1 x h200" in out
