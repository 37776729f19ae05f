"""``loadgen plan fleet``: size every stage of a pipeline file from its work per second.

Composes: the pipeline file (:mod:`analyzers.budget.fleetfile`), the catalog, the answer
model's deployment (the file's stage, then its ``deployment`` key or ``--deployment``, then
``--profile``: the same sources, in the same order, as ``loadgen plan``) and the arithmetic
of :mod:`analyzers.budget.fleet`; prints :func:`reports.plan.render_fleet` or JSON.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import click

from analyzers.budget.catalog import Catalog, load_catalog
from analyzers.budget.fleetfile import AnswerStage, EncoderStage, PipelineSpec
from analyzers.budget.specs import Deployment, ModelSpec
from analyzers.errors import BudgetError
from loadgen.cli.plan.flags import catalog_option, json_option


def _check_names(cat: Catalog, spec: PipelineSpec) -> None:
    """Every catalog name the file gives is known; else one line naming the key and file."""
    for stage in spec.stages:
        names: list[tuple[str, str]] = []
        if isinstance(stage, EncoderStage | AnswerStage):
            names.append(("gpu", stage.gpu))
        if isinstance(stage, AnswerStage):
            names.append(("model", stage.model))
        for key, name in names:
            try:
                cat.gpu(name) if key == "gpu" else cat.model(name)
            except BudgetError as exc:
                raise BudgetError(f"{spec.path}: [stages.{stage.name}] {key}: {exc}") from None


def _answer_replica(
    cat: Catalog, stage: AnswerStage, deployment: Path | None, profile: Path | None
) -> tuple[ModelSpec, Deployment, str]:
    """The answer model and one replica of it: the stage's keys, overridden by a deployment
    file, with a calibration profile when given."""
    from loadgen.cli.plan.group import _from_deployment, _profile  # deferred: a cycle

    values: dict[str, object] = {
        "model_name": stage.model,
        "gpu_name": stage.gpu,
        "gpus": stage.tensor_parallel,
        "pp": 1,
        "chunk_tokens": None,
        "efficiency_prefill": stage.efficiency_prefill,
        "efficiency_decode": stage.efficiency_decode,
        "step_overhead_ms": 0.0,
        "memory_fraction": 0.9,
    }
    source = "the pipeline file"
    path = deployment or (Path(stage.deployment) if stage.deployment else None)
    if path is not None:
        from analyzers.decompose.deployment import with_profile
        from traces.deployment import load_deployment

        spec = with_profile(load_deployment(path))
        values.update({k: v for k, v in _from_deployment(spec).items() if k in values})
        source = str(path)
    model = cat.model(str(values["model_name"]))
    if stage.dtype is not None:
        model = replace(model, weight_dtype=stage.dtype)  # type: ignore[arg-type]  # checked
    gpu = str(values["gpu_name"])
    chunk = values["chunk_tokens"]
    deploy = Deployment(
        hardware=cat.gpu(gpu),
        tensor_parallel=int(str(values["gpus"])),
        pipeline_parallel=int(str(values["pp"])),
        prefill_efficiency=float(str(values["efficiency_prefill"])),
        decode_efficiency=float(str(values["efficiency_decode"])),
        step_overhead_s=float(str(values["step_overhead_ms"])) / 1e3,
        memory_fraction=float(str(values["memory_fraction"])),
        chunk_tokens=chunk if isinstance(chunk, int) else None,
        profile=_profile(cat, profile, gpu),
    )
    where = (
        f"{model.name} {model.weight_dtype}, {deploy.gpus} x {deploy.hardware.name} per "
        f"replica, {stage.gpus_per_node}-GPU nodes; from {source}"
        + (f", profile {profile}" if profile is not None else "")
    )
    return model, deploy, where


@click.command("fleet")
@click.argument("pipeline", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "--cache-hit",
    "cache_hits",
    type=click.FloatRange(0, 1),
    multiple=True,
    help="Response-cache hit rate in front of the answer model (repeat for several; default 0).",
)
@click.option(
    "--deployment",
    "deployment_file",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="A deployment.toml for the answer model (model, GPUs per replica, efficiencies, "
    "chunk size); overrides the file's llm stage.",
)
@click.option(
    "--profile",
    "profile_file",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="Calibration profile TOML (from plan calibrate) for the answer model's GPU.",
)
@catalog_option
@json_option
def fleet_cmd(
    pipeline: Path,
    cache_hits: tuple[float, ...],
    deployment_file: Path | None,
    profile_file: Path | None,
    catalog_file: Path | None,
    as_json: bool,
) -> None:
    """Size each stage of a pipeline (embedder, vector index, reranker, answer model) from
    the tokens, pairs and shard queries it does per second, split the end-to-end p99
    budget per stage, and show the answer tier's nodes at each cache hit rate.

    The pipeline file is documented in docs/arithmetic.md ("Fleet sizing"); a bad key is
    one error line naming it and the file (exit 2).

    Example: loadgen plan fleet examples/pipelines/rag.toml --cache-hit 0 --cache-hit 0.7

    With a deployment file and a profile for the answer model:
    loadgen plan fleet examples/pipelines/rag.toml --deployment my-70b.toml
    --profile profile.toml --json
    """
    from analyzers.budget.fleet import plan_fleet
    from analyzers.budget.fleetfile import load_pipeline
    from reports.plan import render_fleet

    spec = load_pipeline(pipeline)
    cat = load_catalog(catalog_file)
    _check_names(cat, spec)
    model, deploy, where = _answer_replica(cat, spec.answer, deployment_file, profile_file)
    plan = plan_fleet(
        spec,
        hardware=cat.gpu,
        answer_model=model,
        answer_deploy=deploy,
        cache_hits=cache_hits or (0.0,),
        answer_where=where,
    )
    click.echo(json.dumps(asdict(plan), indent=2) if as_json else render_fleet(plan))
