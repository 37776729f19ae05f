"""The budget of the commands that decompose TTFT (``decompose``, ``report``): ``--budget
FILE`` or ``--model M --gpu G [--gpus N] [--catalog F] [--profile P]``, handed to the command as one
``analyzers.decompose.model.BudgetModel`` (or None when the options name none).
"""

from __future__ import annotations

from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from loadgen.cli.options.group import Command, apply

if TYPE_CHECKING:
    from analyzers.decompose.model import BudgetModel

_OPTIONS = (
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
    click.option(
        "--profile",
        "profile_file",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        default=None,
        help="Calibration profile TOML from `loadgen plan calibrate` (with --model).",
    ),
)


def budget_options(func: Command) -> Command:
    """Add the budget options; the command receives ``budget: BudgetModel | None`` in their
    place. Contradictory options are a usage error (exit 2); an unknown model or GPU, or a
    bad budget file, raises the analyzers' error before the command runs."""

    @wraps(func)
    def with_budget(
        *args: Any,
        budget_file: Path | None,
        model_name: str | None,
        gpu_name: str | None,
        gpus: int,
        catalog_file: Path | None,
        profile_file: Path | None,
        **kwargs: Any,
    ) -> Any:
        kwargs["budget"] = load_budget(
            budget_file, model_name, gpu_name, gpus, catalog_file, profile_file
        )
        return func(*args, **kwargs)

    return apply(_OPTIONS, with_budget)


def load_budget(
    budget_file: Path | None,
    model_name: str | None,
    gpu_name: str | None,
    gpus: int,
    catalog_file: Path | None,
    profile_file: Path | None = None,
) -> BudgetModel | None:
    """The budget the options name, or None when they name none."""
    if budget_file is not None and model_name is not None:
        raise click.UsageError("give either --budget or --model/--gpu, not both")
    if profile_file is not None and model_name is None:
        raise click.UsageError("--profile goes with --model/--gpu (a budget file carries its own)")
    if (model_name is None) != (gpu_name is None):
        raise click.UsageError("--model and --gpu go together")
    from analyzers.decompose.model import BudgetModel

    if budget_file is not None:
        return BudgetModel.from_file(budget_file)
    if model_name is not None and gpu_name is not None:
        return BudgetModel.from_catalog(
            model_name, gpu_name, gpus=gpus, catalog_file=catalog_file, profile_file=profile_file
        )
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
