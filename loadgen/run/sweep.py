"""Sweeps: replay one trace at successively higher load into one sweep directory.

Layout::

    SWEEP/sweep.json      what was swept: trace (path, sha256, mean rate), mode, steps
    SWEEP/step-0/ ...     one ordinary run directory per step (requests.parquet, run.json)

Loads are given as ``0.5x,1x,2x`` (multiples of the trace's own rate: the gaps are
rescaled, the burstiness kept), ``2,4,8`` (absolute mean rates, req/s) or, closed loop,
concurrencies. Steps run in order with a cool-down between them; ``stop_after(step_dir)``
(e.g. an SLO check from the CLI) ends the sweep after a step. ``sweep.json`` is rewritten
after every step, so an interrupted sweep keeps its finished steps. The analysis of a
sweep lives in ``analyzers.compare.sweep``; this module imports traces (and loadgen) only.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Literal

from loadgen.errors import ConfigError, RunDirError
from loadgen.redact import redact_url
from loadgen.run.session import SessionOptions, SessionResult, run_session
from loadgen.schedule import mean_rate
from traces.io import file_sha256, read_trace
from traces.schema import SWEEP_JSON, SWEEP_KIND, SWEEP_VERSION

Mode = Literal["scale", "rate", "concurrency"]
_MULTIPLE: Final = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*[xX]\s*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadStep:
    """One step's load: a multiple of the trace's rate, an absolute rate, or a concurrency."""

    label: str
    multiple: float | None = None
    rate: float | None = None
    concurrency: int | None = None


def parse_rates(text: str) -> tuple[LoadStep, ...]:
    """``0.5x,1x,2x`` (multiples) or ``2,4,8`` (req/s); not both kinds in one list."""
    steps: list[LoadStep] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        match = _MULTIPLE.match(item)
        if match is not None:
            value = float(match[1])
            if value <= 0:
                raise ConfigError(f"--rates: {item!r} must be positive")
            steps.append(LoadStep(label=f"{value:g}x", multiple=value))
            continue
        try:
            value = float(item)
        except ValueError:
            raise ConfigError(f"--rates: {item!r} is neither a multiple (2x) nor req/s") from None
        if value <= 0:
            raise ConfigError(f"--rates: {item!r} must be positive")
        steps.append(LoadStep(label=f"{value:g}/s", rate=value))
    if not steps:
        raise ConfigError("--rates: no load given")
    if len({s.multiple is None for s in steps}) > 1:
        raise ConfigError("--rates: give either multiples (0.5x,1x) or rates (2,4), not both")
    return tuple(steps)


def parse_concurrency(text: str) -> tuple[LoadStep, ...]:
    """``1,4,16,64``: closed-loop concurrencies."""
    steps = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        try:
            value = int(item)
        except ValueError:
            raise ConfigError(f"--concurrency: {item!r} is not an integer") from None
        if value < 1:
            raise ConfigError(f"--concurrency: {item!r} must be at least 1")
        steps.append(LoadStep(label=f"c={value}", concurrency=value))
    if not steps:
        raise ConfigError("--concurrency: no load given")
    return tuple(steps)


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepOptions:
    """A sweep: the steps, the cool-down, and the session every step starts from.

    ``session.run_dir`` is the sweep directory; each step's run goes to ``step-N``.
    ``server_time_scale`` is recorded for the analysis (a simulator's ``--clock-scale``);
    None records none, and the analysis takes the time scale each step's ``run.json``
    deployment recorded (the simulator publishes its own), else 1.
    """

    session: SessionOptions
    steps: tuple[LoadStep, ...]
    cooldown_s: float = 5.0
    server_time_scale: float | None = None
    labels: dict[str, str] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepOutcome:
    """One finished step."""

    index: int
    step: LoadStep
    run_dir: Path
    offered: float
    result: SessionResult
    stopped_here: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepResult:
    """Where the sweep went and how it ended (``completed``, ``stop condition``, ...)."""

    sweep_dir: Path
    steps: tuple[StepOutcome, ...]
    stop_reason: str


def _mode(steps: Sequence[LoadStep]) -> Mode:
    first = steps[0]
    if first.concurrency is not None:
        return "concurrency"
    return "scale" if first.multiple is not None else "rate"


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _step_session(base: SessionOptions, step: LoadStep, run_dir: Path) -> SessionOptions:
    if step.concurrency is not None:
        return replace(base, run_dir=run_dir, concurrency=step.concurrency, rate=None)
    if step.multiple is not None:
        return replace(base, run_dir=run_dir, time_scale=1 / step.multiple, rate=None)
    return replace(base, run_dir=run_dir, rate=step.rate, time_scale=None)


async def run_sweep(
    options: SweepOptions,
    *,
    stop_after: Callable[[Path], str | None] | None = None,
    on_step: Callable[[int, LoadStep, Path], None] | None = None,
    install_signal_handlers: bool = True,
) -> SweepResult:
    """Replay every step in order (see the module docstring). ``stop_after(step_dir)``
    returns a reason to stop after that step, or None to go on."""
    base = options.session
    if not options.steps:
        raise ConfigError("a sweep needs at least one load step")
    if base.concurrency is not None or base.rate is not None or base.time_scale is not None:
        raise ConfigError("give the sweep's loads as steps, not in the base session options")
    sweep_dir = base.run_dir
    if sweep_dir.exists() and any(sweep_dir.iterdir()) and not base.overwrite:
        raise RunDirError(f"{sweep_dir}: sweep directory is not empty (choose another -o)")
    sweep_dir.mkdir(parents=True, exist_ok=True)
    requests = read_trace(base.trace_path)
    if base.max_requests is not None:
        requests = requests[: base.max_requests]
    trace_rate = mean_rate([r.arrival_s for r in requests])
    mode = _mode(options.steps)
    if mode == "scale" and trace_rate is None:
        raise ConfigError("load multiples need a trace with at least two arrival times")
    doc: dict[str, Any] = {
        "kind": SWEEP_KIND,
        "schema_version": SWEEP_VERSION,
        "created_wall_s": time.time(),
        "trace": {
            "path": str(base.trace_path),
            "sha256": file_sha256(base.trace_path),
            "requests": len(requests),
            "mean_rate_per_s": trace_rate,
        },
        "base_url": redact_url(base.base_url),
        "mode": mode,
        "load_unit": "concurrency" if mode == "concurrency" else "req/s",
        "cooldown_s": options.cooldown_s,
        "server_time_scale": options.server_time_scale,
        "labels": dict(options.labels or {}),
        "steps": [],
        "status": "running",
    }
    _write_json(sweep_dir / SWEEP_JSON, doc)
    outcomes: list[StepOutcome] = []
    stop_reason = "completed"
    for index, step in enumerate(options.steps):
        if index and options.cooldown_s > 0:
            await asyncio.sleep(options.cooldown_s)
        run_dir = sweep_dir / f"step-{index}"
        if on_step is not None:
            on_step(index, step, run_dir)
        if step.concurrency is not None:
            offered = float(step.concurrency)
        elif step.multiple is not None:
            assert trace_rate is not None
            offered = trace_rate * step.multiple
        else:
            offered = float(step.rate or 0.0)
        result = await run_session(
            _step_session(base, step, run_dir), install_signal_handlers=install_signal_handlers
        )
        reason = stop_after(run_dir) if stop_after is not None else None
        if result.replay.stop_reason == "interrupted":
            reason = "interrupted"
        doc["steps"].append(
            {
                "index": index,
                "dir": run_dir.name,
                "label": step.label,
                "offered": offered,
                "multiple": step.multiple,
                "rate_per_s": step.rate,
                "concurrency": step.concurrency,
                "run_id": result.run_id,
                "status": result.replay.stop_reason,
                "stopped_here": reason,
            }
        )
        _write_json(sweep_dir / SWEEP_JSON, doc)
        outcomes.append(
            StepOutcome(
                index=index,
                step=step,
                run_dir=run_dir,
                offered=offered,
                result=result,
                stopped_here=reason is not None,
            )
        )
        if reason is not None:
            stop_reason = reason
            break
    doc["status"] = stop_reason
    _write_json(sweep_dir / SWEEP_JSON, doc)
    return SweepResult(sweep_dir=sweep_dir, steps=tuple(outcomes), stop_reason=stop_reason)
