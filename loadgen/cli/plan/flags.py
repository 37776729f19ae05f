"""The options and catalog look-ups that the ``loadgen plan`` commands share: the model,
GPU, GPU count, dtype, ``--catalog`` and ``--json`` flags, and a catalog model with its
dtypes overridden."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from analyzers.budget.catalog import Catalog
from analyzers.budget.specs import DTYPES, ModelSpec, check_dtype

T = TypeVar("T")


def inherited(ctx: click.Context, name: str, value: T) -> T:
    """A subcommand's option ``name``, or the ``plan`` group's when only the group was given
    it (``loadgen plan --model M --gpu G check-claim ...``): the subcommand's own flag wins."""
    source = ctx.get_parameter_source(name)
    parent = ctx.parent
    if source is click.core.ParameterSource.COMMANDLINE or parent is None:
        return value
    if parent.get_parameter_source(name) is not click.core.ParameterSource.COMMANDLINE:
        return value
    return cast(T, parent.params.get(name, value))


def catalog_model(cat: Catalog, name: str, dtype: str | None, kv_dtype: str | None) -> ModelSpec:
    m = cat.model(name)
    if dtype is not None:
        m = replace(m, weight_dtype=check_dtype(dtype))
    if kv_dtype is not None:
        m = replace(m, kv_dtype=check_dtype(kv_dtype))
    return m


model_option = click.option(
    "--model", "model_name", help="Model name from the catalog, e.g. llama-3.3-70b."
)
gpu_option = click.option("--gpu", "gpu_name", help="GPU name from the catalog, e.g. h200.")
gpus_option = click.option(
    "--gpus",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="GPUs per replica (tensor parallel).",
)
dtype_option = click.option(
    "--dtype",
    type=click.Choice(DTYPES),
    default=None,
    help="Weight dtype (default: the catalog's).",
)
catalog_option = click.option(
    "--catalog",
    "catalog_file",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="User TOML catalog adding or overriding entries.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


def stream_options(
    *, prompt_tokens: int, output_tokens: int, requests: int
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The workload options of the commands that run the offline engine at a load (``plan
    admission``, ``plan chunk``): ``--trace`` (``trace_path``), or a seeded Poisson stream
    of ``--prompt-tokens`` and ``--output-tokens``, ``--requests`` (``n_requests``) long,
    and ``--seed``; the defaults are each command's."""
    options = (
        click.option(
            "--trace",
            "trace_path",
            type=click.Path(path_type=Path, exists=True, dir_okay=False),
            default=None,
            help="Workload (lengths and arrival shape); default: a Poisson stream of one shape.",
        ),
        click.option(
            "--prompt-tokens",
            type=click.IntRange(min=1),
            default=prompt_tokens,
            show_default=True,
            help="Prompt length of every request of the synthetic stream (without --trace).",
        ),
        click.option(
            "--output-tokens",
            type=click.IntRange(min=1),
            default=output_tokens,
            show_default=True,
            help="Output length of every request of the synthetic stream (without --trace).",
        ),
        click.option(
            "--requests",
            "n_requests",
            type=click.IntRange(min=10),
            default=requests,
            show_default=True,
            help="Requests of the synthetic stream (or the trace's first N).",
        ),
        click.option("--seed", type=int, default=1, show_default=True, help="Seed of the stream."),
    )

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate
