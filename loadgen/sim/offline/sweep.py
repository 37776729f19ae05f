"""Offline sweeps: one trace through the offline engine at several loads, written as a
sweep directory of the shape ``loadgen sweep`` writes (``sweep.json`` and one run
directory per step), so that ``analyzers.compare.sweep.analyze_sweep`` and
``loadgen sweep --analyze``/``compare`` read it unchanged.

Steps are added one at a time (``OfflineSweep.step``), in any load order: a caller that
bisects on the load adds the loads it probes. Every step's run directory is what
``loadgen simulate`` writes for that load; ``sweep.json`` is rewritten after each step and
holds nothing that depends on when or where it ran (``server_time_scale`` 1: the loads
and latencies are model time already).

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadgen.errors import ConfigError
from loadgen.sim.config import EngineConfig
from loadgen.sim.offline.engine import OfflineLoad, simulate
from loadgen.sim.offline.rundir import (
    OFFLINE_URL,
    OfflineRun,
    derived_run_id,
    prepare_run_dir,
    write_run,
)
from traces.io import file_sha256, read_metadata
from traces.records import TraceRequest
from traces.schema import SWEEP_JSON, SWEEP_KIND, SWEEP_VERSION


class OfflineSweep:
    """A sweep directory filled by the offline engine, one ``step`` per load."""

    def __init__(
        self,
        sweep_dir: Path,
        trace_path: Path,
        requests: Sequence[TraceRequest],
        engine: EngineConfig,
        *,
        labels: Mapping[str, str] | None = None,
        mean_rate_per_s: float | None = None,
    ) -> None:
        self.sweep_dir = sweep_dir
        self.trace_path = trace_path
        self.requests = list(requests)
        self.engine = engine
        self._sha = file_sha256(trace_path)
        self._block = int(read_metadata(trace_path).get("block_size", 512) or 512)
        prepare_run_dir(sweep_dir, overwrite=False)
        self._doc: dict[str, Any] = {
            "kind": SWEEP_KIND,
            "schema_version": SWEEP_VERSION,
            "trace": {
                "path": str(trace_path),
                "sha256": self._sha,
                "requests": len(self.requests),
                "mean_rate_per_s": mean_rate_per_s,
            },
            "base_url": OFFLINE_URL,
            "mode": "rate",
            "load_unit": "req/s",
            "cooldown_s": 0.0,
            "server_time_scale": 1.0,
            "simulated": True,
            "labels": dict(labels or {}),
            "steps": [],
            "status": "running",
        }
        self._write()

    @property
    def steps(self) -> int:
        """Steps written so far."""
        return len(self._doc["steps"])

    def step(self, load: OfflineLoad, *, offered: float, label: str | None = None) -> Path:
        """Simulate the trace under ``load`` (an open-loop load whose mean rate is
        ``offered`` req/s) into the next step's run directory; returns that directory."""
        if load.concurrency is not None:
            raise ConfigError("an offline sweep steps open-loop rates, not concurrencies")
        index = self.steps
        run_dir = self.sweep_dir / f"step-{index}"
        run = OfflineRun(
            trace_path=self.trace_path,
            run_dir=run_dir,
            engine=self.engine,
            load=load,
            rate=offered,
        )
        run_id = derived_run_id(run, self._sha)
        prepare_run_dir(run_dir, overwrite=False)
        result = simulate(self.requests, self.engine, load, run_id=run_id, trace_block=self._block)
        write_run(run, result, run_id=run_id, trace_sha256=self._sha)
        self._doc["steps"].append(
            {
                "index": index,
                "dir": run_dir.name,
                "label": label or f"{offered:g}/s",
                "offered": offered,
                "multiple": None,
                "rate_per_s": offered,
                "concurrency": None,
                "run_id": run_id,
                "status": "completed",
                "stopped_here": None,
            }
        )
        self._write()
        return run_dir

    def close(self) -> None:
        """Mark the sweep completed."""
        self._doc["status"] = "completed"
        self._write()

    def _write(self) -> None:
        text = json.dumps(self._doc, indent=2, sort_keys=True) + "\n"
        (self.sweep_dir / SWEEP_JSON).write_text(text)
