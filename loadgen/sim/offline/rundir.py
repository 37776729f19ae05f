"""The run directory of an offline simulation: ``requests.parquet`` and ``run.json`` in the
replay's schema, marked as simulated, with nothing that depends on when or where it ran.

``run.json`` says what made it: ``generator.name`` is ``SIMULATED_GENERATOR``, the
endpoint ``OFFLINE_URL``, the transport ``offline``, the clock a virtual one anchored at
``SIM_EPOCH_NS``; the status is ``completed`` and the generator's health is zero lag (no
client ran). The run id is given or derived from the inputs (trace content, engine,
load), so the same inputs give byte-identical files.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import hashlib
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

from analyzers.budget.catalog import load_catalog
from loadgen import __version__
from loadgen.errors import RunDirError
from loadgen.sim.config import DEFAULT_MODEL_NAME, EngineConfig, engine_deployment
from loadgen.sim.offline.engine import SIM_EPOCH_NS, OfflineLoad, OfflineResult
from traces import schema as s
from traces.deployment import DeploymentInfo
from traces.io import read_metadata, write_run_info, write_run_records
from traces.prompts.maker import PromptStrategy
from traces.runinfo import (
    Capabilities,
    ClockAnchor,
    Endpoint,
    GeneratorHealth,
    GeneratorInfo,
    LagSummary,
    PromptsInfo,
    RunConfig,
    RunInfo,
    RunLoad,
    RunResult,
    TraceRef,
)

SIMULATED_GENERATOR = "llm-loadgen simulate"
"""``run.json``'s ``generator.name`` for a run made by the offline engine."""
OFFLINE_SOURCE = "loadgen simulate"
"""The source of every ``deployment`` fact of a simulated run: the engine's own options."""
OFFLINE_URL = "offline://loadgen-simulate/v1"
"""The endpoint a simulated run names (no server was contacted)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OfflineRun:
    """What one ``loadgen simulate`` was asked: the trace, where to write, the engine and
    the load, and the options recorded as the replay records its own."""

    trace_path: Path
    run_dir: Path
    engine: EngineConfig
    load: OfflineLoad
    time_scale: float | None = None
    rate: float | None = None
    max_requests: int | None = None
    run_id: str | None = None
    overwrite: bool = False


def derived_run_id(run: OfflineRun, trace_sha256: str) -> str:
    """``sim-`` and 12 hex digits of the inputs: the trace's content, the engine, the load
    and the request cap (not the paths), so a rerun gets the same id."""
    key = repr(
        (trace_sha256, sorted(asdict(run.engine).items()), run.load, run.max_requests)
    ).encode()
    return "sim-" + hashlib.sha256(key).hexdigest()[:12]


def prepare_run_dir(run_dir: Path, *, overwrite: bool) -> None:
    """Create ``run_dir``; refuse (``RunDirError``) a non-empty one unless ``overwrite``."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: exists and is not a directory")
    if run_dir.exists() and any(run_dir.iterdir()) and not overwrite:
        raise RunDirError(
            f"{run_dir}: run directory is not empty (choose another -o or pass --overwrite)"
        )
    if overwrite:
        for name in (s.REQUESTS_FILE, s.RUN_JSON, s.SERVER_METRICS_FILE):
            (run_dir / name).unlink(missing_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)


def run_info(run: OfflineRun, result: OfflineResult, *, run_id: str, trace_sha256: str) -> RunInfo:
    """``run.json`` of a simulated run (see the module doc)."""
    by_outcome: dict[str, int] = {}
    for record in result.records:
        by_outcome[record.outcome] = by_outcome.get(record.outcome, 0) + 1
    n = len(result.records)
    zero = LagSummary(samples=n, p50_ms=0.0, p99_ms=0.0, max_ms=0.0)
    meta = read_metadata(run.trace_path)
    return RunInfo(
        run_id=run_id,
        generator=GeneratorInfo(name=SIMULATED_GENERATOR, version=__version__),
        config=RunConfig(
            trace_path=str(run.trace_path),
            run_dir=str(run.run_dir),
            base_url=OFFLINE_URL,
            model=DEFAULT_MODEL_NAME,
            concurrency=run.load.concurrency,
            time_scale=run.time_scale,
            rate=run.rate,
            max_rate=None,
            max_inflight=None,
            max_requests=run.max_requests,
            duration_s=None,
            warmup_requests=0,
            request_timeout_s=0.0,
            grace_s=0.0,
            headers={},
            api_key_set=False,
            preflight=False,
            prompt_seed=0,
            overwrite=run.overwrite,
            run_id=run.run_id,
            transport="offline",
            workers=1,
            ray=None,
            tokenizer=None,
            calibrate_prompts=False,
            template_tokens=0,
            scrape_metrics=False,
            scrape_url=None,
            scrape_interval_s=0.0,
        ),
        endpoint=Endpoint(
            base_url=OFFLINE_URL,
            model=DEFAULT_MODEL_NAME,
            served_models=(DEFAULT_MODEL_NAME,),
            capabilities=Capabilities(),
        ),
        load=RunLoad(mode=run.load.mode, time_factor=run.load.time_factor, requests=n, workers=1),
        trace=TraceRef(path=str(run.trace_path), sha256=trace_sha256, metadata=meta),
        prompts=PromptsInfo(
            strategy=PromptStrategy(
                name="offline", block_size=int(meta.get("block_size", 512) or 512), seed=0
            ),
            calibration=None,
        ),
        clock=ClockAnchor(
            anchor_wall_ns=SIM_EPOCH_NS,
            anchor_mono_ns=0,
            source="virtual time of the offline engine (no clock was read)",
            assumption="simulated: every stamp is the engine's model time from the epoch",
        ),
        versions={"llm-loadgen": __version__, "python": platform.python_version()},
        status="completed",
        result=RunResult(
            dispatched=n,
            rows=n,
            start_ns=result.start_ns,
            end_ns=result.end_ns,
            duration_s=(result.end_ns - result.start_ns) / 1e9,
            by_outcome=by_outcome,
        ),
        health=GeneratorHealth(
            schedule_lag_ms=zero,
            loop_lag_ms=zero,
            cpu_utilisation=0.0,
            cpu_s=0.0,
            client_bound=False,
            warnings=(),
            workers=(),
        ),
        deployment=DeploymentInfo.of(
            engine_deployment(
                run.engine,
                max_model_len=load_catalog(run.engine.catalog).model(run.engine.model).max_context,
            ),
            source=OFFLINE_SOURCE,
        ),
    )


def write_run(run: OfflineRun, result: OfflineResult, *, run_id: str, trace_sha256: str) -> None:
    """Write ``requests.parquet`` and ``run.json`` into the (prepared) run directory."""
    write_run_records(run.run_dir, result.records, {"run_id": run_id, "shard": 0})
    write_run_info(run.run_dir, run_info(run, result, run_id=run_id, trace_sha256=trace_sha256))
