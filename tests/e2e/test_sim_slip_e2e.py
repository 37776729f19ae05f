"""The simulator reports its own lateness (``slip_ms``): a simulator process frozen mid-run
(SIGSTOP, then SIGCONT) wrote its chunks late and says by how much; one left alone says
next to nothing. The client's adapter carries the number into the row's
``server_slip_ms``, and the analyzers turn a large one into the ``sim_slip`` flag."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.openai.timings import parse_timings
from loadgen.sim.launch import SimProcess

pytestmark = pytest.mark.serial  # times a real server or process: run alone

SimFactory = Callable[..., SimProcess]

FREEZE_S = 0.3


def _metrics_of_stream(client: httpx.Client, server: SimProcess, rid: str) -> dict[str, Any]:
    """Stream one chat completion with usage; the simulator's ``metrics`` object."""
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "one two three four"}],
        "max_tokens": 10,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    last: dict[str, Any] = {}
    with client.stream(
        "POST", f"{server.base_url}/chat/completions", json=body, headers={"X-Request-Id": rid}
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                event = orjson.loads(line[len("data: ") :])
                if "metrics" in event:
                    last = event
    assert "metrics" in last
    timings = parse_timings(last)
    assert timings is not None
    assert timings.slip_ms == last["metrics"]["slip_ms"]  # the adapter carries it to the row
    metrics: dict[str, Any] = last["metrics"]
    return metrics


def test_a_frozen_simulator_reports_its_slip(sim: SimFactory) -> None:
    server = sim("--ttft-ms", "50", "--itl-ms", "20")
    with httpx.Client(timeout=10.0) as client:
        calm = _metrics_of_stream(client, server, "calm")

        def freeze() -> None:
            time.sleep(0.1)  # inside the stream: its first token is out, more are planned
            os.kill(server.pid, signal.SIGSTOP)
            try:
                time.sleep(FREEZE_S)
            finally:
                os.kill(server.pid, signal.SIGCONT)

        freezer = threading.Thread(target=freeze)
        freezer.start()
        try:
            frozen = _metrics_of_stream(client, server, "frozen")
        finally:
            freezer.join()
        exposition = client.get(f"{server.root_url}/metrics").text
    # Left alone, a chunk goes out within a wake-up of its plan (well under a millisecond
    # idle, milliseconds on a busy machine; the bound leaves room for a loaded 2-core box).
    assert 0.0 <= calm["slip_ms"] < 100.0, calm
    # Frozen for 300 ms mid-stream: the chunks planned meanwhile went out that much late.
    assert frozen["slip_ms"] >= FREEZE_S * 1000 * 0.7, frozen
    assert frozen["slip_ms"] - calm["slip_ms"] >= FREEZE_S * 1000 * 0.5, (calm, frozen)
    slips = {
        sample.name: sample.value
        for family in text_string_to_metric_families(exposition)
        if family.name == "sim:slip_seconds"
        for sample in family.samples
    }
    assert slips["sim:slip_seconds_count"] == 2
    assert slips["sim:slip_seconds_sum"] >= FREEZE_S * 0.7
