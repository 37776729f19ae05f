"""``loadgen simulate``: a trace through the simulator's engine in virtual time, offline.

Parses the engine options (shared with ``loadgen sim``: ``loadgen.cli.options.engine``)
and the load options (as ``replay`` names them), runs :func:`loadgen.sim.offline.engine.simulate`
and writes the run directory (:mod:`loadgen.sim.offline.rundir`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from loadgen.cli.options.engine import engine_config, engine_options, pop_engine_options
from loadgen.cli.options.loadmode import load_mode_options
from loadgen.errors import ConfigError


@click.command()
@click.argument("trace", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="Run directory to write (requests.parquet, run.json).",
)
@engine_options(
    model_help="Catalog model (e.g. llama-3.1-8b) of the simulated engine.", time_scale=False
)
@load_mode_options()
@click.option(
    "--max-requests",
    type=click.IntRange(min=1),
    default=None,
    help="Simulate at most this many requests of the trace (the first ones).",
)
@click.option("--run-id", default=None, help="Run id [default: derived from the inputs].")
@click.option("--overwrite", is_flag=True, help="Reuse a non-empty run directory.")
def simulate(trace: Path, out: Path, **options: Any) -> None:
    """Run a trace through the simulator's engine offline, in virtual time.

    The scheduler and physics of `loadgen sim --model ...` (same engine options), with no
    HTTP and no waiting: a run directory in the replay's schema, marked simulated
    (run.json generator "llm-loadgen simulate"), that analyze, decompose, gate, compare and
    report read as they read a replay. Same inputs, byte-identical files.

    \b
    Examples:
      loadgen simulate trace.parquet --model llama-3.1-8b --gpu h100 -o runs/sim1
      loadgen simulate trace.parquet --model llama-3.1-8b --topology disagg \\
          --prefill-instances 2 --rate 8 -o runs/disagg-8
      loadgen simulate trace.parquet --model llama-3.1-8b --concurrency 32 -o runs/c32
    """
    from loadgen.schedule import time_factor
    from loadgen.sim.offline.engine import OfflineLoad
    from loadgen.sim.offline.engine import simulate as run_offline
    from loadgen.sim.offline.rundir import (
        OfflineRun,
        derived_run_id,
        prepare_run_dir,
        write_run,
    )
    from traces.io import file_sha256, read_metadata, read_trace

    engine = engine_config(pop_engine_options(options, time_scale=False))
    if engine is None:
        raise ConfigError("loadgen simulate needs --model (the catalog model to simulate)")
    concurrency = options["concurrency"]
    time_scale, rate = options["time_scale"], options["rate"]
    if concurrency is not None and (time_scale is not None or rate is not None):
        raise ConfigError("--concurrency is a closed loop: drop --time-scale and --rate")
    started = time.perf_counter()
    requests = read_trace(trace)
    if options["max_requests"] is not None:
        requests = requests[: options["max_requests"]]
    if not requests:
        raise ConfigError(f"{trace}: no request to simulate")
    embeddings = sum(1 for r in requests if r.api == "embeddings")
    if embeddings:
        raise ConfigError(
            f"{trace}: {embeddings} rows are embeddings requests, which loadgen simulate does "
            "not model (it generates tokens); replay them against loadgen sim instead"
        )
    factor = time_factor([r.arrival_s for r in requests], time_scale=time_scale, rate=rate)
    run = OfflineRun(
        trace_path=trace,
        run_dir=out,
        engine=engine,
        load=OfflineLoad(time_factor=factor, concurrency=concurrency),
        time_scale=time_scale,
        rate=rate,
        max_requests=options["max_requests"],
        run_id=options["run_id"],
        overwrite=options["overwrite"],
    )
    sha = file_sha256(trace)
    run_id = run.run_id or derived_run_id(run, sha)
    prepare_run_dir(out, overwrite=run.overwrite)
    block = int(read_metadata(trace).get("block_size", 512) or 512)
    result = run_offline(requests, engine, run.load, run_id=run_id, trace_block=block)
    write_run(run, result, run_id=run_id, trace_sha256=sha)
    from loadgen.cli.results import write_run_results

    write_run_results(out)
    ok = sum(1 for r in result.records if r.outcome == "ok")
    span_s = (result.end_ns - result.start_ns) / 1e9
    click.echo(
        f"simulated {len(result.records):,} requests ({ok:,} served) in {span_s:,.1f} s of "
        f"model time, {result.steps:,} engine steps, {time.perf_counter() - started:.1f} s "
        f"wall; run {run_id} written to {out}"
    )
