"""One replay session, start to finish: read the trace, preflight the endpoint, replay,
record rows and ``run.json``. The CLI and the demo both call ``run_session``.

Sets up the process-wide pieces exactly once: the clock anchor, one ``httpx.AsyncClient``
sized to the run, the recorder thread, and SIGINT/SIGTERM handlers that stop the replay
gracefully (a second signal cancels in-flight requests at once).
"""

from __future__ import annotations

import asyncio
import gc
import secrets
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from loadgen import __version__
from loadgen.client import StreamingClient
from loadgen.clock import Clock
from loadgen.errors import ConfigError, RunDirError
from loadgen.fasttransport import FastTransport
from loadgen.live import LiveStats
from loadgen.prepare import Preparer
from loadgen.probe import preflight
from loadgen.protocol import Capabilities
from loadgen.recorder import RunRecorder
from loadgen.replay import LoadShape, Replayer, ReplayResult
from loadgen.runinfo import redact_headers, versions, write_run_json
from loadgen.schedule import time_factor
from loadgen.transport import default_transport
from traces import schema as s
from traces.io import read_metadata, read_trace
from traces.prompts import PromptMaker
from traces.records import TraceRequest

CLIENT_BOUND_LAG_MS = 5.0
"""p99 schedule lag above which the client, not the server, may be limiting the run."""


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

    def public_config(self) -> dict[str, Any]:
        """The options as recorded in run.json: no API key, credentials redacted."""
        cfg = asdict(self)
        cfg.pop("api_key", None)
        cfg["headers"] = redact_headers(self.headers)
        cfg["api_key_set"] = self.api_key is not None
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in cfg.items()}


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


TRANSPORTS = ("fast", "httpx")


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
        parts = run_dir / s.PARTS_DIR
        if parts.exists():
            for p in parts.iterdir():
                p.unlink()
            parts.rmdir()
    run_dir.mkdir(parents=True, exist_ok=True)


def load_requests(opts: SessionOptions) -> tuple[list[TraceRequest], dict[str, Any]]:
    """The trace's requests (cut to ``max_requests``) and its provenance metadata."""
    requests = read_trace(opts.trace_path)
    if opts.max_requests is not None:
        requests = requests[: opts.max_requests]
    return requests, read_metadata(opts.trace_path)


async def run_session(
    opts: SessionOptions,
    *,
    on_start: Callable[[LiveStats, int], None] | None = None,
    install_signal_handlers: bool = True,
) -> SessionResult:
    """Run one replay session. ``on_start(stats, total)`` lets a UI follow progress."""
    if opts.concurrency is not None and (opts.time_scale is not None or opts.rate is not None):
        raise ConfigError(
            "--concurrency (closed loop) cannot be combined with --time-scale or --rate"
        )
    if opts.max_rate is not None and opts.concurrency is None:
        raise ConfigError("--max-rate applies to closed loop only (use --rate for open loop)")
    requests, trace_meta = load_requests(opts)
    factor = time_factor(
        [r.arrival_s for r in requests], time_scale=opts.time_scale, rate=opts.rate
    )
    _prepare_run_dir(opts.run_dir, opts.overwrite)
    run_id = opts.run_id or f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
    clock = Clock()
    headers = dict(opts.headers)
    if opts.api_key:
        headers["authorization"] = f"Bearer {opts.api_key}"
    max_conn = opts.concurrency or opts.max_inflight or max(64, len(requests))
    transport = make_transport(opts.transport, clock.now_ns, max_connections=max_conn)
    timeout = httpx.Timeout(
        connect=min(30.0, opts.request_timeout_s),
        read=opts.request_timeout_s,
        write=opts.request_timeout_s,
        pool=None,
    )
    api = requests[0].api if requests else s.API_CHAT
    block_size = int(trace_meta.get("block_size", 512) or 512)
    async with httpx.AsyncClient(transport=transport, timeout=timeout, headers=headers) as http:
        if opts.preflight:
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
        preparer = Preparer(
            prompts=PromptMaker(block_size=block_size, seed=opts.prompt_seed),
            model=model,
            run_id=run_id,
            capabilities=caps,
            warmup_requests=opts.warmup_requests,
        )
        shape = LoadShape(
            concurrency=opts.concurrency,
            time_factor=factor,
            max_rate=opts.max_rate,
            max_inflight=opts.max_inflight,
            duration_s=opts.duration_s,
            grace_s=opts.grace_s,
        )
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
            "load": {"mode": shape.mode, "time_factor": factor, "requests": len(requests)},
            "trace": {"path": str(opts.trace_path), "metadata": trace_meta},
            "prompts": {"strategy": "words", "block_size": block_size, "seed": opts.prompt_seed},
            "clock": {
                "anchor_wall_ns": clock.anchor.wall_ns,
                "anchor_mono_ns": clock.anchor.mono_ns,
                "source": "perf_counter_ns (CLOCK_MONOTONIC)",
            },
            "versions": versions(),
            "status": "running",
        }
        write_run_json(opts.run_dir, base_info)
        recorder = RunRecorder(opts.run_dir, provenance={"run_id": run_id})
        stats = LiveStats(clock.now_ns)
        client = StreamingClient(
            http,
            base_url=opts.base_url,
            now_ns=clock.now_ns,
            run_id=run_id,
            timeout_s=opts.request_timeout_s,
        )
        replayer = Replayer(
            requests=requests,
            shape=shape,
            client=client,
            preparer=preparer,
            sink=recorder.add,
            stats=stats,
            clock=clock,
        )
        if on_start is not None:
            on_start(stats, len(requests))
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if install_signal_handlers:
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.add_signal_handler(sig, replayer.stop, "interrupted")
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):
                    continue
        gc.collect()
        gc.freeze()  # set-up objects never need scanning again; keeps GC pauses short
        try:
            result = await replayer.run()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            gc.unfreeze()
            path_rows = await asyncio.to_thread(recorder.close)
    del path_rows
    warnings: list[str] = []
    client_bound = result.schedule_lag.p99_ms > CLIENT_BOUND_LAG_MS
    if client_bound:
        warnings.append(
            f"p99 schedule lag {result.schedule_lag.p99_ms:.1f} ms exceeds {CLIENT_BOUND_LAG_MS:g} ms: "
            "the client, not the server, may be limiting this run"
        )
    final = dict(base_info)
    final["status"] = result.stop_reason
    final["result"] = {
        "dispatched": result.dispatched,
        "rows": recorder.rows_written,
        "start_ns": result.start_ns,
        "end_ns": result.end_ns,
        "duration_s": (result.end_ns - result.start_ns) / 1e9,
        "by_outcome": dict(stats.by_outcome),
    }
    final["health"] = {
        "schedule_lag_ms": asdict(result.schedule_lag),
        "loop_lag_ms": asdict(result.loop_lag),
        "cpu_utilisation": result.cpu_utilisation,
        "client_bound": client_bound,
        "warnings": warnings,
    }
    write_run_json(opts.run_dir, final)
    return SessionResult(
        run_dir=opts.run_dir,
        run_id=run_id,
        model=model,
        replay=result,
        rows=recorder.rows_written,
        client_bound=client_bound,
        warnings=tuple(warnings),
    )
