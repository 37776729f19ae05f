"""SimConfig validation and the ``loadgen sim`` command line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from loadgen.cli.root import cli
from loadgen.errors import ConfigError
from loadgen.sim.config import SimConfig


def test_defaults() -> None:
    config = SimConfig()
    assert (config.host, config.port, config.served_model_name) == ("127.0.0.1", 8000, "sim-model")
    assert config.fixed_ttft_ns == 20_000_000
    assert config.chunk_interval_ns == 10_000_000
    assert SimConfig(tokens_per_chunk=3, itl_ms=2.5).chunk_interval_ns == 7_500_000
    assert SimConfig(prefill_us_per_token=2.0).prefill_ns(1000) == 2_000_000


@pytest.mark.parametrize(
    "kwargs",
    [
        {"port": -1},
        {"port": 70000},
        {"ttft_ms": -1.0},
        {"itl_ms": float("nan")},
        {"error_rate": 1.5},
        {"drop_rate": -0.1},
        {"tokens_per_chunk": 0},
        {"image_tokens": -1},
        {"served_model_name": ""},
        {"frontend_ms": -1.0},
        {"frontend_share": 1.5},
        {"frontend_share": -0.1},
    ],
)
def test_rejects_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        SimConfig(**kwargs)  # type: ignore[arg-type]


def test_config_is_frozen_and_keyword_only() -> None:
    config = SimConfig()
    with pytest.raises(AttributeError):
        config.port = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        SimConfig("0.0.0.0")  # type: ignore[call-arg]


def test_help_lists_every_option() -> None:
    result = CliRunner().invoke(cli, ["sim", "--help"])
    assert result.exit_code == 0, result.output
    for option in (
        "--host", "--port", "--served-model-name", "--ttft-ms", "--prefill-us-per-token",
        "--itl-ms", "--tokens-per-chunk", "--image-tokens", "--error-rate", "--rate-429",
        "--drop-rate", "--stall-rate", "--stall-ms", "--seed",
        "--model", "--gpu", "--gpus", "--topology", "--replicas", "--router",
        "--prefill-gpus", "--decode-gpus", "--link-gbps", "--clock-scale", "--max-num-seqs",
        "--max-batched-tokens", "--kv-capacity-tokens", "--no-prefix-cache", "--preempt",
        "--frontend-ms", "--frontend-share",
    ):  # fmt: skip
        assert option in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["--port", "-5"],
        ["--error-rate", "2"],
        ["--tokens-per-chunk", "0"],
        ["--itl-ms", "fast"],
        ["--model", "x"],
        ["--gpu", "h100"],
        ["--frontend-ms", "5"],  # a front end needs the physics engine
        ["--frontend-ms", "-1", "--model", "llama-3.1-8b"],
        ["--frontend-share", "0.5", "--model", "llama-3.1-8b"],  # a share of no front end
        ["--frontend-share", "2", "--frontend-ms", "5", "--model", "llama-3.1-8b"],
    ],
)
def test_bad_option_exits_2_with_one_line(args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["sim", *args])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(("Error:", "error:"))
    assert "Traceback" not in result.output
