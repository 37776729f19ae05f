"""``loadgen plan fleet``: the example pipeline, its chain checked by hand, the answer
tier's nodes against the cache hit rate, and the pipeline file's one-line errors."""

from __future__ import annotations

import itertools
import json
import math
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzers.budget.catalog import default_catalog
from analyzers.budget.disagg import monolith_capacity
from analyzers.budget.fleet import FleetPlan, plan_fleet
from analyzers.budget.fleetfile import PipelineSpec, load_pipeline, parse_pipeline
from analyzers.budget.queueing import mdc_wait_quantile_s
from analyzers.budget.specs import Deployment
from analyzers.errors import BudgetError
from loadgen.cli.root import cli

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "pipelines" / "rag.toml"


def _plan(spec: PipelineSpec, hits: tuple[float, ...] = (0.0, 0.7)) -> FleetPlan:
    cat = default_catalog()
    a = spec.answer
    model = cat.model(a.model)
    if a.dtype is not None:
        model = replace(model, weight_dtype=a.dtype)  # type: ignore[arg-type]
    deploy = Deployment(hardware=cat.gpu(a.gpu), tensor_parallel=a.tensor_parallel)
    return plan_fleet(
        spec,
        hardware=cat.gpu,
        answer_model=model,
        answer_deploy=deploy,
        cache_hits=hits,
        answer_where="test",
    )


def test_the_example_loads_and_its_reranker_chain_is_the_hand_arithmetic() -> None:
    spec = load_pipeline(EXAMPLE)
    assert [s.name for s in spec.stages] == ["embedder", "index", "reranker", "answer"]
    plan = _plan(spec)
    assert math.isclose(sum(s.budget_s for s in plan.split), 1.0)  # sums to e2e_p99_ms
    assert plan.split[-1].stage == "network, routing, slack"
    assert math.isclose(plan.split[-1].budget_s, 0.050)
    rerank = next(s for s in plan.stages if s.name == "reranker")
    # 10,000 queries/s x 50 pairs x 292 tokens
    assert rerank.work_per_s == pytest.approx(146e6)
    # 2 x 302e6 + 4 x 24 x 1024 x 292 = 632,704,768 FLOP/token; 989.4e12 x 0.35 FLOP/s
    per_gpu = 989.4e12 * 0.35 / 632_704_768
    assert per_gpu == pytest.approx(547_317, rel=1e-6)
    service = 50 * 292 / per_gpu  # one query's pairs on one GPU: 26.7 ms
    assert service == pytest.approx(0.02667, rel=1e-3)
    # the utilisation is where S + p99 wait (M/D/8) reaches the 100 ms budget
    wait = mdc_wait_quantile_s(rerank.utilisation, service, 8, 0.99)
    assert service + wait == pytest.approx(0.100, rel=1e-6)
    assert rerank.node_capacity_per_s == pytest.approx(8 * per_gpu * rerank.utilisation)
    assert rerank.nodes == math.ceil(146e6 / (8 * per_gpu * rerank.utilisation))
    index = next(s for s in plan.stages if s.name == "index")
    # 500e6 x (1024 x 2 + 256) B = 1.152 TB over 512 GB x 0.75 = 384 GB per node
    assert index.work_per_s == pytest.approx(10_000 * 3)
    assert index.nodes % 3 == 0


def test_the_answer_tier_uses_the_plan_step_model() -> None:
    spec = load_pipeline(EXAMPLE)
    plan = _plan(spec)
    cat = default_catalog()
    model = replace(cat.model("llama-3.3-70b"), weight_dtype="fp8")
    deploy = Deployment(hardware=cat.gpu("h100"), tensor_parallel=8)
    rate = monolith_capacity(
        model,
        deploy,
        prompt_tokens=1456,
        output_tokens=150,
        slo_ttft_s=0.8,
        slo_tpot_s=0.05,
        cached_tokens=400,
        wait_quantile=0.99,
    )
    assert plan.node_queries_per_s == pytest.approx(rate)
    at_zero, at_seventy = plan.answers
    assert at_zero.nodes == math.ceil(10_000 / rate)
    assert at_seventy.nodes == math.ceil(3_000 / rate)
    assert at_zero.prefill_tokens_per_s == pytest.approx(10_000 * 1056)
    assert at_seventy.decode_tokens_per_s == pytest.approx(3_000 * 150)


def test_nodes_fall_monotonically_with_the_cache_hit_rate() -> None:
    hits = tuple(i / 10 for i in range(11))
    nodes = [a.nodes for a in _plan(load_pipeline(EXAMPLE), hits).answers]
    assert all(a >= b for a, b in itertools.pairwise(nodes))
    assert nodes[0] > nodes[7] > nodes[10] == 0


def test_a_longer_cached_prefix_does_not_cost_nodes() -> None:
    spec = load_pipeline(EXAMPLE)
    rates = []
    for cached in (0, 400, 1000):
        answer = replace(spec.answer, cached_prompt_tokens=cached)
        stages = tuple(answer if s.name == "answer" else s for s in spec.stages)
        rates.append(_plan(replace(spec, stages=stages), (0.0,)).node_queries_per_s)
    assert rates[0] < rates[1] < rates[2]


