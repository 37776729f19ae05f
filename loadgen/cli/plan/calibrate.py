"""``loadgen plan calibrate``: fit step-time profiles to measurements or run directories.

Reads a CSV of measurements (``analyzers.budget.measurements``) or run directories (one,
or several pooled) through ``analyzers.calibration_points`` (polars, imported only then),
fits one profile per GPU type and writes them as TOML. User mistakes are ``BudgetError``s (exit 2).
"""

from __future__ import annotations

from pathlib import Path

import click

from analyzers.budget.calibrate import fit_profiles, prompt_split
from analyzers.budget.catalog import load_catalog
from analyzers.budget.measurements import load_measurements
from analyzers.budget.profile import profiles_to_toml
from analyzers.errors import BudgetError
from loadgen.cli.plan.flags import catalog_option
from reports.plan import render_calibration


def _int_set(text: str, option: str) -> frozenset[int]:
    try:
        return frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise BudgetError(f"{option} takes integers separated by commas, got {text!r}") from None


@click.command("calibrate")
@click.argument(
    "measurements",
    nargs=-1,
    required=True,
    type=click.Path(path_type=Path, exists=True, dir_okay=True),
)
@click.option(
    "-o",
    "--out",
    "out_path",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="Profile TOML to write (one [profiles.GPU] table per GPU type).",
)
@click.option(
    "--hold-out-prompts",
    default="",
    help="Prompt sizes left out of the fit and reported as predictions, e.g. 256,1024,4096.",
)
@click.option(
    "--hold-out-batches",
    default="",
    help="Batch sizes left out of the fit, e.g. 4,16,64.",
)
@click.option(
    "--exclude-batches",
    default="",
    help="Batch sizes dropped entirely (neither fitted nor reported), e.g. 64.",
)
@click.option("--summary", is_flag=True, help="Print only the parameters and error summaries.")
@click.option(
    "--model",
    "model_name",
    default=None,
    help="A run directory's model (catalog name), over what its run.json records.",
)
@click.option(
    "--gpu",
    "gpu_name",
    default=None,
    help="A run directory's GPU type (catalog name), over what its run.json records.",
)
@click.option(
    "--gpus",
    type=click.IntRange(min=1),
    default=None,
    help="A run directory's GPUs per replica (tensor parallel), over its run.json.",
)
@catalog_option
def calibrate_cmd(
    measurements: tuple[Path, ...],
    out_path: Path,
    hold_out_prompts: str,
    hold_out_batches: str,
    exclude_batches: str,
    summary: bool,
    model_name: str | None,
    gpu_name: str | None,
    gpus: int | None,
    catalog_file: Path | None,
) -> None:
    """Fit the step-time profile of each GPU type to MEASUREMENTS and print the residuals.

    MEASUREMENTS is a CSV (the Splitwise perf_model.csv format, or model,gpu,tp,tokens,
    batch,ms[,phase][,engine]) or a run directory of loadgen's own: its idle requests'
    prefill (server-reported, else TTFT) and its decode spans at a constant batch (or
    their steady stretches: no one else entering, leaving or waiting) become the points,
    on the model, GPU and tensor parallelism its run.json records (--model,
    --gpu, --gpus say or override them). Names resolve through the catalog (--catalog adds).
    Several run directories of one server are pooled: a shape measured in more than one
    is their median, and the front end is the median over all their requests alone. A
    profile fitted to runs spread over a session carries the server's speed over the
    session, not one minute's.

    Example: loadgen plan calibrate splitwise_perf_model.csv -o profile.toml
    --hold-out-prompts 256,1024,4096 --hold-out-batches 4,16 --exclude-batches 64

    From a run: loadgen plan calibrate runs/sweep -o profile.toml

    From runs before and after a test: loadgen plan calibrate runs/before runs/after
    -o profile.toml
    """
    cat = load_catalog(catalog_file)
    excluded = _int_set(exclude_batches, "--exclude-batches")
    runs = [m for m in measurements if m.is_dir()]
    csvs = [m for m in measurements if not m.is_dir()]
    if csvs and runs:
        raise BudgetError(
            f"{csvs[0]}: a CSV is calibrated alone; give run directories or one CSV, not both"
        )
    if len(csvs) > 1:
        raise BudgetError(f"{csvs[1]}: give one CSV (merge them into one file)")
    if runs:
        from analyzers.calibration_points import run_calibration_points  # deferred: polars
        from analyzers.calibration_pool import PooledPoints

        pooled = []
        for run in runs:
            points = run_calibration_points(
                run, model=model_name, gpu=gpu_name, tensor_parallel=gpus
            )
            click.echo(points.summary())
            pooled.append(points)
        if len(pooled) > 1:
            pool = PooledPoints(runs=tuple(pooled))
            click.echo(pool.summary())
            loaded = list(pool.observations)
        else:
            loaded = list(pooled[0].observations)
    else:
        if model_name or gpu_name or gpus:
            raise BudgetError("--model/--gpu/--gpus apply to a run directory; a CSV names its own")
        loaded = load_measurements(csvs[0])
    names = " ".join(m.name for m in measurements)
    observations = [o for o in loaded if o.batch not in excluded]
    if not observations:
        raise BudgetError(f"{names}: no measurements left after --exclude-batches")
    held_out = prompt_split(
        _int_set(hold_out_prompts, "--hold-out-prompts"),
        _int_set(hold_out_batches, "--hold-out-batches"),
    )
    fits = fit_profiles(
        observations,
        model_of=cat.model,
        gpu_of=cat.gpu,
        held_out=held_out,
        source=f"loadgen plan calibrate {names}",
    )
    header = (
        f"Step-time profiles fitted by loadgen plan calibrate to {names}"
        + (f"; held out prompts {hold_out_prompts}" if hold_out_prompts else "")
        + (f", batches {hold_out_batches}" if hold_out_batches else "")
        + (f"; excluded batches {exclude_batches}" if exclude_batches else "")
    )
    text = profiles_to_toml({f.profile.name: f.profile for f in fits}, header)
    try:
        out_path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BudgetError(f"{out_path}: cannot write profile ({exc.strerror})") from None
    click.echo(render_calibration(fits, all_points=not summary))
    click.echo(f"wrote {len(fits)} profile(s) to {out_path}")
