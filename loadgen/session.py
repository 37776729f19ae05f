"""One replay session, start to finish: read the trace, preflight the endpoint, replay (in
this process or in N shard processes), record rows and ``run.json``. The CLI and the demo
both call ``run_session``.

A shard (``replay_shard``) sets up its process's pieces exactly once: the clock anchor, one
``httpx.AsyncClient`` sized to its share of the run, the recorder thread, and SIGINT/SIGTERM
handlers that stop the replay gracefully (a second signal cancels in-flight requests).
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import secrets
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from loadgen import __version__
from loadgen.client import StreamingClient
from loadgen.clock import Clock
from loadgen.errors import ConfigError, RunDirError
from loadgen.fasttransport import FastTransport
from loadgen.live import LagSummary, LiveStats, StatsView
from loadgen.prepare import Preparer
from loadgen.probe import calibration_samples, preflight
from loadgen.protocol import Capabilities
from loadgen.recorder import RunRecorder
from loadgen.replay import LoadShape, Replayer, ReplayResult
from loadgen.runinfo import redact_headers, versions, write_run_json
from loadgen.schedule import time_factor
from loadgen.scrape import DEFAULT_INTERVAL_S, ScrapeConfig, alongside, metrics_url_for, same_origin
from loadgen.shards import select_shard, split_evenly
from loadgen.transport import default_transport
from traces import schema as s
from traces.io import read_metadata, read_trace
from traces.prompts import HFTokenCounter, PromptMaker, fit_calibration
from traces.records import TraceRequest

CLIENT_BOUND_LAG_MS = 5.0
"""p99 schedule lag above which the client, not the server, may be limiting the run."""
CLIENT_BOUND_CPU = 0.7
"""Share of one core a worker may use before the run is flagged client-bound."""
TRANSPORTS = ("fast", "httpx")
START_DELAY_S = 1.0
_SWITCH_INTERVAL_S = 0.0005
"""GIL switch interval during a replay (Python's default is 5 ms)."""
RAY_START_DELAY_S = 10.0
RAY_CLOCK_ASSUMPTION = (
    "every Ray host's wall clock agrees with the driver's (NTP: typically within 1 ms on a "
    "LAN, PTP: microseconds); the common start time and epoch-ns stamps inherit that error"
)
"""With several workers, how far ahead the common start time is set, so all can be ready."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionOptions:
    """Everything a replay session needs; secrets stay out of ``run.json``."""

    trace_path: Path
    run_dir: Path
    base_url: str
    model: str | None = None
    concurrency: int | None = None
    time_scale: float | None = None
    rate: float | None = None
    max_rate: float | None = None
    max_inflight: int | None = None
    max_requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    request_timeout_s: float = 600.0
    grace_s: float = 5.0
    headers: Mapping[str, str] = field(default_factory=dict)
    api_key: str | None = None
    preflight: bool = True
    prompt_seed: int = 0
    overwrite: bool = False
    run_id: str | None = None
    transport: str = "fast"
    """``fast`` (asyncio.Protocol + httptools) or ``httpx`` (httpx's own, stamped)."""
    workers: int = 1
    """Processes, each replaying ``index % workers == k`` (sessions kept whole)."""
    ray: str | None = None
    """Run the shards as Ray tasks: ``local``, ``auto`` or a cluster address."""
    tokenizer: Path | None = None
    """A local ``tokenizer.json`` (the server's): prompts of exact token counts."""
    calibrate_prompts: bool = False
    """Measure the server's tokens per word first, and size prompt text with it."""
    template_tokens: int = 0
    """Tokens the server's chat template adds to a chat prompt (subtracted from its text)."""
    scrape_metrics: bool = True
    """Scrape Prometheus metrics during the run into server_metrics.parquet."""
    scrape_url: str | None = None
    """What to scrape; None: the endpoint's ``/metrics``, when it answers."""
    scrape_interval_s: float = DEFAULT_INTERVAL_S

    def public_config(self) -> dict[str, Any]:
        """The options as recorded in run.json: no API key, credentials redacted."""
        cfg = asdict(self)
        cfg.pop("api_key", None)
        cfg["headers"] = redact_headers(self.headers)
        cfg["api_key_set"] = self.api_key is not None
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in cfg.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptPlan:
    """How prompt text is sized, decided once for all shards (calibration runs once)."""

    tokens_per_word: float = 1.0
    template_tokens: int = 0


def _prompt_maker(opts: SessionOptions, block_size: int, plan: PromptPlan) -> PromptMaker:
    """The prompt strategy of a run: ``tokenizer`` with a local tokenizer.json, ``calibrated``
    after a calibration probe, else ``words``."""
    counter = HFTokenCounter.from_file(opts.tokenizer) if opts.tokenizer is not None else None
    return PromptMaker(
        block_size=block_size,
        seed=opts.prompt_seed,
        tokens_per_word=plan.tokens_per_word,
        counter=counter,
        template_tokens=plan.template_tokens,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardPlan:
    """What one process replays: its slice of the trace, from a common start time."""

    opts: SessionOptions
    run_id: str
    model: str
    capabilities: Capabilities
    time_factor: float
    block_size: int
    prompts: PromptPlan
    shard: int = 0
    shards: int = 1
    start_ns: int | None = None
    """Common start in epoch ns (all workers share CLOCK_MONOTONIC); None: start now."""
    out_dir: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardOutcome:
    """What one shard did."""

    shard: int
    replay: ReplayResult
    rows: int
    by_outcome: tuple[tuple[str, int], ...]


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


def make_transport(
    kind: str, now_ns: Callable[[], int], *, max_connections: int
) -> httpx.AsyncBaseTransport:
    """The HTTP transport under the client; both stamp every body read on arrival."""
    if kind == "fast":
        return FastTransport(now_ns, max_connections=max_connections)
    if kind == "httpx":
        return default_transport(now_ns, max_connections=max_connections)
    raise ConfigError(f"--transport {kind!r}: expected one of {', '.join(TRANSPORTS)}")


def _prepare_run_dir(run_dir: Path, overwrite: bool) -> None:
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: exists and is not a directory")
    if run_dir.exists() and any(run_dir.iterdir()) and not overwrite:
        raise RunDirError(
            f"{run_dir}: run directory is not empty (choose another -o or pass --overwrite)"
        )
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
    run_dir.mkdir(parents=True, exist_ok=True)


def load_requests(opts: SessionOptions) -> tuple[list[TraceRequest], dict[str, Any]]:
    """The trace's requests (cut to ``max_requests``) and its provenance metadata."""
    requests = read_trace(opts.trace_path)
    if opts.max_requests is not None:
        requests = requests[: opts.max_requests]
    return requests, read_metadata(opts.trace_path)


def _file_sha256(path: Path) -> str:
    """The trace file's content hash: compare and gate use it to refuse different traces."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_options(opts: SessionOptions) -> None:
    if opts.concurrency is not None and (opts.time_scale is not None or opts.rate is not None):
        raise ConfigError(
            "--concurrency (closed loop) cannot be combined with --time-scale or --rate"
        )
    if opts.max_rate is not None and opts.concurrency is None:
        raise ConfigError("--max-rate applies to closed loop only (use --rate for open loop)")
    if opts.transport not in TRANSPORTS:
        raise ConfigError(
            f"--transport {opts.transport!r}: expected one of {', '.join(TRANSPORTS)}"
        )
    if opts.tokenizer is not None and opts.calibrate_prompts:
        raise ConfigError("give either --tokenizer or --calibrate-prompts, not both")
    if opts.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {opts.workers}")
    if not opts.scrape_interval_s > 0:
        raise ConfigError(f"--scrape-interval must be positive, got {opts.scrape_interval_s}")
    if opts.scrape_url is not None and not opts.scrape_url.startswith(("http://", "https://")):
        raise ConfigError(f"--scrape-metrics {opts.scrape_url!r}: expected an http(s) URL")
    if opts.concurrency is not None and opts.concurrency < opts.workers:
        raise ConfigError(
            f"--concurrency {opts.concurrency} is below --workers {opts.workers}: "
            "every worker needs at least one slot"
        )


def _http_client(
    opts: SessionOptions,
    clock: Clock,
    max_connections: int,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    headers = dict(opts.headers)
    if opts.api_key:
        headers["authorization"] = f"Bearer {opts.api_key}"
    timeout = httpx.Timeout(
        connect=min(30.0, opts.request_timeout_s),
        read=opts.request_timeout_s,
        write=opts.request_timeout_s,
        pool=None,
    )
    if transport is None:
        transport = make_transport(opts.transport, clock.now_ns, max_connections=max_connections)
    return httpx.AsyncClient(transport=transport, timeout=timeout, headers=headers)


def _shard_shape(opts: SessionOptions, factor: float, shard: int, shards: int) -> LoadShape:
    """This shard's share of the load: closed-loop slots, rate ceiling and in-flight cap."""
    concurrency = (
        split_evenly(opts.concurrency, shards)[shard] if opts.concurrency is not None else None
    )
    return LoadShape(
        concurrency=concurrency,
        time_factor=factor,
        max_rate=opts.max_rate / shards if opts.max_rate is not None else None,
        max_inflight=(
            max(1, split_evenly(opts.max_inflight, shards)[shard])
            if opts.max_inflight is not None
            else None
        ),
        duration_s=opts.duration_s,
        grace_s=opts.grace_s,
    )


async def replay_shard(
    plan: ShardPlan,
    *,
    on_start: Callable[[StatsView, int], None] | None = None,
    install_signal_handlers: bool = True,
    stop_signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
) -> ShardOutcome:
    """Replay one shard of the trace into ``plan.out_dir`` (in the calling process);
    ``stop_signals`` stop it gracefully (a second one cancels in-flight requests)."""
    opts = plan.opts
    requests, _ = load_requests(opts)
    mine = select_shard(requests, plan.shard, plan.shards)
    clock = Clock()
    shape = _shard_shape(opts, plan.time_factor, plan.shard, plan.shards)
    max_conn = shape.concurrency or shape.max_inflight or max(64, len(mine))
    preparer = Preparer(
        prompts=_prompt_maker(opts, plan.block_size, plan.prompts),
        model=plan.model,
        run_id=plan.run_id,
        capabilities=plan.capabilities,
        warmup_requests=opts.warmup_requests,
    )
    recorder = RunRecorder(plan.out_dir, provenance={"run_id": plan.run_id, "shard": plan.shard})
    stats = LiveStats(clock.now_ns)
    transport = make_transport(opts.transport, clock.now_ns, max_connections=max_conn)
    async with _http_client(opts, clock, max_conn, transport) as http:
        client = StreamingClient(
            http,
            base_url=opts.base_url,
            now_ns=clock.now_ns,
            run_id=plan.run_id,
            worker=plan.shard,
            timeout_s=opts.request_timeout_s,
            transport=transport,
        )
        replayer = Replayer(
            requests=mine,
            shape=shape,
            client=client,
            preparer=preparer,
            sink=recorder.add,
            stats=stats,
            clock=clock,
            # Warm-up and due times count from the whole trace, shared by all shards.
            ordinals=[r.index for r in mine],
            origin_s=requests[0].arrival_s if requests else None,
        )
        if on_start is not None:
            on_start(stats, len(mine))
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if install_signal_handlers:
            for sig in stop_signals:
                try:
                    loop.add_signal_handler(sig, replayer.stop, "interrupted")
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):
                    continue
        gc.collect()
        gc.freeze()  # set-up objects never need scanning again; keeps GC pauses short
        # The recorder and scraper threads run Python code; with the default 5 ms switch
        # interval the event loop could wait that long for the GIL when a request is due.
        switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(_SWITCH_INTERVAL_S)
        try:
            result = await replayer.run(start_ns=plan.start_ns)
        finally:
            sys.setswitchinterval(switch_interval)
            for sig in installed:
                loop.remove_signal_handler(sig)
            gc.unfreeze()
            await asyncio.to_thread(recorder.close)
    return ShardOutcome(
        shard=plan.shard,
        replay=result,
        rows=recorder.rows_written,
        by_outcome=tuple(sorted(stats.by_outcome.items())),
    )


async def run_session(
    opts: SessionOptions,
    *,
    on_start: Callable[[StatsView, int], None] | None = None,
    install_signal_handlers: bool = True,
) -> SessionResult:
    """Run one replay session. ``on_start(stats, total)`` lets a UI follow progress."""
    _check_options(opts)
    requests, trace_meta = load_requests(opts)
    factor = time_factor(
        [r.arrival_s for r in requests], time_scale=opts.time_scale, rate=opts.rate
    )
    _prepare_run_dir(opts.run_dir, opts.overwrite)
    run_id = opts.run_id or f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
    api = requests[0].api if requests else s.API_CHAT
    block_size = int(trace_meta.get("block_size", 512) or 512)
    clock = Clock()
    if opts.preflight:
        async with _http_client(opts, clock, 4) as http:
            info = await preflight(
                http,
                base_url=opts.base_url,
                model=opts.model,
                api=api,
                headers={},
                x_request_id=f"{run_id}-preflight",
            )
        model, caps, served = info.model, info.capabilities, list(info.served_models)
    else:
        if opts.model is None:
            raise ConfigError("--model is required with --no-preflight")
        model, caps, served = opts.model, Capabilities(), []
    prompt_plan, calibration = PromptPlan(template_tokens=opts.template_tokens), None
    if opts.calibrate_prompts:
        async with _http_client(opts, clock, 4) as http:
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
        calibration = {
            "samples": [asdict(x) for x in samples],
            "tokens_per_word": fit.tokens_per_word,
            "overhead_tokens": fit.overhead_tokens,
        }
    strategy = _prompt_maker(opts, block_size, prompt_plan).strategy
    mode = "closed" if opts.concurrency is not None else "open"
    base_info: dict[str, Any] = {
        "run_id": run_id,
        "generator": {"name": "llm-loadgen", "version": __version__},
        "config": opts.public_config(),
        "endpoint": {
            "base_url": opts.base_url,
            "model": model,
            "served_models": served,
            "capabilities": asdict(caps),
        },
        "load": {
            "mode": mode,
            "time_factor": factor,
            "requests": len(requests),
            "workers": opts.workers,
        },
        "trace": {
            "path": str(opts.trace_path),
            "sha256": _file_sha256(opts.trace_path),
            "metadata": trace_meta,
        },
        "prompts": {**asdict(strategy), "calibration": calibration},
        "clock": {
            "anchor_wall_ns": clock.anchor.wall_ns,
            "anchor_mono_ns": clock.anchor.mono_ns,
            "source": "perf_counter_ns (CLOCK_MONOTONIC)",
            "assumption": (
                "one host: every worker reads the same CLOCK_MONOTONIC"
                if opts.ray is None
                else "Ray: " + RAY_CLOCK_ASSUMPTION
            ),
        },
        "versions": versions(),
        "status": "running",
    }
    write_run_json(opts.run_dir, base_info)
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
                    plan, on_start=on_start, install_signal_handlers=install_signal_handlers
                )
            ]
        from loadgen.workers import run_workers

        # Ray tasks take longer to be scheduled than local processes to spawn.
        delay_s = START_DELAY_S if opts.ray is None else RAY_START_DELAY_S
        start_ns = clock.now_ns() + int(delay_s * 1e9)
        plans = [
            replace(
                plan,
                shard=k,
                shards=opts.workers,
                start_ns=start_ns,
                out_dir=opts.run_dir / f"shard-{k}",
            )
            for k in range(opts.workers)
        ]
        if opts.ray is not None:
            from loadgen.rayshards import run_ray_shards

            return await asyncio.to_thread(run_ray_shards, plans, opts.ray)
        return await run_workers(
            plans, on_start=on_start, install_signal_handlers=install_signal_handlers
        )

    # The scraper runs in this process, on the run's clock, beside the shard(s).
    outcomes, scraped = await alongside(replay, _scrape_config(opts), clock.now_ns)
    if scraped is not None:
        base_info["server_metrics"] = scraped.as_json()
    return _finish(opts, base_info, run_id, model, outcomes)


