"""``loadgen analyze`` and ``loadgen decompose``: thin commands over ``analyzers``.

Parse options, call ``metrics.analyze`` / ``decompose.decompose``, print rich tables
(``reports.tables``) or JSON. Errors are one line on stderr with the error's exit code
(2: bad input, 3: invalid run). Polars and the reports are imported inside the commands,
so that ``loadgen --help`` stays fast. Must not import loadgen or httpx.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from loadgen.cli.budget_options import (
    budget_from_options,
    budget_options,
    check_budget_options,
    engine_shape,
)

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_ANALYZE_PERCENTILES = "50,90,95,99,99.9"
DEFAULT_DECOMPOSE_PERCENTILES = "50,90,99,99.9"


def _percentiles(
    ctx: click.Context | None, param: click.Parameter | None, value: str
) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of numbers: {value!r}") from None
    if not values or any(not 0 < v < 100 for v in values):
        raise click.BadParameter("percentiles must lie strictly between 0 and 100")
    return tuple(sorted(set(values)))


def _one_line_errors(func: F) -> F:
    """Turn our packages' errors into one stderr line and their exit code."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import polars as pl

        from traces.errors import UserError

        ctx = click.get_current_context()
        try:
            return func(*args, **kwargs)
        except UserError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except pl.exceptions.PolarsError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            click.echo(f"error: cannot read the run: {first}", err=True)
            ctx.exit(3)

    return wrapper  # type: ignore[return-value]


