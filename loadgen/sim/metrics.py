"""The simulator's Prometheus metrics, named like vLLM's, in a registry owned by one app.

No metric touches prometheus_client's global registry, so several apps can live in one
process (tests) without clashing. Must not import the replay client
(loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from loadgen.sim.engine import Engine

# vLLM's buckets for vllm:time_to_first_token_seconds and vllm:e2e_request_latency_seconds.
_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
_E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip

CONTENT_TYPE = CONTENT_TYPE_LATEST


class SimMetrics:
    """Counters, gauges and histograms of one simulator app, labelled by ``model_name``."""

    def __init__(self, engine: Engine, *, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["model_name"]
        reg = self.registry
        running = Gauge(
            "vllm:num_requests_running", "Requests in model execution batches.", labels,
            registry=reg,
        )  # fmt: skip
        waiting = Gauge(
            "vllm:num_requests_waiting", "Requests waiting to be processed.", labels, registry=reg
        )
        # Read the engine's own counts at scrape time: no bookkeeping to drift.
        running.labels(model_name).set_function(lambda: engine.load().running)
        waiting.labels(model_name).set_function(lambda: engine.load().waiting)
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Time to first token, in seconds.", labels,
            buckets=_TTFT_BUCKETS, registry=reg,
        ).labels(model_name)  # fmt: skip
        self._e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "End-to-end request latency, in seconds.", labels,
            buckets=_E2E_BUCKETS, registry=reg,
        ).labels(model_name)  # fmt: skip
        self._prompt = Counter(
            "vllm:prompt_tokens", "Prefill tokens processed.", labels, registry=reg
        ).labels(model_name)
        self._generation = Counter(
            "vllm:generation_tokens", "Generation tokens processed.", labels, registry=reg
        ).labels(model_name)
        self._success = Counter(
            "vllm:request_success", "Successfully processed requests.",
            [*labels, "finished_reason"], registry=reg,
        ).labels(model_name, "length")  # fmt: skip
        self._faults = Counter(
            "sim:faults", "Faults injected by the simulator, by kind.", [*labels, "kind"],
            registry=reg,
        )  # fmt: skip
        self._model = model_name

    def first_token(self, ttft_s: float) -> None:
        """Observe one request's time to first token, in seconds."""
        self._ttft.observe(ttft_s)

    def prompt_tokens(self, n: int) -> None:
        """Count prompt tokens of an admitted request."""
        self._prompt.inc(n)

    def generated(self, n: int) -> None:
        """Count generated tokens actually emitted."""
        self._generation.inc(n)

    def finished(self, e2e_s: float) -> None:
        """Count one completed request and observe its end-to-end latency, in seconds."""
        self._success.inc()
        self._e2e.observe(e2e_s)

    def fault(self, kind: str) -> None:
        """Count one injected fault of ``kind`` (rate_limited, error, drop, stall)."""
        self._faults.labels(self._model, kind).inc()

    def exposition(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry)
