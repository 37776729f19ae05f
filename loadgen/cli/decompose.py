"""``loadgen decompose``: a thin command over ``analyzers.decompose.decompose``.

Splits each request's TTFT into client, network, queue, prefill and first-token time
against the budget the options name, and prints rich tables (``reports.tables``) or JSON.
Errors are one line on stderr with the error's exit code (2: bad input, 3: invalid run).
Polars and the reports are imported inside the command, so that ``loadgen --help`` stays
fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from loadgen.cli.echo import echo_json, echo_renderables
from loadgen.cli.errors import one_line_errors
from loadgen.cli.options.alias import deprecated_alias
from loadgen.cli.options.budget import BudgetChoice, budget_options
from loadgen.cli.options.output import by_option, json_option, percentiles_option
from loadgen.cli.options.runpath import RUN_PATH
from loadgen.cli.options.selection import selection_options

if TYPE_CHECKING:
    from analyzers.frames import RowSelection

DEFAULT_PERCENTILES = "50,90,99,99.9"


@click.command()
@click.argument("run", type=RUN_PATH)
@one_line_errors
@budget_options
@selection_options(window=True)
@by_option
@json_option
@percentiles_option(DEFAULT_PERCENTILES)
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
    default=None,
    help="Replicas behind a least-loaded router, for the load replay "
    "[default: the deployment's, else 1].",
)
@click.option(
    "--chunk-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="The engine's token budget per step (vLLM --max-num-batched-tokens) "
    "[default: the deployment's max_batched_tokens, else unchunked prefill].",
)
@click.option(
    "--max-num-seqs",
    type=click.IntRange(min=1),
    default=None,
    help="The engine's batch limit (vLLM --max-num-seqs), for the load replay "
    "[default: the deployment's, else 256].",
)
@click.option(
    "--clock-scale",
    "time_scale",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="The server's wall seconds per model second (a simulator's --clock-scale) "
    "[default: the deployment's, else 1].",
)
@deprecated_alias(
    "--time-scale", "--clock-scale", "time_scale", type_=click.FloatRange(min=0, min_open=True)
)
def decompose(
    run: Path,
    budget: BudgetChoice,
    selection: RowSelection,
    by: str,
    as_json: bool,
    percentiles: tuple[float, ...],
    slo_ttft_ms: float | None,
    calibrate: bool,
    hide_server_timings: bool,
    network_ms: float | None,
    batch_one: bool,
    replicas: int | None,
    chunk_tokens: int | None,
    max_num_seqs: int | None,
    time_scale: float | None,
) -> None:
    """Split each request's TTFT into client, network, queue, prefill and first-token time.

    Server-reported timings are used where present; otherwise the budget model predicts
    prefill and the first decode step and the queue is what remains. The predictions are
    made at the run's own load: every served request is replayed at its arrival time
    through the engine's batching (chunked prefill, --chunk-tokens per step) with step
    times from the budget, so a prompt spread over steps shared with others is predicted
    as such (--batch-1 for predictions of each request alone). On a slot engine
    (engine = "llama.cpp", which its /props names in run.json) the prefill is read from
    the run instead: from each response head, which llama-server writes when a slot
    starts the prompt, to the first token (its network is then each handshake, never its
    head); where a head does not precede its first token, from the start of the step
    that first took a prompt into its batch (scheduler.max_batched_tokens, llama.cpp's
    -b), on one replica, where no prompt is longer than half the batch; else the replay's
    prediction stands and the line says why.

    The budget is the run's recorded deployment (run.json: a simulator publishes all of
    it), then --deployment FILE, then the flags, each overriding the one before key by key;
    one line on stderr says what was used, from where, and what was assumed.

    Example: loadgen decompose runs/today --model llama-3.1-8b --gpu h200 --slo-ttft-ms 200
    """
    from analyzers.decompose import DecomposeOptions
    from analyzers.decompose import decompose as run_decompose
    from loadgen.cli.runstatus import warn_if_incomplete

    warn_if_incomplete(run)

    flags = {
        key: value
        for key, value in (
            ("replicas", replicas),
            ("scheduler.max_batched_tokens", chunk_tokens),
            ("scheduler.max_num_seqs", max_num_seqs),
            ("time_scale", time_scale),
        )
        if value is not None
    }
    resolved = budget.resolve(run, flags)
    if resolved.provenance is not None:
        click.echo(resolved.provenance, err=True)
    options = DecomposeOptions(
        percentiles=percentiles,
        by_workload=by == "workload",
        selection=selection,
        slo_ttft_ms=slo_ttft_ms,
        hide_server_timings=hide_server_timings,
        calibrate=calibrate,
        network_ms=network_ms,
        load_aware=not batch_one,
        time_scale=resolved.time_scale or 1.0,
    )
    result = run_decompose(run, resolved.budget, options)
    if as_json:
        from reports.jsondoc import decomposition_json

        echo_json(decomposition_json(result))
        return
    from reports.tables import decomposition_renderables

    echo_renderables(decomposition_renderables(result))