def _selection_options(func: F) -> F:
    options = [
        click.option(
            "--trim-start",
            "trim_start_s",
            type=click.FloatRange(min=0),
            default=0.0,
            show_default=True,
            help="Drop requests due in the first S seconds (warm-up).",
        ),
        click.option(
            "--trim-end",
            "trim_end_s",
            type=click.FloatRange(min=0),
            default=0.0,
            show_default=True,
            help="Drop requests due in the last S seconds (cool-down).",
        ),
        click.option(
            "--start",
            "start_s",
            type=click.FloatRange(min=0),
            default=None,
            help="Steady-state window: keep requests due from S seconds on.",
        ),
        click.option(
            "--end",
            "end_s",
            type=click.FloatRange(min=0),
            default=None,
            help="Steady-state window: keep requests due before S seconds.",
        ),
        click.option(
            "--include-warmup",
            is_flag=True,
            help="Keep the rows flagged warmup (excluded by default).",
        ),
        click.option(
            "--by",
            type=click.Choice(["workload", "none"]),
            default="workload",
            show_default=True,
            help="Report per workload class as well as overall.",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _selection(
    trim_start_s: float,
    trim_end_s: float,
    start_s: float | None,
    end_s: float | None,
    include_warmup: bool,
) -> Any:
    from analyzers.frames import RowSelection

    if start_s is not None and end_s is not None and end_s <= start_s:
        raise click.BadParameter("--end must be after --start", param_hint="--end")
    return RowSelection(
        exclude_warmup=not include_warmup,
        trim_start_s=trim_start_s,
        trim_end_s=trim_end_s,
        start_s=start_s,
        end_s=end_s,
    )


def _emit(payload: dict[str, Any] | None, renderables: list[Any] | None) -> None:
    if payload is not None:
        import orjson

        click.echo(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode())
        return
    from rich.console import Console

    console = Console(soft_wrap=False)
    for item in renderables or []:
        console.print(item)


_RUN = click.argument("run", type=click.Path(path_type=Path))


@click.command()
@_RUN
@_selection_options
@click.option(
    "--percentiles",
    callback=_percentiles,
    default=DEFAULT_ANALYZE_PERCENTILES,
    show_default=True,
    help="Comma-separated percentiles to report.",
)
@click.option(
    "--slo-ttft-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Global TTFT SLO for goodput (a request's own slo_ttft_ms wins).",
)
@click.option(
    "--slo-tpot-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Global TPOT SLO for goodput (a request's own slo_tpot_ms wins).",
)
@click.option(
    "--ttft-from",
    type=click.Choice(["due", "sent"]),
    default="due",
    show_default=True,
    help="Goodput measures TTFT from the due time (no coordinated omission) or from send.",
)
@click.option(
    "--window-s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Throughput window length [default: about 30 windows over the run].",
)
@click.option(
    "--max-schedule-lag-ms",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Flag the run client-bound above this p99 schedule lag.",
)
@_one_line_errors
def analyze(
    run: Path,
    trim_start_s: float,
    trim_end_s: float,
    start_s: float | None,
    end_s: float | None,
    include_warmup: bool,
    by: str,
    as_json: bool,
    percentiles: tuple[float, ...],
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    ttft_from: str,
    window_s: float | None,
    max_schedule_lag_ms: float,
) -> None:
    """Latency percentiles, throughput, errors, prompt fidelity and goodput of a run.

    RUN is a run directory, a requests Parquet file, a quoted glob of shards, or a sweep
    directory (from `loadgen sweep`: latency, throughput and goodput against offered
    load, and the knee, the highest load meeting the goodput SLOs).

    Example: loadgen analyze runs/today --percentiles 50,99,99.9 --slo-ttft-ms 200
    """
    from analyzers.compare.sweep import is_sweep_dir

    if is_sweep_dir(run):
        _analyze_sweep(run, slo_ttft_ms, slo_tpot_ms, ttft_from, trim_start_s, trim_end_s)
        return
    from analyzers.goodput import SLOTargets
    from analyzers.metrics import AnalysisOptions
    from analyzers.metrics import analyze as run_analysis
    from analyzers.validity import ValidityThresholds

    options = AnalysisOptions(
        percentiles=percentiles,
        by_workload=by == "workload",
        selection=_selection(trim_start_s, trim_end_s, start_s, end_s, include_warmup),
        slo=SLOTargets(
            ttft_ms=slo_ttft_ms,
            tpot_ms=slo_tpot_ms,
            ttft_basis="due" if ttft_from == "due" else "sent",
        ),
        window_s=window_s,
        thresholds=ValidityThresholds(max_schedule_lag_p99_ms=max_schedule_lag_ms),
    )
    result = run_analysis(run, options)
    if as_json:
        from reports.jsondoc import analysis_json

        _emit(analysis_json(result), None)
        return
    from reports.tables import analysis_renderables

    _emit(None, analysis_renderables(result))


def _analyze_sweep(
    sweep: Path,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    ttft_from: str,
    trim_start_s: float,
    trim_end_s: float,
) -> None:
    from analyzers.compare.sweep import SweepOptions, analyze_sweep
    from analyzers.goodput import SLOTargets
    from analyzers.slo.parse import SLOSet
    from reports.compare import sweep_renderables

    targets = SLOTargets(
        ttft_ms=slo_ttft_ms, tpot_ms=slo_tpot_ms, ttft_basis="due" if ttft_from == "due" else "sent"
    )
    options = SweepOptions(
        slos=SLOSet(goodput=targets),
        selection=_selection(trim_start_s, trim_end_s, None, None, False),
    )
    _emit(None, sweep_renderables(analyze_sweep(sweep, options)))


@click.command()
@_RUN
@budget_options
@_selection_options
@click.option(
    "--percentiles",
    callback=_percentiles,
    default=DEFAULT_DECOMPOSE_PERCENTILES,
    show_default=True,
    help="Comma-separated percentiles to report.",
)
@click.option(
    "--slo-ttft-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="TTFT SLO: name the term that breaks it and the prompt length the budget allows.",
)
@click.option(
    "--calibrate",
    is_flag=True,
    help="Fit prefill(n) = a + b n + c n^2 to the run's low-load requests.",
)
@click.option(
    "--hide-server-timings",
    is_flag=True,
    help="Ignore server-reported timings (to test the predictions against them).",
)
@click.option(
    "--network-ms",
    type=click.FloatRange(min=0),
    default=None,
    help="Network round trip from a probe [default: estimated from the run].",
)
@click.option(
    "--batch-1",
    "batch_one",
    is_flag=True,
    help="Predict every request as if alone, instead of replaying the run's load through "
    "the engine's batching.",
)
@click.option(
    "--replicas",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Replicas behind a least-loaded router, for the load replay.",
)
@click.option(
    "--chunk-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="The engine's token budget per step (vLLM --max-num-batched-tokens) "
    "[default: the budget's chunk size, else unchunked prefill].",
)
@click.option(
    "--max-num-seqs",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="The engine's batch limit (vLLM --max-num-seqs), for the load replay.",
)
@_one_line_errors
def decompose(
    run: Path,
    budget_file: Path | None,
    model_name: str | None,
    gpu_name: str | None,
    gpus: int,
    catalog_file: Path | None,
    trim_start_s: float,
    trim_end_s: float,
    start_s: float | None,
    end_s: float | None,
    include_warmup: bool,
    by: str,
    as_json: bool,
    percentiles: tuple[float, ...],
    slo_ttft_ms: float | None,
    calibrate: bool,
    hide_server_timings: bool,
    network_ms: float | None,
    batch_one: bool,
    replicas: int,
    chunk_tokens: int | None,
    max_num_seqs: int,
) -> None:
    """Split each request's TTFT into client, network, queue, prefill and first-token time.

    Server-reported timings are used where present; otherwise the budget model predicts
    prefill and the first decode step and the queue is what remains. The predictions are
    made at the run's own load: every served request is replayed at its arrival time
    through the engine's batching (chunked prefill, --chunk-tokens per step) with step
    times from the budget, so a prompt spread over steps shared with others is predicted
    as such (--batch-1 for predictions of each request alone).

    Example: loadgen decompose runs/today --model llama-3.1-8b --gpu h200 --slo-ttft-ms 200
    """
    from analyzers.decompose import DecomposeOptions
    from analyzers.decompose import decompose as run_decompose

    check_budget_options(budget_file, model_name, gpu_name)
    budget = budget_from_options(budget_file, model_name, gpu_name, gpus, catalog_file)
    if budget is not None:
        budget = engine_shape(
            budget, replicas=replicas, chunk_tokens=chunk_tokens, max_num_seqs=max_num_seqs
        )
    options = DecomposeOptions(
        percentiles=percentiles,
        by_workload=by == "workload",
        selection=_selection(trim_start_s, trim_end_s, start_s, end_s, include_warmup),
        slo_ttft_ms=slo_ttft_ms,
        hide_server_timings=hide_server_timings,
        calibrate=calibrate,
        network_ms=network_ms,
        load_aware=not batch_one,
    )
    result = run_decompose(run, budget, options)
    if as_json:
        from reports.jsondoc import decomposition_json

        _emit(decomposition_json(result), None)
        return
    from reports.tables import decomposition_renderables

    _emit(None, decomposition_renderables(result))
