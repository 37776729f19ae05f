"""The simulator's Prometheus metrics, named like vLLM's, in a registry owned by one app.

Names, types, labels and buckets follow vLLM's v1 ``PrometheusStatLogger``
(``vllm/v1/metrics/loggers.py``; tests/realserver/test_vllm.py diffs them against a real
vLLM 0.32 server): every series is labelled ``model_name`` and ``engine`` (the instance). Per
instance, the gauges ``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` and the counters
``vllm:prefix_cache_queries``/``vllm:prefix_cache_hits`` (tokens) and
``vllm:num_preemptions``, read from the engine at scrape time; per request the histograms
``vllm:time_to_first_token_seconds``, ``vllm:e2e_request_latency_seconds``,
``vllm:request_queue_time_seconds``, ``vllm:request_prefill_time_seconds``,
``vllm:request_decode_time_seconds``, ``vllm:request_inference_time_seconds``, all in
model time, and the counters ``vllm:prompt_tokens``, ``vllm:generation_tokens`` and
``vllm:request_success``, each on the instance that served the request (prompt tokens on
the one that prefilled it, once the first token is out). No metric touches
prometheus_client's global registry, so several apps can live in one process (tests)
without clashing. Must not import the replay client
(loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from loadgen.sim.engine import Engine, GroundTruth

# vLLM's buckets for vllm:time_to_first_token_seconds and vllm:e2e_request_latency_seconds.
_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
_E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip

# vLLM's buckets for the request phase histograms (queue, prefill, decode, inference).
_PHASE_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip

# The simulator's lateness: under a millisecond when it keeps up, to seconds when it does not.
_SLIP_BUCKETS = (
    0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip

CONTENT_TYPE = CONTENT_TYPE_LATEST


class _EngineCollector(Collector):
    """Per-instance gauges and counters read from the engine at scrape time."""

    def __init__(self, engine: Engine, model_name: str) -> None:
        self._engine = engine
        self._model = model_name

    def collect(self) -> Iterator[Metric]:
        labels = ["model_name", "engine"]
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Number of requests in model execution batches.",
            labels=labels,
        )  # fmt: skip
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
            labels=labels,
        )  # fmt: skip
        kv = GaugeMetricFamily(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
            labels=labels,
        )  # fmt: skip
        queries = CounterMetricFamily(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.", labels=labels,
        )  # fmt: skip
        hits = CounterMetricFamily(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            labels=labels,
        )  # fmt: skip
        preempt = CounterMetricFamily(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.",
            labels=labels,
        )  # fmt: skip
        for stat in self._engine.stats():
            values = [self._model, stat.name]
            running.add_metric(values, stat.running)
            waiting.add_metric(values, stat.waiting)
            kv.add_metric(values, stat.kv_usage)
            queries.add_metric(values, stat.prefix_queries)
            hits.add_metric(values, stat.prefix_hits)
            preempt.add_metric(values, stat.preemptions)
        yield from (running, waiting, kv, queries, hits, preempt)


class SimMetrics:
    """Counters, gauges and histograms of one simulator app, labelled by ``model_name``."""

    def __init__(self, engine: Engine, *, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["model_name", "engine"]
        reg = self.registry
        reg.register(_EngineCollector(engine, model_name))
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Time to first token, in seconds.", labels,
            buckets=_TTFT_BUCKETS, registry=reg,
        )  # fmt: skip
        self._e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "End-to-end request latency, in seconds.", labels,
            buckets=_E2E_BUCKETS, registry=reg,
        )  # fmt: skip
        self._prompt = Counter(
            "vllm:prompt_tokens", "Prefill tokens processed.", labels, registry=reg
        )
        self._generation = Counter(
            "vllm:generation_tokens", "Generation tokens processed.", labels, registry=reg
        )
        self._success = Counter(
            "vllm:request_success", "Successfully processed requests.",
            [*labels, "finished_reason"], registry=reg,
        )  # fmt: skip
        self._phases = {
            name: Histogram(
                f"vllm:request_{name}_time_seconds", f"Histogram of time spent in {doc}.",
                labels, buckets=_PHASE_BUCKETS, registry=reg,
            )
            for name, doc in (
                ("queue", "WAITING phase for request"),
                ("prefill", "PREFILL phase for request"),
                ("decode", "DECODE phase for request"),
                ("inference", "RUNNING phase for request"),
            )
        }  # fmt: skip
        self._slip = Histogram(
            "sim:slip_seconds",
            "The simulator's own lateness per request: its worst chunk's write after plan "
            "(wall seconds).",
            ["model_name"], buckets=_SLIP_BUCKETS, registry=reg,
        ).labels(model_name)  # fmt: skip
        self._faults = Counter(
            "sim:faults", "Faults injected by the simulator, by kind.", ["model_name", "kind"],
            registry=reg,
        )  # fmt: skip
        self._received = Counter(
            "sim:requests_received",
            "Generation requests whose head arrived, counted before anything else is read "
            "or checked (what a client's crash accounting is compared with).",
            ["model_name"], registry=reg,
        ).labels(model_name)  # fmt: skip
        self._model = model_name

    def received(self) -> None:
        """Count one generation request whose head arrived."""
        self._received.inc()

    def first_token(self, ttft_s: float, *, engine: str) -> None:
        """Observe one request's time to first token, in seconds, on instance ``engine``."""
        self._ttft.labels(self._model, engine).observe(ttft_s)

    def request_phases(self, truth: GroundTruth) -> None:
        """Observe one request's queue, prefill, decode and inference times (model s), on
        the instance that served it."""
        phases, at = self._phases, (self._model, truth.instance)
        phases["queue"].labels(*at).observe(truth.queue_ms / 1e3)
        phases["prefill"].labels(*at).observe(truth.prefill_ms / 1e3)
        phases["decode"].labels(*at).observe(truth.decode_ms / 1e3)
        inference_ms = truth.ttft_ms - truth.queue_ms + truth.decode_ms
        phases["inference"].labels(*at).observe(inference_ms / 1e3)

    def slip(self, slip_s: float) -> None:
        """Observe one request's slip: how late its chunks went out against plan (wall s)."""
        self._slip.observe(max(0.0, slip_s))

    def prompt_tokens(self, n: int, *, engine: str) -> None:
        """Count the prompt tokens of a request prefilled on instance ``engine``."""
        self._prompt.labels(self._model, engine).inc(n)

    def generated(self, n: int, *, engine: str) -> None:
        """Count generated tokens actually emitted by instance ``engine``."""
        self._generation.labels(self._model, engine).inc(n)

    def finished(self, e2e_s: float, *, engine: str) -> None:
        """Count one completed request and observe its end-to-end latency, in seconds."""
        self._success.labels(self._model, engine, "length").inc()
        self._e2e.labels(self._model, engine).observe(e2e_s)

    def fault(self, kind: str) -> None:
        """Count one injected fault of ``kind`` (rate_limited, error, drop, stall, ...)."""
        self._faults.labels(self._model, kind).inc()

    def exposition(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry)