def _doc() -> dict[str, object]:
    return tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))


def _stage(doc: dict[str, object], name: str) -> dict[str, object]:
    stages = doc["stages"]
    assert isinstance(stages, dict)
    table = stages[name]
    assert isinstance(table, dict)
    return table


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: _stage(d, "reranker").update(pairs=50), "[stages.reranker] pairs: unknown key"),
        (lambda d: _stage(d, "index").pop("dim"), "[stages.index] dim: missing"),
        (lambda d: _stage(d, "embedder").update(efficiency=1.5), "efficiency: must be in (0, 1]"),
        (lambda d: _stage(d, "answer").update(kind="gpt"), "[stages.answer] kind: must be one"),
        (lambda d: _stage(d, "answer").update(prompt_tokens="1k"), "prompt_tokens: must be"),
        (lambda d: _stage(d, "answer").update(cached_prompt_tokens=2000), "cached_prompt_tokens"),
        (lambda d: _stage(d, "answer").update(tensor_parallel=3), "tensor_parallel: must divide"),
        (lambda d: _stage(d, "answer").update(budget_ms=990), "e2e_p99_ms: the stages' budget"),
        (lambda d: d.update(extra={}), "unknown table [extra]"),
    ],
)
def test_a_bad_key_is_named_with_the_file(edit: object, needle: str) -> None:
    doc = _doc()
    assert callable(edit)
    edit(doc)
    with pytest.raises(BudgetError) as caught:
        parse_pipeline(doc, "rag.toml", EXAMPLE.parent)
    assert needle in str(caught.value)
    assert str(caught.value).startswith("rag.toml: ")


def test_the_command_prints_the_chain_at_two_hit_rates_and_json(tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["plan", "fleet", str(EXAMPLE), "--cache-hit", "0", "--cache-hit", "0.7"]
    text = runner.invoke(cli, args)
    assert text.exit_code == 0, text.output
    assert "Budget split" in text.output
    assert "answer at cache hit 0:" in text.output
    assert "answer at cache hit 0.7:" in text.output
    assert "500000 pairs/s x 292 tokens = 146e6 tokens/s" in text.output
    doc = json.loads(runner.invoke(cli, [*args, "--json"]).output)
    assert [a["cache_hit"] for a in doc["answers"]] == [0.0, 0.7]
    assert doc["answers"][0]["nodes"] > doc["answers"][1]["nodes"] > 0
    bad = tmp_path / "bad.toml"
    bad.write_text(EXAMPLE.read_text(encoding="utf-8").replace("cores_per_node", "cores"))
    out = runner.invoke(cli, ["plan", "fleet", str(bad)])
    assert out.exit_code == 2
    assert f"{bad}: [stages.index] cores: unknown key" in out.output
    bad.write_text(EXAMPLE.read_text(encoding="utf-8").replace('"llama-3.3-70b"', '"llama-9"'))
    out = runner.invoke(cli, ["plan", "fleet", str(bad)])
    assert out.exit_code == 2
    assert f"{bad}: [stages.answer] model: unknown model 'llama-9'" in out.output


def test_the_p99_wait_of_one_server_is_the_closed_form() -> None:
    # M/M/1: P(W > t) = rho exp(-(1 - rho) t / S); halved for fixed service
    rho, service = 0.8, 0.010
    expected = 0.5 * math.log(0.8 / 0.01) * service / (1 - rho)
    assert mdc_wait_quantile_s(rho, service, 1, 0.99) == pytest.approx(expected)
    assert mdc_wait_quantile_s(0.005, service, 1, 0.99) == 0.0  # 0.5% wait at all


def test_the_answer_model_takes_a_deployment_file_as_plan_does(tmp_path: Path) -> None:
    deployments = EXAMPLE.parent.parent / "deployments"
    pipeline = tmp_path / "rag.toml"  # the stage's key, relative to the pipeline's folder
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "sglang.toml").write_text(
        (deployments / "sglang.toml").read_text(encoding="utf-8")
    )
    text = EXAMPLE.read_text(encoding="utf-8") + 'deployment = "d/sglang.toml"\n'
    pipeline.write_text(text)
    by_key = CliRunner().invoke(cli, ["plan", "fleet", str(pipeline), "--json"])
    assert by_key.exit_code == 0, by_key.output
    flag = ["plan", "fleet", str(EXAMPLE), "--deployment", str(deployments / "sglang.toml")]
    by_flag = CliRunner().invoke(cli, [*flag, "--json"])
    a, b = json.loads(by_key.output), json.loads(by_flag.output)
    assert "sglang.toml" in a["answer_where"]
    assert "4 x h200 per replica" in a["answer_where"]
    assert a["node_queries_per_s"] == pytest.approx(b["node_queries_per_s"])
    assert a["node_queries_per_s"] != pytest.approx(
        _plan(load_pipeline(EXAMPLE)).node_queries_per_s
    )
