"""The budget options shared by the commands that decompose TTFT (``decompose``, ``report``):
``--budget FILE`` or ``--model M --gpu G [--gpus N] [--catalog F]``, and their one check.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from analyzers.decompose.model import BudgetModel

F = TypeVar("F", bound=Callable[..., Any])


def budget_options(func: F) -> F:
    """Add ``budget_file``, ``model_name``, ``gpu_name``, ``gpus`` and ``catalog_file``."""
    options = (
        click.option(
            "--budget",
            "budget_file",
            type=click.Path(path_type=Path, dir_okay=False, exists=True),
            default=None,
            help="Budget file from `loadgen plan --out budget.toml`.",
        ),
        click.option(
            "--model", "model_name", default=None, help="Catalog model (instead of --budget)."
        ),
        click.option("--gpu", "gpu_name", default=None, help="Catalog GPU (with --model)."),
        click.option(
            "--gpus",
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            help="Tensor-parallel GPUs per replica (with --model).",
        ),
        click.option(
            "--catalog",
            "catalog_file",
            type=click.Path(path_type=Path, dir_okay=False),
            default=None,
            help="A TOML catalog adding or replacing models and GPUs.",
        ),
    )
    for option in reversed(options):
        func = option(func)
    return func


def check_budget_options(
    budget_file: Path | None, model_name: str | None, gpu_name: str | None
) -> None:
    """Reject contradictory budget options (a usage error, exit 2)."""
    if budget_file is not None and model_name is not None:
        raise click.UsageError("give either --budget or --model/--gpu, not both")
    if (model_name is None) != (gpu_name is None):
        raise click.UsageError("--model and --gpu go together")


def budget_from_options(
    budget_file: Path | None,
    model_name: str | None,
    gpu_name: str | None,
    gpus: int,
    catalog_file: Path | None,
) -> BudgetModel | None:
    """The budget the options name, or None when they name none."""
    from analyzers.decompose.model import BudgetModel

    if budget_file is not None:
        return BudgetModel.from_file(budget_file)
    if model_name is not None and gpu_name is not None:
        return BudgetModel.from_catalog(model_name, gpu_name, gpus=gpus, catalog_file=catalog_file)
    return None


def engine_shape(
    budget: BudgetModel, *, replicas: int, chunk_tokens: int | None, max_num_seqs: int
) -> BudgetModel:
    """The budget with the engine's shape for the load replay (``--replicas``,
    ``--chunk-tokens``, ``--max-num-seqs``)."""
    from dataclasses import replace

    deploy = budget.deployment
    if chunk_tokens is not None:
        deploy = replace(deploy, chunk_tokens=chunk_tokens)
    return replace(budget, deployment=deploy, replicas=replicas, max_num_seqs=max_num_seqs)
