"""The budget of the commands that decompose TTFT (``decompose``, ``report``): ``--budget
FILE``, or a deployment (``--deployment FILE``, a run's recorded one) with ``--model M
--gpu G [--gpus N]`` over it, and ``--catalog F``, handed to the command as one
``BudgetChoice``; ``BudgetChoice.resolve`` layers the run's deployment (``run.json``), the
file and the flags (each later one wins, key by key) into the
``analyzers.decompose.model.BudgetModel`` and the server's time scale, and says in one
line what it used, from where, and what it assumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from loadgen.cli.options.group import Command, apply

if TYPE_CHECKING:
    from analyzers.decompose.model import BudgetModel
    from traces.deployment import DeploymentInfo, DeploymentSpec

_OPTIONS = (
    click.option(
        "--budget",
        "budget_file",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        default=None,
        help="Budget file from `loadgen plan --out budget.toml`.",
    ),
    click.option(
        "--deployment",
        "deployment_file",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        default=None,
        help="A deployment.toml (docs/deployment.md) [default: the run's recorded deployment]; "
        "the flags given as well override it.",
    ),
    click.option(
        "--model", "model_name", default=None, help="Catalog model (instead of --budget)."
    ),
    click.option("--gpu", "gpu_name", default=None, help="Catalog GPU (with --model)."),
    click.option(
        "--gpus",
        type=click.IntRange(min=1),
        default=None,
        help="Tensor-parallel GPUs per replica (with --model) [default: the deployment's, else 1].",
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
        help="Calibration profile TOML from `loadgen plan calibrate`: the step-time terms "
        "(TP all-reduce, launch floor, overheads) for the budget's GPU.",
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedBudget:
    """The budget the options and the run name, the server's time scale (wall seconds per
    model second) and the one line on where each came from (None: nothing to say)."""

    budget: BudgetModel | None
    time_scale: float | None
    provenance: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetChoice:
    """What the budget options say, before the run is read: a budget file, a deployment
    file, and the flags given (dotted ``deployment.toml`` keys: ``model``, ``gpu``,
    ``gpus``)."""

    budget_file: Path | None = None
    deployment: DeploymentSpec | None = None
    flags: Mapping[str, object] = field(default_factory=dict)
    catalog_file: Path | None = None
    profile_file: Path | None = None

    def resolve(
        self, run_dir: Path | None = None, flags: Mapping[str, object] | None = None
    ) -> ResolvedBudget:
        """The budget: from ``--budget`` alone, else the run's deployment (``run_dir``'s
        run.json), the ``--deployment`` file and the flags (these and ``flags``, each
        ``--name`` given on the command line) layered key by key. None when neither names
        a model and a GPU."""
        from analyzers.decompose.deployment import budget_from_deployment
        from analyzers.decompose.model import BudgetModel
        from traces.deployment import KEYS, nest, parse_deployment

        given = {**self.flags, **(flags or {})}
        info = _run_deployment(run_dir) if run_dir is not None else None
        if self.budget_file is not None:
            budget = BudgetModel.from_file(self.budget_file)
            chunk = given.get("scheduler.max_batched_tokens")
            shape = engine_shape(
                budget,
                replicas=_int(given.get("replicas"), budget.replicas),
                chunk_tokens=chunk if isinstance(chunk, int) else None,
                max_num_seqs=_int(given.get("scheduler.max_num_seqs"), budget.max_num_seqs),
            )
            scale = given.get("time_scale")
            if scale is None and info is not None:
                scale = _fact(info, "time_scale")
            return ResolvedBudget(
                budget=shape,
                time_scale=float(scale) if isinstance(scale, int | float) else None,
                provenance=None,
            )
        values: dict[str, object] = {}
        sources: dict[str, str] = {}
        where: list[str] = []
        if info is not None and info.facts:
            run_sources = info.sources()
            for fact in info.facts:
                if fact.key in KEYS and fact.key not in values:
                    values[fact.key] = fact.value
                    sources[fact.key] = f"run.json: {run_sources[fact.key]}"
            where.append("run.json")
        if self.deployment is not None:
            file_flat = self.deployment.flat()
            if "topology" in file_flat:  # a file's topology replaces the run's pools
                for key in [k for k in values if k.split(".")[0] in _POOLS]:
                    del values[key]
            for key, value in file_flat.items():
                values[key] = value
                sources[key] = self.deployment.where
            where.append(self.deployment.where)
        for key, flag_value in given.items():
            values[key] = flag_value
            sources[key] = "flag --" + _FLAG_NAMES.get(key, key).replace("_", "-")
        if not values or "model" not in values or "gpu" not in values:
            missing = [k for k in ("model", "gpu") if k not in values]
            note = None
            if where:
                note = (
                    f"deployment from {' + '.join(where)} names no {' and no '.join(missing)}: "
                    "no budget (give --model/--gpu, --budget or --deployment)"
                )
            scale = values.get("time_scale")
            return ResolvedBudget(
                budget=None,
                time_scale=float(scale) if isinstance(scale, int | float) else None,
                provenance=note,
            )
        if values.get("topology") == "disagg":
            # A disaggregated deployment's replicas are its prefill instances, and its
            # replica's GPUs the prefill instance's: the flags say so in those words.
            for flag_key, pool_key in (("replicas", "prefill.instances"), ("gpus", "prefill.gpus")):
                if flag_key in given:
                    values[pool_key] = given[flag_key]
                    sources[pool_key] = sources[flag_key]
            for key in ("replicas", "gpus", "tensor_parallel", "pipeline_parallel"):
                values.pop(key, None)
        spec = parse_deployment(nest(values), where=" + ".join(where) or "the flags")
        built = budget_from_deployment(
            spec, sources=sources, default_source="default", catalog_file=self.catalog_file
        )
        provenance = built.summary(" + ".join(where) or "the flags")
        budget = built.budget
        if self.profile_file is not None:
            budget = _with_step_profile(budget, self.profile_file, self.catalog_file)
            provenance += f"; step profile from {self.profile_file}"
        return ResolvedBudget(budget=budget, time_scale=built.time_scale, provenance=provenance)


_POOLS = ("prefill", "decode", "kv_link", "replicas", "topology")
_FLAG_NAMES = {
    "tensor_parallel": "gpus",
    "pipeline_parallel": "gpus",
    "scheduler.max_batched_tokens": "chunk-tokens",
    "scheduler.max_num_seqs": "max-num-seqs",
    "time_scale": "clock-scale",
}


def _with_step_profile(
    budget: BudgetModel, profile_file: Path, catalog_file: Path | None
) -> BudgetModel:
    """``budget`` with the calibration profile for its GPU from ``profile_file``."""
    from dataclasses import replace

    from analyzers.budget.catalog import load_catalog
    from analyzers.budget.profile import load_profile_for

    cat = load_catalog(catalog_file)
    hardware = budget.deployment.hardware
    profile = load_profile_for(
        profile_file, hardware.name, lambda name: cat.gpu(name).name == hardware.name
    )
    return replace(budget, deployment=replace(budget.deployment, profile=profile))


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) else default


def _fact(info: DeploymentInfo, key: str) -> object:
    return next((f.value for f in info.facts if f.key == key), None)


def _run_deployment(run_dir: Path) -> DeploymentInfo | None:
    """The run's recorded deployment (None when run.json has none or cannot be read: the
    command reads the run itself and says why)."""
    from traces.errors import TraceError
    from traces.io import read_run_info

    try:
        info = read_run_info(run_dir)
    except TraceError:
        return None
    return None if info is None else info.deployment


def budget_options(func: Command) -> Command:
    """Add the budget options; the command receives ``budget: BudgetChoice`` in their
    place. Contradictory options are a usage error (exit 2); a bad deployment or budget
    file raises its error before the command runs."""

    @wraps(func)
    def with_budget(
        *args: Any,
        budget_file: Path | None,
        deployment_file: Path | None,
        model_name: str | None,
        gpu_name: str | None,
        gpus: int | None,
        catalog_file: Path | None,
        profile_file: Path | None,
        **kwargs: Any,
    ) -> Any:
        kwargs["budget"] = budget_choice(
            budget_file, deployment_file, model_name, gpu_name, gpus, catalog_file, profile_file
        )
        return func(*args, **kwargs)

    return apply(_OPTIONS, with_budget)


def budget_choice(
    budget_file: Path | None,
    deployment_file: Path | None,
    model_name: str | None,
    gpu_name: str | None,
    gpus: int | None,
    catalog_file: Path | None,
    profile_file: Path | None = None,
) -> BudgetChoice:
    """The options as one value; the files are read (and checked) here."""
    if budget_file is not None and (model_name is not None or deployment_file is not None):
        raise click.UsageError("give either --budget or --model/--gpu/--deployment, not both")
    if budget_file is not None and profile_file is not None:
        raise click.UsageError(
            "--profile goes with --model/--gpu or --deployment (a budget file carries its own)"
        )
    if deployment_file is None and (model_name is None) != (gpu_name is None):
        raise click.UsageError("--model and --gpu go together")
    deployment = None
    if deployment_file is not None:
        from traces.deployment import load_deployment

        deployment = load_deployment(deployment_file)
    flags = {
        k: v for k, v in (("model", model_name), ("gpu", gpu_name), ("gpus", gpus)) if v is not None
    }
    if "gpus" in flags:  # --gpus replaces whatever split the file gave
        flags["tensor_parallel"] = flags["gpus"]
        flags["pipeline_parallel"] = 1
    return BudgetChoice(
        budget_file=budget_file,
        deployment=deployment,
        flags=flags,
        catalog_file=catalog_file,
        profile_file=profile_file,
    )


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
