"""``loadgen plan``: print (and write) the budget of a model on a GPU; the group of the
``plan`` subcommands (``calibrate``, ``check-claim``, ``admission``, ``chunk``, ``fleet``).

Thin: parse options, look up the catalog, call ``build_report``, print. User mistakes are
``AnalyzerError``s (the root CLI prints them as one line, exit 2); a refused deployment
exits 1. Reads a trace through ``traces.io`` (pyarrow) only when ``--trace`` is given. Of
``loadgen``, only the ``admission`` and ``chunk`` subcommands import anything (the offline
engine, the simulator's instance setup, when run); the budget itself imports no
``loadgen`` module or httpx.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from traces.deployment import DeploymentSpec

from analyzers.budget.budgetfile import report_to_json, write_budget
from analyzers.budget.catalog import Catalog, load_catalog
from analyzers.budget.profile import StepProfile, load_profile_for
from analyzers.budget.report import PlanInputs, build_report
from analyzers.budget.specs import DTYPES, Deployment, LinkSpec, ModelSpec
from analyzers.errors import BudgetError
from loadgen.cli.plan.admission import admission_cmd
from loadgen.cli.plan.calibrate import calibrate_cmd
from loadgen.cli.plan.chunk import chunk_cmd
from loadgen.cli.plan.claim import check_claim_cmd
from loadgen.cli.plan.flags import (
    catalog_model,
    catalog_option,
    dtype_option,
    gpu_option,
    gpus_option,
    json_option,
    model_option,
)
from loadgen.cli.plan.fleet import fleet_cmd
from reports.plan import render_report

_DEFAULT_LINKS = ("100g", "400g", "mooncake-4x200g", "mooncake-8x400g", "8x400g")


def _image_size(text: str | None) -> tuple[int, int]:
    if text is None:
        return 1920, 1080
    try:
        w, h = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise BudgetError(f"--image must be WIDTHxHEIGHT, got {text!r}") from None
    return w, h


def _trace_lengths(path: Path) -> tuple[list[int], list[int]]:
    from traces.io import read_trace  # deferred: pyarrow is only needed with --trace

    rows = read_trace(path)
    if not rows:
        raise BudgetError(f"{path}: the trace has no requests")
    prompts = [r.input_tokens + (r.image_tokens or 0) for r in rows]
    return prompts, [r.output_tokens for r in rows]


def _profile(cat: Catalog, path: Path | None, gpu_name: str) -> StepProfile | None:
    """The profile in ``path`` for ``gpu_name``: named so, or the only one whose GPU is the
    same catalog entry."""
    if path is None:
        return None
    want = cat.gpu(gpu_name).name
    return load_profile_for(path, gpu_name, lambda name: cat.gpu(name).name == want)


def _check_context(cat: Catalog, model: ModelSpec, prompt_tokens: int) -> None:
    if model.max_context is not None and prompt_tokens > model.max_context:
        longer = sorted(
            name
            for name in cat.model_names()
            if (cat.model(name).max_context or 0) >= prompt_tokens
        )
        hint = f" (catalog models with that context: {', '.join(longer)})" if longer else ""
        raise BudgetError(
            f"a prompt of {prompt_tokens} tokens exceeds {model.name}'s context of "
            f"{model.max_context} tokens{hint}"
        )


def _from_deployment(spec: DeploymentSpec) -> dict[str, object]:
    """The plan options a deployment file sets (parameter name to value). A disaggregated
    deployment is planned on its prefill instances' GPUs; its KV link is the break-even's."""
    gpus = spec.prefill.gpus if spec.disaggregated else spec.tensor_parallel or spec.gpus
    eff = spec.efficiency
    overhead = None if eff.step_overhead_us is None else eff.step_overhead_us / 1e3
    pairs = {
        "model_name": spec.model,
        "gpu_name": spec.gpu,
        "gpus": gpus,
        "pp": spec.pipeline_parallel,
        "chunk_tokens": spec.scheduler.max_batched_tokens,
        "efficiency_prefill": eff.prefill,
        "efficiency_decode": eff.decode,
        "step_overhead_ms": overhead,
        "memory_fraction": eff.memory_fraction,
        "link_name": spec.kv_link.gbps,
    }
    return {k: v for k, v in pairs.items() if v is not None}


@click.group(invoke_without_command=True)
@click.option(
    "--deployment",
    "deployment_file",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="A deployment.toml (docs/deployment.md): model, GPUs, chunk size, efficiencies, "
    "KV link; the flags given as well override it.",
)
@model_option
@gpu_option
@gpus_option
@click.option(
    "--pp",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Pipeline-parallel stages per replica.",
)
@dtype_option
@click.option(
    "--kv-dtype",
    type=click.Choice(DTYPES),
    default=None,
    help="KV-cache dtype (default: the catalog's).",
)
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="Trace whose prompt and output lengths set the pool ratio.",
)
@click.option(
    "--prompt-tokens",
    type=click.IntRange(min=1),
    default=4000,
    show_default=True,
    help="Prompt length of the planned request (without --trace).",
)
@click.option(
    "--cached-tokens",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Prompt tokens served from the prefix cache (not prefilled).",
)
@click.option(
    "--output-tokens",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="Output length of the planned request (without --trace).",
)
@click.option(
    "--batch",
    type=click.IntRange(min=0),
    default=0,
    help="Decode batch (default: what KV holds, at most 256).",
)
@click.option(
    "--chunk-tokens", type=click.IntRange(min=1), default=None, help="Chunked prefill chunk size."
)
@click.option(
    "--slo-ttft-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="TTFT target: the longest prompt within it; the disagg break-even (2 s without).",
)
@click.option(
    "--slo-tpot-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=50.0,
    show_default=True,
    help="TPOT target of the disaggregation break-even.",
)
@click.option(
    "--efficiency-prefill",
    type=click.FloatRange(0, 1, min_open=True),
    default=0.6,
    show_default=True,
    help="Achieved fraction of peak FLOP/s.",
)
@click.option(
    "--efficiency-decode",
    type=click.FloatRange(0, 1, min_open=True),
    default=0.6,
    show_default=True,
    help="Achieved fraction of HBM bandwidth.",
)
@click.option(
    "--step-overhead-ms",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Fixed cost of every engine step (scheduling, launch), ms.",
)
@click.option(
    "--memory-fraction",
    type=click.FloatRange(0, 1, min_open=True),
    default=0.9,
    show_default=True,
    help="HBM share for weights + KV.",
)
@click.option(
    "--replicas",
    type=click.IntRange(min=2),
    default=8,
    show_default=True,
    help="Replicas for the disaggregation break-even.",
)
@click.option(
    "--link", "link_name", default="400g", show_default=True, help="KV link for the break-even."
)
@click.option(
    "--image",
    "image",
    default=None,
    help="Image size WIDTHxHEIGHT for vision models (default 1920x1080).",
)
@catalog_option
@click.option(
    "--profile",
    "profile_file",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="Calibration profile TOML (from plan calibrate); replaces the efficiencies.",
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write the budget as TOML (or JSON for .json).",
)
@json_option
@click.pass_context
def plan(
    ctx: click.Context,
    deployment_file: Path | None,
    model_name: str | None,
    gpu_name: str | None,
    gpus: int,
    pp: int,
    dtype: str | None,
    kv_dtype: str | None,
    trace_path: Path | None,
    prompt_tokens: int,
    cached_tokens: int,
    output_tokens: int,
    batch: int,
    chunk_tokens: int | None,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float,
    efficiency_prefill: float,
    efficiency_decode: float,
    step_overhead_ms: float,
    memory_fraction: float,
    replicas: int,
    link_name: str,
    image: str | None,
    catalog_file: Path | None,
    profile_file: Path | None,
    out_path: Path | None,
    as_json: bool,
) -> None:
    """Predict prefill, decode, KV, image and disaggregation budgets from first principles.

    A prompt longer than the model's context is an error (exit 2); weights, or one
    request's KV cache, that do not fit print why and exit 1, with no TPOT or throughput.

    Example: loadgen plan --model llama-3.3-70b --gpu h200 --gpus 1 --dtype fp8

    Or from a deployment file (flags override it):
    loadgen plan --deployment examples/deployments/sglang.toml
    """
    if ctx.invoked_subcommand is not None:
        return
    link = None
    if deployment_file is not None:
        from analyzers.decompose.deployment import with_profile
        from traces.deployment import load_deployment

        spec = with_profile(load_deployment(deployment_file))
        given = {
            name: value
            for name, value in _from_deployment(spec).items()
            if ctx.get_parameter_source(name) is not click.core.ParameterSource.COMMANDLINE
        }

        def text(name: str, value: str | None) -> str | None:
            found = given.get(name, value)
            return found if isinstance(found, str) else value

        def integer(name: str, value: int) -> int:
            found = given.get(name, value)
            return found if isinstance(found, int) else value

        def number(name: str, value: float) -> float:
            found = given.get(name, value)
            return float(found) if isinstance(found, int | float) else value

        model_name, gpu_name = text("model_name", model_name), text("gpu_name", gpu_name)
        gpus, pp = integer("gpus", gpus), integer("pp", pp)
        chunk = given.get("chunk_tokens", chunk_tokens)
        chunk_tokens = chunk if isinstance(chunk, int) else chunk_tokens
        efficiency_prefill = number("efficiency_prefill", efficiency_prefill)
        efficiency_decode = number("efficiency_decode", efficiency_decode)
        step_overhead_ms = number("step_overhead_ms", step_overhead_ms)
        memory_fraction = number("memory_fraction", memory_fraction)
        if spec.kv_link.gbps is not None and "link_name" in given:
            link = LinkSpec(
                name=f"{spec.kv_link.gbps:g}gbps ({deployment_file})",
                bandwidth_bytes_per_s=spec.kv_link.gbps * 1e9 / 8,
                latency_s=(spec.kv_link.latency_us or 0.0) / 1e6,
            )
    if model_name is None or gpu_name is None:
        raise click.UsageError("plan needs --model and --gpu (or --deployment, or a subcommand)")
    cat = load_catalog(catalog_file)
    model = catalog_model(cat, model_name, dtype, kv_dtype)
    _check_context(cat, model, prompt_tokens)
    deploy = Deployment(
        hardware=cat.gpu(gpu_name),
        tensor_parallel=gpus,
        pipeline_parallel=pp,
        prefill_efficiency=efficiency_prefill,
        decode_efficiency=efficiency_decode,
        step_overhead_s=step_overhead_ms / 1e3,
        memory_fraction=memory_fraction,
        chunk_tokens=chunk_tokens,
        profile=_profile(cat, profile_file, gpu_name),
    )
    width, height = _image_size(image)
    inputs = PlanInputs(
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        output_tokens=output_tokens,
        decode_batch=batch,
        slo_ttft_ms=slo_ttft_ms,
        slo_tpot_ms=slo_tpot_ms,
        replicas=replicas,
        image_width=width,
        image_height=height,
        trace=str(trace_path) if trace_path else "",
    )
    report = build_report(
        model,
        deploy,
        inputs,
        links=[cat.link(name) for name in _DEFAULT_LINKS],
        break_even_link=link or cat.link(link_name),
        trace_lengths=_trace_lengths(trace_path) if trace_path else None,
    )
    if out_path is not None:
        write_budget(report, out_path)
    click.echo(report_to_json(report) if as_json else render_report(report))
    if report.refusal:
        ctx.exit(1)


plan.add_command(admission_cmd)
plan.add_command(calibrate_cmd)
plan.add_command(chunk_cmd)
plan.add_command(check_claim_cmd)
plan.add_command(fleet_cmd)
