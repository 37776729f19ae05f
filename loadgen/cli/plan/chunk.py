"""``loadgen plan chunk``: what the chunk size does to decode ITL and TTFT at p99, and the
chunk size to run for a TTFT/ITL pair.

Composes: the engine options (``loadgen.cli.options.engine``, as ``sim``, ``simulate`` and
``plan admission`` take them; the deployment's ``max_batched_tokens`` is its chunk size),
a workload (a trace scaled to ``--rate``, or a seeded Poisson stream of one prompt and
output length), the simulator's instance setup and the virtual-time replays of
:mod:`analyzers.budget.chunking`, one per chunk size. Heavy imports are deferred to the
command.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import click

from loadgen.cli.options.engine import engine_config, engine_options, pop_engine_options
from loadgen.cli.plan.flags import stream_options
from loadgen.errors import ConfigError

_DEFAULT_SIZES = "256,512,1024,2048,4096,8192,16384,none"


def parse_sizes(text: str) -> list[int | None]:
    """``256,512,none``: chunk sizes in tokens, ``none`` for unchunked prefill."""
    out: list[int | None] = []
    for part in text.split(","):
        word = part.strip().lower()
        if word in ("none", "unchunked"):
            out.append(None)
            continue
        try:
            value = int(word)
        except ValueError:
            raise ConfigError(f"--chunk-sizes: {part!r} is not a token count or 'none'") from None
        if value < 1:
            raise ConfigError(f"--chunk-sizes: {value} must be >= 1")
        out.append(value)
    return list(dict.fromkeys(out))


@click.command("chunk")
@engine_options(model_help="Catalog model of the engine (e.g. llama-3.1-8b).", time_scale=False)
@click.option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    required=True,
    help="Offered load, requests/s (a --trace is scaled to it, keeping its burstiness).",
)
@stream_options(prompt_tokens=4000, output_tokens=256, requests=300)
@click.option(
    "--chunk-sizes",
    default=_DEFAULT_SIZES,
    show_default=True,
    help="Chunk sizes to compare, tokens per step ('none': unchunked); the deployment's "
    "--max-batched-tokens is always added.",
)
@click.option(
    "--ttft-p99-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="TTFT p99 target (with --itl-p99-ms: recommend a chunk size).",
)
@click.option(
    "--itl-p99-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Decode ITL p99 target (with --ttft-p99-ms: recommend a chunk size).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def chunk_cmd(**options: Any) -> None:
    """Chunked prefill in the tail: decode ITL and TTFT p50/p99 per chunk size at a load,
    and the chunk size to run for a TTFT/ITL p99 pair.

    Each chunk size (vLLM --max-num-batched-tokens) replays the same arrivals through the
    simulator's scheduler and step model in virtual time (exact, deterministic), once at
    the offered rate (TTFT, ITL) and once all at once (capacity, output tokens/s). Each
    row's closed form (steps per prompt, decode step alone and beside a chunk) is printed
    as a line of arithmetic (docs/arithmetic.md). With both targets, the recommendation is
    the highest-capacity size meeting both, or which target binds. Monolith only.

    Example: loadgen plan chunk --model llama-3.1-8b --gpu h100 --rate 4
    --prompt-tokens 4000 --output-tokens 256 --ttft-p99-ms 500 --itl-p99-ms 50
    """
    from analyzers.budget.chunking import EngineSetup, plan_chunks, poisson_arrivals
    from analyzers.budget.engine.timeline import Arrival
    from loadgen.schedule import time_factor
    from loadgen.sim.topology import instance_setup
    from reports.plan import render_chunks

    engine = engine_config(pop_engine_options(options, time_scale=False))
    if engine is None:
        raise ConfigError("plan chunk needs --model (or --deployment)")
    if engine.topology != "monolith":
        raise ConfigError(
            "plan chunk models a monolith: chunks share steps with decodes only there "
            "(a disaggregated prefill instance decodes nothing)"
        )
    sizes = parse_sizes(options["chunk_sizes"])
    if engine.max_batched_tokens not in sizes:
        sizes.append(engine.max_batched_tokens)
    sizes.sort(key=lambda c: float("inf") if c is None else c)
    rate = options["rate"]
    if options["trace_path"] is not None:
        from traces.io import read_trace

        rows = read_trace(options["trace_path"])[: options["n_requests"]]
        if len(rows) < 2:
            raise ConfigError("plan chunk needs a trace of at least 2 requests")
        factor = time_factor([r.arrival_s for r in rows], rate=rate)
        origin = rows[0].arrival_s
        arrivals = [
            Arrival(
                key=i,
                arrival_s=(r.arrival_s - origin) * factor,
                prompt_tokens=max(1, r.input_tokens + (r.image_tokens or 0)),
                output_tokens=max(1, r.output_tokens),
            )
            for i, r in enumerate(rows)
        ]
        load = f"{len(rows):,} requests of {options['trace_path']} at {rate:g} req/s"
    else:
        arrivals = poisson_arrivals(
            options["n_requests"],
            rate,
            options["prompt_tokens"],
            options["output_tokens"],
            seed=options["seed"],
        )
        load = (
            f"{len(arrivals):,} Poisson requests at {rate:g} req/s, "
            f"{options['prompt_tokens']:,} prompt + {options['output_tokens']:,} output tokens"
        )
    physics, limits = instance_setup(engine, engine.gpus)
    setup = EngineSetup(
        timer=physics.step_s,
        limits=limits,
        replicas=engine.replicas,
        router="round-robin" if engine.router == "round-robin" else "least-loaded",
    )
    ttft, itl = options["ttft_p99_ms"], options["itl_p99_ms"]
    plan = plan_chunks(
        arrivals,
        setup,
        chunks=sizes,
        ttft_target_s=None if ttft is None else ttft / 1e3,
        itl_target_s=None if itl is None else itl / 1e3,
        model=engine.model,
        where=f"{engine.replicas} x {engine.gpus} x {engine.gpu}",
        load=load,
        deployment_chunk=engine.max_batched_tokens,
    )
    if options["as_json"]:
        doc = asdict(plan)
        for row, out in zip(plan.rows, doc["rows"], strict=True):
            out["label"] = row.label
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(render_chunks(plan))
