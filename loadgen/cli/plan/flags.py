"""The options and catalog look-ups that the ``loadgen plan`` commands share: the model,
GPU, GPU count, dtype, ``--catalog`` and ``--json`` flags, and a catalog model with its
dtypes overridden."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TypeVar, cast

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
