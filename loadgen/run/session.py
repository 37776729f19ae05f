"""One replay session, start to finish: check the options, read the trace, make room for
the connections' file descriptors, preflight the endpoint (and calibrate prompts), replay
in this process or in N shards (``loadgen.run.shard``, ``loadgen.run.workers``,
``loadgen.run.ray``) beside the metrics scraper, and write ``run.json`` with the
generator's health. The CLI and the demos call ``run_session``.

A shard whose rows could not all be written (``RecorderError``) stops early; the session
still writes ``run.json``, with status ``failed`` and the rows that were written, and then
raises the error (exit 4). A shard process that dies (``WorkerDiedError``, exit 4) leaves
its journal: the session merges it and marks the run ``incomplete``
(``loadgen.run.recover``). The session holds the run directory's lock
(``loadgen.run.runlock``) from before ``run.json`` is first written until it is last
written, so that nothing recovers the run under its feet.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen import __version__
from loadgen.clock import Clock
from loadgen.errors import ConfigError, RecorderError, RunDirError, WorkerDiedError
from loadgen.live import StatsView
from loadgen.redact import Scrubber, redact_url
from loadgen.replay import ReplayResult
from loadgen.run.descriptors import ensure_descriptors
from loadgen.run.health import (
    backpressure_of,
    backpressure_warning,
    client_bound_warnings,
    merge_results,
    stall_warning,
)
from loadgen.run.options import SessionOptions, check_options, load_schedule
from loadgen.run.probe import calibration_samples, preflight
from loadgen.run.runinfo import versions
from loadgen.run.runlock import RunLock
from loadgen.run.scrape import ScrapeConfig, alongside, metrics_url_for, same_origin
from loadgen.run.shard import (
    PromptPlan,
    ShardOutcome,
    ShardPlan,
    http_client,
    make_transport,
    prompt_maker,
    replay_shard,
    shard_connections,
    shard_shape,
)
from loadgen.run.sharding import select_shard
from loadgen.schedule import check_span, time_factor
from traces import schema as s
from traces.context import context_overflow_of, deployment_context
from traces.health import GeneratorHealth, WorkerHealth
from traces.io import file_sha256, read_metadata, write_run_info
from traces.prompts.maker import PromptMaker, fit_calibration
from traces.records import TraceRequest
from traces.runinfo import (
    Capabilities,
    ClockAnchor,
    Endpoint,
    GeneratorInfo,
    PromptCalibration,
    PromptsInfo,
    RunInfo,
    RunLoad,
    RunResult,
    TraceRef,
)
from traces.validate import block_size_of

__all__ = [
    "SessionOptions",
    "SessionResult",
    "make_transport",
    "run_session",
]

RAY_CLOCK_ASSUMPTION = (
    "every Ray host's wall clock agrees with the driver's (NTP: typically within 1 ms on a "
    "LAN, PTP: microseconds); the common start time and epoch-ns stamps inherit that error"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionResult:
    """Where the run went and what the driver reports about itself."""

    run_dir: Path
    run_id: str
    model: str
    replay: ReplayResult
    rows: int
    client_bound: bool
    warnings: tuple[str, ...]
    not_sent: int = 0
    """Requests of the schedule never sent (after ``--duration`` or a stop)."""


def _prepare_run_dir(run_dir: Path, overwrite: bool) -> RunLock:
    """Take ``run_dir`` for this run: its lock, held until the run ends (refused while
    another replay holds it, ``--overwrite`` or not), and nothing of an earlier run."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: exists and is not a directory")
    if run_dir.exists() and any(run_dir.iterdir()) and not overwrite:
        raise RunDirError(
            f"{run_dir}: run directory is not empty (choose another -o or pass --overwrite)"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock.claim(run_dir, doing="choose another -o")
    try:
        _clear_run_dir(run_dir, overwrite)
    except BaseException:
        lock.release(unlink=False)
        raise
    lock.hold_for_run()
    return lock


def _clear_run_dir(run_dir: Path, overwrite: bool) -> None:
    if overwrite and run_dir.exists():
        for name in (s.REQUESTS_FILE, s.RUN_JSON, s.SERVER_METRICS_FILE):
            (run_dir / name).unlink(missing_ok=True)
        for parts in [run_dir / s.PARTS_DIR, *run_dir.glob("shard-*/" + s.PARTS_DIR)]:
            if parts.exists():
                for p in parts.iterdir():
                    p.unlink()
                parts.rmdir()
        for merged in run_dir.glob("shard-*/" + s.REQUESTS_FILE):
            merged.unlink()


async def run_session(
    opts: SessionOptions,
    *,
    on_start: Callable[[StatsView, int], None] | None = None,
    install_signal_handlers: bool = True,
    on_notice: Callable[[str], None] | None = None,
) -> SessionResult:
    """Run one replay session. ``on_start(stats, total)`` lets a UI follow progress;
    ``on_notice(text)`` is told, before the first request, what the preflight found that the
    user should know (requests beyond the endpoint's context)."""
    check_options(opts)
    schedule = load_schedule(opts)
    requests, trace_meta = schedule.requests, read_metadata(opts.trace_path)
    block_size = block_size_of(trace_meta, str(opts.trace_path))
    arrivals = [r.arrival_s for r in requests]
    factor = time_factor(arrivals, time_scale=opts.time_scale, rate=opts.rate)
    check_span(arrivals, factor)
    if opts.ray is None:  # Ray shards run on other hosts, under their limits: each checks
        _ensure_descriptors(opts, factor, requests)
    lock = _prepare_run_dir(opts.run_dir, opts.overwrite)
    try:
        return await _replay_into(
            opts,
            requests,
            trace_meta,
            factor,
            block_size=block_size,
            on_start=on_start,
            install_signal_handlers=install_signal_handlers,
            on_notice=on_notice,
            skipped=schedule.skipped,
        )
    finally:
        lock.release(unlink=True)


async def _replay_into(
    opts: SessionOptions,
    requests: list[TraceRequest],
    trace_meta: dict[str, Any],
    factor: float,
    *,
    block_size: int,
    on_start: Callable[[StatsView, int], None] | None,
    install_signal_handlers: bool,
    on_notice: Callable[[str], None] | None = None,
    skipped: int = 0,
) -> SessionResult:
    """The session once it holds its run directory (``run.lock``, for the run's lifetime:
    no recovery under its feet)."""
    run_id = opts.run_id or f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
    api = requests[0].api if requests else s.API_CHAT
    clock = Clock()
    if opts.preflight:
        async with http_client(opts, clock, 4) as http:
            info = await preflight(
                http,
                base_url=opts.base_url,
                model=opts.model,
                api=api,
                headers={},
                x_request_id=f"{run_id}-preflight",
                extra=opts.extra_body,
                tools=next((r.tools for r in requests if r.api == api and r.tools), None),
            )
        model, caps, served = info.model, info.capabilities, tuple(info.served_models)
        deployment = info.deployment
    else:
        if opts.model is None:
            raise ConfigError("--model is required with --no-preflight")
        model, caps, served = opts.model, Capabilities(), ()
        deployment = None
    limit = deployment_context(deployment)
    if limit is not None and on_notice is not None:
        overflow = context_overflow_of(requests, limit=limit[0], source=limit[1])
        warning = overflow.warning(str(opts.trace_path))
        if warning is not None:
            on_notice(warning)
    prompt_plan, calibration = PromptPlan(template_tokens=opts.template_tokens), None
    if opts.calibrate_prompts:
        async with http_client(opts, clock, 4) as http:
            samples = await calibration_samples(
                http,
                base_url=opts.base_url,
                model=model,
                api=api,
                prompts=PromptMaker(block_size=block_size, seed=opts.prompt_seed),
                x_request_id=f"{run_id}-calibrate",
            )
        fit = fit_calibration(samples)
        prompt_plan = PromptPlan(
            tokens_per_word=fit.tokens_per_word,
            template_tokens=(
                round(fit.overhead_tokens) if api == s.API_CHAT else opts.template_tokens
            ),
        )
        calibration = PromptCalibration(
            samples=tuple(samples),
            tokens_per_word=fit.tokens_per_word,
            overhead_tokens=fit.overhead_tokens,
        )
    strategy = prompt_maker(opts, block_size, prompt_plan).strategy
    mode = "closed" if opts.concurrency is not None else "open"
    # What the server listed and what the trace file says are stored: never with a secret
    # of the run in them (a server may echo the key in its model ids).
    scrubber = opts.scrubber()
    base_info = RunInfo(
        run_id=run_id,
        generator=GeneratorInfo(name="llm-loadgen", version=__version__),
        config=opts.public_config(),
        endpoint=Endpoint(
            base_url=redact_url(opts.base_url),
            model=scrubber.scrub(model),
            served_models=tuple(scrubber.scrub(name) for name in served),
            capabilities=caps,
        ),
        load=RunLoad(mode=mode, time_factor=factor, requests=len(requests), workers=opts.workers),
        trace=TraceRef(
            path=str(opts.trace_path),
            sha256=file_sha256(opts.trace_path),
            metadata=_scrubbed_metadata(scrubber, trace_meta),
        ),
        prompts=PromptsInfo(strategy=strategy, calibration=calibration),
        clock=ClockAnchor(
            anchor_wall_ns=clock.anchor.wall_ns,
            anchor_mono_ns=clock.anchor.mono_ns,
            source="perf_counter_ns (CLOCK_MONOTONIC)",
            assumption=(
                "one host: every worker reads the same CLOCK_MONOTONIC"
                if opts.ray is None
                else "Ray: " + RAY_CLOCK_ASSUMPTION
            ),
        ),
        versions=versions(),
        status="running",
        deployment=deployment,
    )
    write_run_info(opts.run_dir, base_info)
    plan = ShardPlan(
        opts=opts,
        run_id=run_id,
        model=model,
        capabilities=caps,
        time_factor=factor,
        block_size=block_size,
        prompts=prompt_plan,
        out_dir=opts.run_dir,
    )

    async def replay() -> list[ShardOutcome]:
        if opts.workers == 1 and opts.ray is None:
            return [
                await replay_shard(
                    plan,
                    on_start=on_start,
                    install_signal_handlers=install_signal_handlers,
                    requests=requests,  # read once
                )
            ]
        from loadgen.run.workers import run_workers

        # No start time in the plans: each shard reports ready, then the driver sends one
        # common start to all of them (``run_workers``, ``run_ray_shards``).
        plans = [
            replace(
                plan,
                shard=k,
                shards=opts.workers,
                out_dir=opts.run_dir / f"shard-{k}",
                # Local workers share the run's lock; a Ray task's host may not see it.
                lock_dir=opts.run_dir if opts.ray is None else None,
            )
            for k in range(opts.workers)
        ]
        if opts.ray is not None:
            from loadgen.run.ray import run_ray_shards

            return await asyncio.to_thread(run_ray_shards, plans, opts.ray)
        return await run_workers(
            plans, on_start=on_start, install_signal_handlers=install_signal_handlers
        )

    # The scraper runs in this process, on the run's clock, beside the shard(s).
    try:
        outcomes, scraped = await alongside(replay, _scrape_config(opts), clock.now_ns)
    except WorkerDiedError as exc:
        # The other shards finished and merged; the dead one's journal holds what it
        # recorded. Merge it and say the run is incomplete, with what it lost (exit 4).
        from loadgen.run.recover import recover_run

        recover_run(opts.run_dir, cause=str(exc), held=True)
        raise
    return _finish(
        opts, replace(base_info, server_metrics=scraped), outcomes, len(requests), skipped
    )


def _ensure_descriptors(opts: SessionOptions, factor: float, requests: list[TraceRequest]) -> None:
    """Raise this process's open-file limit for the busiest shard's connections, or refuse
    the run (``ConfigError``) before anything is written; spawned workers inherit it."""
    busiest, option = 0, None
    for k in range(opts.workers):
        shape = shard_shape(opts, factor, k, opts.workers)
        mine = select_shard(requests, k, opts.workers)
        connections, option = shard_connections(shape, len(mine))
        busiest = max(busiest, connections)
    per_worker = " per worker" if opts.workers > 1 else ""
    ensure_descriptors(
        busiest, planned_by=f"{option} {busiest}{per_worker}" if option is not None else None
    )


def _scrubbed_metadata(scrubber: Scrubber, metadata: Mapping[str, object]) -> dict[str, object]:
    """The trace's file metadata as run.json keeps it: every string scrubbed."""
    scrubbed = scrubber.scrub_tree(metadata)
    assert isinstance(scrubbed, dict)
    return scrubbed


def _scrape_config(opts: SessionOptions) -> ScrapeConfig | None:
    """What to scrape: the given URL (required), else the endpoint's /metrics if present;
    credentials go only to the endpoint's own origin."""
    if not opts.scrape_metrics:
        return None
    url = opts.scrape_url or metrics_url_for(opts.base_url)
    headers: dict[str, str] = {}
    if same_origin(url, opts.base_url):
        headers.update(opts.request_headers())
    return ScrapeConfig(
        url=url,
        out_path=opts.run_dir / s.SERVER_METRICS_FILE,
        interval_s=opts.scrape_interval_s,
        required=opts.scrape_url is not None,
        headers=headers,
    )


def _finish(
    opts: SessionOptions,
    base_info: RunInfo,
    outcomes: list[ShardOutcome],
    scheduled: int,
    skipped: int,
) -> SessionResult:
    result = merge_results(outcomes)
    backpressure = backpressure_of(result, opts.max_inflight)
    warnings = client_bound_warnings(
        schedule_lag=backpressure.dispatch_lag_ms if backpressure else result.schedule_lag,
        loop_lag=result.loop_lag,
        cpu_utilisation=result.cpu_utilisation,
        stamp_delay=result.stamp_delay,
    )
    notes = [
        w
        for w in (backpressure_warning(backpressure), stall_warning(result.stalls))
        if w is not None
    ]
    by_outcome: dict[str, int] = {}
    for o in outcomes:
        for name, count in o.by_outcome:
            by_outcome[name] = by_outcome.get(name, 0) + count
    rows = sum(o.rows for o in outcomes)
    final = replace(
        base_info,
        status=result.stop_reason,
        result=RunResult(
            dispatched=result.dispatched,
            rows=rows,
            start_ns=result.start_ns,
            end_ns=result.end_ns,
            duration_s=(result.end_ns - result.start_ns) / 1e9,
            by_outcome=by_outcome,
            not_sent=scheduled - result.dispatched,
            warmup_end_ns=result.warmup_end_ns,
            dispatch_end_ns=result.dispatch_end_ns,
            skipped=skipped if opts.start_offset_s is not None else None,
        ),
        health=GeneratorHealth(
            schedule_lag_ms=result.schedule_lag,
            loop_lag_ms=result.loop_lag,
            cpu_utilisation=result.cpu_utilisation,
            cpu_s=result.cpu_s,
            client_bound=bool(warnings),
            warnings=tuple(warnings + notes),
            stamp_delay_ms=result.stamp_delay,
            backpressure=backpressure,
            stalls=result.stalls,
            prepare_ahead=result.prepare_ahead,
            workers=tuple(
                WorkerHealth(
                    shard=o.shard,
                    dispatched=o.replay.dispatched,
                    rows=o.rows,
                    schedule_lag_ms=o.replay.schedule_lag,
                    loop_lag_ms=o.replay.loop_lag,
                    cpu_utilisation=o.replay.cpu_utilisation,
                    cpu_s=o.replay.cpu_s,
                    node=o.node,
                    host=o.host,
                )
                for o in outcomes
            ),
        ),
    )
    failures = [o.error for o in outcomes if o.error is not None]
    if failures:
        final = replace(final, status="failed")
    write_run_info(opts.run_dir, final)
    if failures:
        raise RecorderError(failures[0])
    return SessionResult(
        run_dir=opts.run_dir,
        run_id=final.run_id,
        model=final.endpoint.model,
        replay=result,
        rows=rows,
        client_bound=bool(warnings),
        warnings=tuple(warnings + notes),
        not_sent=scheduled - result.dispatched,
    )
