"""``loadgen plan admission``: what admission control does at a load, from the offline engine.

Composes: the engine options (``loadgen.cli.options.engine``, as ``sim`` and ``simulate``
take them, the deployment's ``[admission] ttft_ms`` included), a workload (a trace, or a
seeded Poisson stream of one prompt and output length), two runs of the offline engine
(:mod:`loadgen.sim.offline.engine`: every request at once, for the capacity; then the offered
rate with admission control on) and the arithmetic of :mod:`analyzers.budget.admission`.
Heavy imports are deferred to the command.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, replace
from typing import Any

import click

from loadgen.cli.options.engine import engine_config, engine_options, pop_engine_options
from loadgen.cli.plan.flags import stream_options
from loadgen.errors import ConfigError


@click.command("admission")
@engine_options(model_help="Catalog model of the engine (e.g. llama-3.1-8b).", time_scale=False)
@stream_options(prompt_tokens=2000, output_tokens=16, requests=1500)
@click.option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Offered load, requests/s.",
)
@click.option(
    "--load",
    "load_x",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Offered load as a multiple of the capacity (e.g. 1.5).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def admission_cmd(**options: Any) -> None:
    """Admission control at a load: rejected share, served TTFT, the largest prompt, and
    the utilisation the TTFT budget costs.

    The TTFT budget is --admission-ttft-ms (or the deployment's [admission] ttft_ms). The
    capacity and the rejected share come from the offline engine (loadgen simulate: the
    simulator's scheduler and policy in virtual time); the rest is queueing arithmetic,
    each figure with its chain (docs/arithmetic.md).

    Example: loadgen plan admission --model llama-3.1-8b --gpu h100
    --admission-ttft-ms 500 --prompt-tokens 2000 --load 1.5
    """
    from analyzers.budget.admission import AdmissionRuns, plan_admission
    from loadgen.schedule import time_factor
    from loadgen.sim.offline.engine import OfflineLoad, simulate
    from loadgen.sim.topology import instance_setup
    from reports.plan import render_admission
    from traces.records import TraceRequest

    engine = engine_config(pop_engine_options(options, time_scale=False))
    if engine is None:
        raise ConfigError("plan admission needs --model (or --deployment)")
    if engine.admission_ttft_ms is None:
        raise ConfigError(
            "plan admission needs a TTFT budget: --admission-ttft-ms or [admission] ttft_ms"
        )
    rate, load_x = options["rate"], options["load_x"]
    if (rate is None) == (load_x is None):
        raise ConfigError("give one of --rate (requests/s) or --load (x capacity)")
    requests: list[TraceRequest]
    if options["trace_path"] is not None:
        from traces.io import read_trace

        requests = read_trace(options["trace_path"])[: options["n_requests"]]
    else:
        rng = random.Random(options["seed"])
        t, requests = 0.0, []
        for i in range(options["n_requests"]):
            requests.append(
                TraceRequest(
                    index=i,
                    request_id=f"a{i}",
                    arrival_s=t,
                    input_tokens=options["prompt_tokens"],
                    output_tokens=options["output_tokens"],
                )
            )
            t += rng.expovariate(1.0)
    if len(requests) < 2:
        raise ConfigError("plan admission needs at least 2 requests")
    open_engine = replace(engine, admission_ttft_ms=None)
    saturated = simulate(requests, open_engine, OfflineLoad(time_factor=0.0), run_id="capacity")
    served = [r for r in saturated.records if r.outcome == "ok"]
    span_s = (max(r.end_ns or r.due_ns for r in served) - saturated.start_ns) / 1e9 if served else 0
    capacity = len(served) / span_s if span_s > 0 else 0.0
    offered = rate if rate is not None else load_x * capacity
    factor = time_factor([r.arrival_s for r in requests], time_scale=None, rate=offered)
    result = simulate(requests, engine, OfflineLoad(time_factor=factor), run_id="admission")
    ok = [r for r in result.records if r.outcome == "ok"]
    ttfts = sorted(((r.first_token_ns or r.due_ns) - (r.sent_ns or r.due_ns)) / 1e9 for r in ok)
    admitted_span = (max((r.end_ns or r.due_ns for r in ok), default=0) - result.start_ns) / 1e9
    physics, _ = instance_setup(engine, engine.gpus)
    runs = AdmissionRuns(
        requests=len(requests),
        mean_prompt_tokens=sum(r.input_tokens for r in requests) / len(requests),
        saturated_span_s=span_s,
        saturated_served=len(served),
        offered_rps=offered,
        rejected=sum(1 for r in result.records if r.outcome == "rejected"),
        served=len(ok),
        served_ttft_p50_s=_quantile(ttfts, 0.5),
        served_ttft_p99_s=_quantile(ttfts, 0.99),
        served_queue_p50_s=_quantile(sorted((r.server_queue_ms or 0.0) / 1e3 for r in ok), 0.5),
        admitted_span_s=max(admitted_span, 0.0),
    )
    where = f"{engine.replicas} x {engine.gpus} x {engine.gpu}, {engine.topology}"
    plan = plan_admission(
        physics.model, physics.deploy, engine.admission_ttft_ms / 1e3, runs, where=where
    )
    if options["as_json"]:
        doc = {k: v for k, v in asdict(plan).items() if k != "lines"}
        doc["lines"] = [asdict(line) for line in plan.lines]
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(render_admission(plan))


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default); 0 when empty."""
    if not sorted_values:
        return 0.0
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
