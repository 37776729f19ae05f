"""``loadgen plan check-claim``: is a tokens-per-second claim possible on a deployment?

Checks the claim against the compute and bandwidth bounds (``analyzers.budget.claims``);
exits 0 when it is within both, 1 when it is impossible.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from analyzers.budget.catalog import load_catalog
from analyzers.budget.claims import check_claim
from analyzers.budget.specs import Deployment
from loadgen.cli.plan.flags import (
    catalog_model,
    catalog_option,
    dtype_option,
    gpu_option,
    gpus_option,
    inherited,
    json_option,
    model_option,
)
from reports.plan import render_claim


@click.command("check-claim")
@model_option
@gpu_option
@gpus_option
@dtype_option
@click.option(
    "--tokens-per-s",
    type=click.FloatRange(min=0, min_open=True),
    required=True,
    help="Claimed tokens per second for the whole replica.",
)
@click.option(
    "--phase",
    type=click.Choice(["output", "input"]),
    default="output",
    show_default=True,
    help="Output (decode) or input (prefill) tokens.",
)
@click.option(
    "--context-tokens",
    type=click.IntRange(min=1),
    default=1024,
    show_default=True,
    help="KV context per decoding sequence.",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=None,
    help="Decode batch (default: what KV holds).",
)
@catalog_option
@json_option
@click.pass_context
def check_claim_cmd(
    ctx: click.Context,
    model_name: str | None,
    gpu_name: str | None,
    gpus: int,
    dtype: str | None,
    tokens_per_s: float,
    phase: str,
    context_tokens: int,
    batch: int | None,
    catalog_file: Path | None,
    as_json: bool,
) -> None:
    """Is TOKENS-PER-S possible for a model on GPUs? Checks the compute and bandwidth bounds.

    Exits 0 when the claim is within both bounds, 1 when it is impossible (with the bound).
    The model, GPU, GPU count, dtype and catalog may also be given to ``plan`` itself.

    \b
    Examples:
      loadgen plan check-claim --model llama-3.1-8b --gpu h200 --tokens-per-s 20000
      loadgen plan --model llama-3.1-8b --gpu h200 check-claim --tokens-per-s 20000
    """
    model_name = inherited(ctx, "model_name", model_name)
    gpu_name = inherited(ctx, "gpu_name", gpu_name)
    gpus = inherited(ctx, "gpus", gpus)
    dtype = inherited(ctx, "dtype", dtype)
    catalog_file = inherited(ctx, "catalog_file", catalog_file)
    as_json = inherited(ctx, "as_json", as_json)
    if model_name is None or gpu_name is None:
        raise click.UsageError("check-claim needs --model and --gpu (on plan or check-claim)")
    cat = load_catalog(catalog_file)
    model = catalog_model(cat, model_name, dtype, None)
    hardware = cat.gpu(gpu_name)
    deploy = Deployment(hardware=hardware, tensor_parallel=gpus)
    verdict = check_claim(
        model,
        deploy,
        tokens_per_s,
        phase="input" if phase == "input" else "output",
        context_len=context_tokens,
        batch=batch,
    )
    if as_json:
        click.echo(
            json.dumps(
                {
                    "possible": verdict.possible,
                    "tokens_per_s": verdict.tokens_per_s,
                    "phase": verdict.phase,
                    "compute_bound_tokens_per_s": verdict.compute_bound_tokens_per_s,
                    "bandwidth_bound_tokens_per_s": verdict.bandwidth_bound_tokens_per_s,
                    "max_batch": verdict.max_batch,
                    "reasons": list(verdict.reasons),
                    "chains": list(verdict.chains),
                },
                indent=2,
            )
        )
    else:
        click.echo(render_claim(verdict, model.name, hardware.name, gpus))
    if not verdict.possible:
        ctx.exit(1)
