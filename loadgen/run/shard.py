"""One shard of a replay, run in the calling process: the pieces a worker sets up exactly
once (clock anchor, one ``httpx.AsyncClient`` sized to its share of the load, recorder
thread, signal handlers) and the replay of its slice of the trace from a common start.

The shard makes room for its connections' descriptors first (``loadgen.run.descriptors``),
stops dispatching when its recorder fails, and closes the recorder only after its
connections, so that the merge into ``requests.parquet`` never competes with them for
descriptors. A recorder failure is the shard's ``error``, not an exception: the session
still writes ``run.json``.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import httpx

from loadgen.client import StreamingClient
from loadgen.clock import Clock
from loadgen.collector import steady_collector
from loadgen.errors import ConfigError, RecorderError
from loadgen.http.pool import FastTransport
from loadgen.http.stamping import default_transport
from loadgen.live import LiveStats, StatsView
from loadgen.prepare.ahead import plan_ahead, running
from loadgen.prepare.preparer import Preparer
from loadgen.replay import LoadShape, Replayer, ReplayResult, StartGate
from loadgen.run.descriptors import ensure_descriptors
from loadgen.run.options import TRANSPORTS, SessionOptions, load_requests
from loadgen.run.recorder import RunRecorder
from loadgen.run.sharding import select_shard, split_evenly
from loadgen.sessions import has_sessions, plan_sessions
from loadgen.stalls import StallWatch
from traces.prompts.maker import HFTokenCounter, PromptMaker
from traces.records import TraceRequest
from traces.runinfo import Capabilities

_T = TypeVar("_T")
_SWITCH_INTERVAL_S = 0.0005
"""GIL switch interval during a replay (Python's default is 5 ms)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptPlan:
    """How prompt text is sized, decided once for all shards (calibration runs once)."""

    tokens_per_word: float = 1.0
    template_tokens: int = 0


def prompt_maker(opts: SessionOptions, block_size: int, plan: PromptPlan) -> PromptMaker:
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
    lock_dir: Path | None = None
    """The run directory whose lock a worker process shares while it runs
    (``loadgen.run.runlock``); None in the session's own process, which holds it already."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardOutcome:
    """What one shard did."""

    shard: int
    replay: ReplayResult
    rows: int
    by_outcome: tuple[tuple[str, int], ...]
    error: str | None = None
    """Why its rows could not all be written (``RecorderError``); None when they were."""
    node: str | None = None
    """The Ray node that ran it (its node id); None for a shard of this host."""
    host: str | None = None
    """That node's IP address; None for a shard of this host."""


def run_event_loop(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` on a fresh event loop: uvloop's where installed (a worker process, a
    Ray task), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def make_transport(
    kind: str,
    now_ns: Callable[[], int],
    *,
    max_connections: int,
    http2: str | None = None,
) -> httpx.AsyncBaseTransport:
    """The HTTP transport under the client; both stamp every body read on arrival.
    ``http2``: httpx's HTTP/2 mode (``loadgen.http.stamping.default_transport``)."""
    if kind == "fast":
        return FastTransport(now_ns, max_connections=max_connections)
    if kind == "httpx":
        return default_transport(now_ns, max_connections=max_connections, http2=http2)
    raise ConfigError(f"--transport {kind!r}: expected one of {', '.join(TRANSPORTS)}")


def http_client(
    opts: SessionOptions,
    clock: Clock,
    max_connections: int,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    headers = opts.request_headers()
    timeout = httpx.Timeout(
        connect=min(30.0, opts.request_timeout_s),
        read=opts.request_timeout_s,
        write=opts.request_timeout_s,
        pool=None,
    )
    if transport is None:
        transport = make_transport(
            opts.transport, clock.now_ns, max_connections=max_connections, http2=opts.http2_mode()
        )
    # ``auth``: no credential of httpx's own. Without it httpx would turn a URL's user info
    # into Basic auth on the requests it sends itself (the preflight), over the header.
    return httpx.AsyncClient(
        transport=transport, timeout=timeout, headers=headers, auth=httpx.Auth()
    )


def shard_connections(shape: LoadShape, requests: int) -> tuple[int, str | None]:
    """The most connections a shard with ``requests`` requests opens, and the option that
    fixes that number (None for an open loop without ``--max-inflight``: one connection
    per request at most, the pool's own cap)."""
    if shape.concurrency is not None:
        return shape.concurrency, "--concurrency"
    if shape.max_inflight is not None:
        return shape.max_inflight, "--max-inflight"
    return max(64, requests), None


def shard_shape(opts: SessionOptions, factor: float, shard: int, shards: int) -> LoadShape:
    """This shard's share of the load: closed-loop slots, rate ceiling and in-flight cap."""
    concurrency = (
        split_evenly(opts.concurrency, shards)[shard] if opts.concurrency is not None else None
    )
    return LoadShape(
        concurrency=concurrency,
        time_factor=factor,
        max_rate=opts.max_rate / shards if opts.max_rate is not None else None,
        # Shard k's slots fall k slots of the whole rate after the start: interleaved, the
        # shards' slots are evenly spaced, not ``shards`` dispatches at each instant.
        max_rate_phase_ns=round(shard * 1e9 / opts.max_rate) if opts.max_rate else 0,
        max_inflight=(
            max(1, split_evenly(opts.max_inflight, shards)[shard])
            if opts.max_inflight is not None
            else None
        ),
        duration_s=opts.duration_s,
        grace_s=opts.grace_s,
        closed_sessions=opts.sessions == "closed",
        max_sessions=(
            max(1, split_evenly(opts.max_sessions, shards)[shard])
            if opts.max_sessions is not None
            else None
        ),
        warmup_s=opts.warmup_s,
        live_history=opts.history == "live",
    )


async def replay_shard(
    plan: ShardPlan,
    *,
    on_start: Callable[[StatsView, int], None] | None = None,
    install_signal_handlers: bool = True,
    stop_signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
    requests: list[TraceRequest] | None = None,
    gate: StartGate | None = None,
) -> ShardOutcome:
    """Replay one shard of the trace into ``plan.out_dir`` (in the calling process);
    ``stop_signals`` stop it gracefully (a second one cancels in-flight requests).
    ``requests``: the trace as ``load_requests`` read it, when the caller already has it.
    ``gate``: awaited once the shard is ready (pool connected, first requests prepared);
    it reports that to the run's driver and returns the common start (``replay.StartGate``)."""
    opts = plan.opts
    if requests is None:
        requests, _ = load_requests(opts)
    mine = select_shard(requests, plan.shard, plan.shards)
    clock = Clock()
    shape = shard_shape(opts, plan.time_factor, plan.shard, plan.shards)
    max_conn, option = shard_connections(shape, len(mine))
    # The session checked already in this process; a Ray task checks on its own host.
    ensure_descriptors(max_conn, planned_by=f"{option} {max_conn}" if option else None)
    preparer = Preparer(
        prompts=prompt_maker(opts, plan.block_size, plan.prompts),
        model=plan.model,
        run_id=plan.run_id,
        capabilities=plan.capabilities,
        warmup_requests=opts.warmup_requests,
        extra_body=opts.extra_body,
        stream=opts.stream,
        embed_batch=opts.embed_batch,
    )
    # Bodies built off the loop, when the trace has images or huge prompts (decided here,
    # before the run: an ordinary trace starts no process).
    sessions = (
        plan_sessions(mine, time_factor=plan.time_factor, block_size=plan.block_size)
        if shape.closed_sessions or has_sessions(mine)
        else None
    )
    ahead = plan_ahead(preparer, mine, shape, opts.prepare_ahead_mib, sessions)
    loop = asyncio.get_running_loop()

    def recorder_failed(message: str) -> None:  # called from the recorder's thread
        loop.call_soon_threadsafe(replayer.stop, "failed")

    stalls = StallWatch(shard=plan.shard)
    recorder = RunRecorder(
        plan.out_dir,
        provenance={"run_id": plan.run_id, "shard": plan.shard},
        on_failure=recorder_failed,
        on_flush=stalls.mark,
    )
    stats = LiveStats(clock.now_ns)
    installed: list[signal.Signals] = []
    transport = make_transport(
        opts.transport, clock.now_ns, max_connections=max_conn, http2=opts.http2_mode()
    )
    error: str | None = None
    try:
        async with http_client(opts, clock, max_conn, transport) as http:
            client = StreamingClient(
                http,
                base_url=opts.base_url,
                now_ns=clock.now_ns,
                run_id=plan.run_id,
                worker=plan.shard,
                timeout_s=opts.request_timeout_s,
                transport=transport,
                defer_records=True,
                max_event_bytes=opts.max_event_bytes,
                dispatched=recorder.dispatched,
                stream=opts.stream,
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
                plan=sessions,
                stalls=stalls,
                ahead=ahead,
            )
            if on_start is not None:
                on_start(stats, len(mine))
            if install_signal_handlers:
                for sig in stop_signals:
                    try:
                        loop.add_signal_handler(sig, replayer.stop, "interrupted")
                        installed.append(sig)
                    except (NotImplementedError, RuntimeError):
                        continue
            # The recorder and scraper threads run Python code; with the default 5 ms switch
            # interval the event loop could wait that long for the GIL when a request is due.
            switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(_SWITCH_INTERVAL_S)
            try:
                async with running(ahead):  # started before the gate: ready, then start
                    with steady_collector():  # set-up frozen; no collector passes over them
                        result = await replayer.run(start_ns=plan.start_ns, gate=gate)
                if ahead is not None:
                    result = replace(result, prepare_ahead=ahead.summary())
            finally:
                sys.setswitchinterval(switch_interval)
    finally:
        # After the client has closed its connections: the merge needs descriptors too.
        try:
            await asyncio.to_thread(recorder.close)
        except RecorderError as exc:
            error = str(exc)
        finally:
            # Only after the merge: a signal during it changes nothing (the replay has
            # stopped), where the default action would leave the journal unmerged.
            for sig in installed:
                loop.remove_signal_handler(sig)
    return ShardOutcome(
        shard=plan.shard,
        replay=result,
        rows=recorder.rows_written,
        by_outcome=tuple(sorted(stats.by_outcome.items())),
        error=error,
    )