def _scrape_config(opts: SessionOptions) -> ScrapeConfig | None:
    """What to scrape: the given URL (required), else the endpoint's /metrics if present;
    credentials go only to the endpoint's own origin."""
    if not opts.scrape_metrics:
        return None
    url = opts.scrape_url or metrics_url_for(opts.base_url)
    headers: dict[str, str] = {}
    if same_origin(url, opts.base_url):
        headers.update(opts.headers)
        if opts.api_key:
            headers["authorization"] = f"Bearer {opts.api_key}"
    return ScrapeConfig(
        url=url,
        out_path=opts.run_dir / s.SERVER_METRICS_FILE,
        interval_s=opts.scrape_interval_s,
        required=opts.scrape_url is not None,
        headers=headers,
    )


def _merge_results(outcomes: list[ShardOutcome]) -> ReplayResult:
    """One view of all shards: sums, the earliest start, the latest end, the worst lags."""
    replays = [o.replay for o in outcomes]

    def worst(lags: list[LagSummary]) -> LagSummary:
        return max(lags, key=lambda lag: lag.p99_ms)

    reasons = {r.stop_reason for r in replays}
    return ReplayResult(
        dispatched=sum(r.dispatched for r in replays),
        stop_reason="interrupted" if "interrupted" in reasons else sorted(reasons)[0],
        start_ns=min(r.start_ns for r in replays),
        end_ns=max(r.end_ns for r in replays),
        loop_lag=worst([r.loop_lag for r in replays]),
        schedule_lag=worst([r.schedule_lag for r in replays]),
        cpu_utilisation=max(r.cpu_utilisation for r in replays),
        cpu_s=sum(r.cpu_s for r in replays),
    )


