"""The deployment description: every example loads, bad files fail on one line naming the
key and the file, and what a run learnt of its endpoint's survives run.json."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from runbuilders import run_info

from analyzers.decompose.deployment import budget_from_deployment
from loadgen.sim.config import EngineConfig, engine_deployment, engine_options
from traces.deployment import (
    DeploymentFact,
    DeploymentGap,
    DeploymentInfo,
    DeploymentSpec,
    load_deployment,
    parse_deployment,
)
from traces.errors import DeploymentError
from traces.runinfo import RunInfo

pytestmark = pytest.mark.serial

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "deployments").glob("*.toml"))


def test_there_are_the_four_examples() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {"vllm-monolith", "vllm-disagg", "sglang", "llamacpp"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_loads_and_gives_a_budget(path: Path) -> None:
    spec = load_deployment(path)
    assert spec.model is not None
    assert spec.gpu is not None
    built = budget_from_deployment(spec, sources={}, default_source=str(path))
    assert built.budget.model.name == spec.model
    assert str(path) in built.summary(str(path))
    if spec.disaggregated:
        assert built.budget.link is not None
        assert not built.budget.first_token_in_prefill
    # The simulator reads every example it can run (tensor parallel only).
    options = engine_options(spec)
    config = EngineConfig(**options)  # type: ignore[arg-type]
    assert config.model == spec.model


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("modle = 'x'", "unknown key 'modle'"),
        ("[scheduler]\nmax_num_seq = 4", "unknown key 'scheduler.max_num_seq'"),
        ("[scheduler]\nmax_num_seqs = 0", "key 'scheduler.max_num_seqs' must be an integer >= 1"),
        ("replicas = 1.5", "key 'replicas' must be an integer >= 1"),
        ("[efficiency]\nprefill = 1.5", "key 'efficiency.prefill' must be a number in (0, 1]"),
        ("topology = 'mesh'", 'key \'topology\' must be "monolith" or "disagg"'),
        ("[kv_link]\ngbps = 100", "key 'kv_link.gbps' needs topology = \"disagg\""),
        ("topology = 'disagg'\nreplicas = 2", "key 'replicas' is for a monolith"),
        ("gpus = 4\ntensor_parallel = 2", "key 'gpus' is 4 but tensor_parallel x"),
        ("scheduler = 3", "[scheduler] must be a table"),
        ("model = ", "not valid TOML"),
    ],
)
def test_bad_files_are_one_line_errors_naming_key_and_file(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "d.toml"
    path.write_text(text + "\n")
    with pytest.raises(DeploymentError) as info:
        load_deployment(path)
    text_out = str(info.value)
    assert message in text_out
    assert text_out.startswith(str(path))
    assert "\n" not in text_out
    assert DeploymentError.exit_code == 2


def test_a_missing_file_is_a_deployment_error(tmp_path: Path) -> None:
    with pytest.raises(DeploymentError, match="cannot read"):
        load_deployment(tmp_path / "nope.toml")


def test_the_simulator_publishes_what_it_runs_and_reads_it_back() -> None:
    engine = EngineConfig(
        model="llama-3.1-8b", topology="disagg", link_gbps=100.0, time_scale=4.0,
        max_batched_tokens=1024, prefix_cache=False,
    )  # fmt: skip
    spec = parse_deployment(engine_deployment(engine).nested(), where="card")
    assert EngineConfig(**engine_options(spec)) == engine  # type: ignore[arg-type]


def test_admission_and_the_context_limit_travel_with_the_deployment() -> None:
    engine = EngineConfig(
        model="llama-3.1-8b", max_model_len=4096, admission_ttft_ms=800.0,
        admission_margin_ms=5.0,
    )  # fmt: skip
    spec = parse_deployment(engine_deployment(engine).nested(), where="card")
    assert (spec.max_model_len, spec.admission.ttft_ms, spec.admission.margin_ms) == (
        4096, 800.0, 5.0,
    )  # fmt: skip
    assert EngineConfig(**engine_options(spec)) == engine  # type: ignore[arg-type]
    doc = {"admission": {"ttft_ms": 300, "margin_ms": 0}}
    assert parse_deployment(doc, where="f").admission.ttft_ms == 300.0
    with pytest.raises(DeploymentError, match=r"admission\.ttft_ms"):
        parse_deployment({"admission": {"ttft_ms": 0}}, where="f")


def test_run_json_keeps_the_facts_and_their_sources() -> None:
    info = DeploymentInfo(
        facts=(
            DeploymentFact(key="max_model_len", value=8192, source="/v1/models max_model_len"),
            DeploymentFact(
                key="scheduler.prefix_caching", value=True, source="vLLM /metrics cache_config_info"
            ),
        ),
        unavailable=(DeploymentGap(source="llama.cpp /props", reason="HTTP 404"),),
    )
    base = run_info()
    doc = replace(base, deployment=info).to_json()
    back = RunInfo.from_json(doc)
    assert back.deployment == info
    assert back.deployment.spec().max_model_len == 8192
    assert back.deployment.sources()["scheduler.prefix_caching"].startswith("vLLM")
    # A version 3 run.json (no deployment) still loads.
    old = {**base.to_json(), "schema_version": 3}
    assert RunInfo.from_json(old).deployment is None


def test_plan_reads_the_file_and_flags_override_it() -> None:
    import json

    from click.testing import CliRunner

    from loadgen.cli.root import cli

    path = str(ROOT / "examples" / "deployments" / "sglang.toml")
    result = CliRunner().invoke(cli, ["plan", "--deployment", path, "--json"])
    assert result.exit_code == 0, result.output
    deploy = json.loads(result.output)["deployment"]
    assert (deploy["tensor_parallel"], deploy["chunk_tokens"]) == (4, 8192)
    assert (deploy["prefill_efficiency"], deploy["memory_fraction"]) == (0.55, 0.88)
    result = CliRunner().invoke(cli, ["plan", "--deployment", path, "--gpus", "8", "--json"])
    assert json.loads(result.output)["deployment"]["tensor_parallel"] == 8


def test_a_bad_file_is_exit_2_on_one_line_for_every_reader(tmp_path: Path) -> None:
    import subprocess
    import sys

    from click.testing import CliRunner

    from loadgen.cli.root import cli

    bad = tmp_path / "bad.toml"
    bad.write_text("model = 'llama-3.1-8b'\n[scheduler]\nchunk = 512\n")
    for args in (
        ["plan", "--deployment", str(bad)],
        ["decompose", str(tmp_path), "--deployment", str(bad)],
    ):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, (args, result.output)
        assert "unknown key 'scheduler.chunk'" in result.output
        assert "Traceback" not in result.output
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli.sim", "--deployment", str(bad)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "unknown key 'scheduler.chunk'" in proc.stderr


def test_decompose_flags_override_the_deployment_file(tmp_path: Path) -> None:
    from loadgen.cli.options.budget import budget_choice

    path = ROOT / "examples" / "deployments" / "vllm-disagg.toml"
    choice = budget_choice(None, path, None, None, None, None)
    resolved = choice.resolve(tmp_path, {"scheduler.max_batched_tokens": 512, "time_scale": 4.0})
    assert resolved.budget is not None
    assert resolved.budget.deployment.chunk_tokens == 512
    assert resolved.budget.link is not None
    assert resolved.time_scale == 4.0
    assert resolved.provenance is not None
    assert "flag --chunk-tokens" in resolved.provenance
    assert "flag --clock-scale" in resolved.provenance
    # --model alone is fine over a file that names the GPU.
    choice = budget_choice(None, path, "llama-3.3-70b", None, 2, None)
    built = choice.resolve()
    assert built.budget is not None
    assert built.budget.model.name == "llama-3.3-70b"


def test_on_a_disaggregated_deployment_replicas_and_gpus_flags_size_the_prefill_pool(
    tmp_path: Path,
) -> None:
    from loadgen.cli.options.budget import budget_choice

    path = ROOT / "examples" / "deployments" / "vllm-disagg.toml"
    resolved = budget_choice(None, path, None, None, 2, None).resolve(tmp_path, {"replicas": 3})
    assert resolved.budget is not None
    assert resolved.budget.replicas == 3
    assert resolved.budget.deployment.tensor_parallel == 2
    assert resolved.provenance is not None
    assert "prefill.instances=3 (flag --replicas)" in resolved.provenance


def _spec(engine: str, batch: int | None = None) -> DeploymentSpec:
    doc: dict[str, object] = {"engine": engine, "model": "llama-3.1-8b", "gpu": "l40s"}
    if batch is not None:
        doc["scheduler"] = {"max_batched_tokens": batch}
    return parse_deployment(doc, where="d.toml")


def test_a_llamacpp_deployment_without_its_batch_assumes_llamacpps_default_and_says_so() -> None:
    # /props gives llama.cpp's slots but not its logical batch (-b), which its slots' prompts
    # share in one llama_decode: the budget assumes the server's default and reports it.
    built = budget_from_deployment(_spec("llama.cpp"), sources={}, default_source="run.json")
    assert built.budget.deployment.chunk_tokens == 2048
    (assumed,) = [p for p in built.assumed if p.key == "scheduler.max_batched_tokens"]
    assert (assumed.value, assumed.source) == ("2048", "default of llama.cpp")
    assert "scheduler.max_batched_tokens=2048 (default of llama.cpp)" in built.summary("run.json")
    # A batch the deployment names wins; another engine keeps "unchunked" as before.
    told = budget_from_deployment(_spec("llama.cpp", 512), sources={}, default_source="d.toml")
    assert told.budget.deployment.chunk_tokens == 512
    other = budget_from_deployment(_spec("vllm"), sources={}, default_source="d.toml")
    assert other.budget.deployment.chunk_tokens is None


def test_a_llamacpp_deployment_admits_by_slots_and_says_so() -> None:
    # llama.cpp's slots (-np) are held from admission to last token and their prompts
    # batched step by step: the decomposition reads a hidden prefill from the run's steps
    # (analyzers.decompose.admission).
    built = budget_from_deployment(_spec("llama.cpp"), sources={}, default_source="run.json")
    assert built.budget.slot_admission
    assert "engine=llama.cpp" in built.summary("run.json")
    other = budget_from_deployment(_spec("vllm"), sources={}, default_source="d.toml")
    assert not other.budget.slot_admission
    assert "engine=" not in other.summary("d.toml")