def _finish(
    opts: SessionOptions,
    base_info: dict[str, Any],
    run_id: str,
    model: str,
    outcomes: list[ShardOutcome],
) -> SessionResult:
    result = _merge_results(outcomes)
    warnings: list[str] = []
    if result.schedule_lag.p99_ms > CLIENT_BOUND_LAG_MS:
        warnings.append(
            f"p99 schedule lag {result.schedule_lag.p99_ms:.1f} ms exceeds "
            f"{CLIENT_BOUND_LAG_MS:g} ms: the client, not the server, may be limiting this run"
        )
    if result.cpu_utilisation > CLIENT_BOUND_CPU:
        warnings.append(
            f"a worker used {result.cpu_utilisation:.0%} of a core (over "
            f"{CLIENT_BOUND_CPU:.0%}): the client may be limiting this run; try --workers"
        )
    by_outcome: dict[str, int] = {}
    for o in outcomes:
        for name, count in o.by_outcome:
            by_outcome[name] = by_outcome.get(name, 0) + count
    rows = sum(o.rows for o in outcomes)
    final = dict(base_info)
    final["status"] = result.stop_reason
    final["result"] = {
        "dispatched": result.dispatched,
        "rows": rows,
        "start_ns": result.start_ns,
        "end_ns": result.end_ns,
        "duration_s": (result.end_ns - result.start_ns) / 1e9,
        "by_outcome": by_outcome,
    }
    final["health"] = {
        "schedule_lag_ms": asdict(result.schedule_lag),
        "loop_lag_ms": asdict(result.loop_lag),
        "cpu_utilisation": result.cpu_utilisation,
        "cpu_s": result.cpu_s,
        "client_bound": bool(warnings),
        "warnings": warnings,
        "workers": [
            {
                "shard": o.shard,
                "dispatched": o.replay.dispatched,
                "rows": o.rows,
                "schedule_lag_ms": asdict(o.replay.schedule_lag),
                "loop_lag_ms": asdict(o.replay.loop_lag),
                "cpu_utilisation": o.replay.cpu_utilisation,
                "cpu_s": o.replay.cpu_s,
            }
            for o in outcomes
        ],
    }
    write_run_json(opts.run_dir, final)
    return SessionResult(
        run_dir=opts.run_dir,
        run_id=run_id,
        model=model,
        replay=result,
        rows=rows,
        client_bound=bool(warnings),
        warnings=tuple(warnings),
    )
