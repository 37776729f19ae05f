"""The simulator's configuration: one frozen value, validated once at construction.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from loadgen.errors import ConfigError
from traces.deployment import Admission, DeploymentSpec, Efficiency, KvLink, Pool, Scheduler

DEFAULT_PORT = 8000
DEFAULT_MODEL_NAME = "sim-model"

Topology = Literal["monolith", "disagg"]
TOPOLOGIES: tuple[Topology, ...] = ("monolith", "disagg")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """The physics-driven engine: a catalog model on catalog GPUs, batched like vLLM.

    ``monolith``: ``replicas`` instances of ``gpus`` GPUs each behind ``router``.
    ``disagg``: ``prefill_instances`` of ``prefill_gpus`` GPUs and ``decode_instances`` of
    ``decode_gpus`` GPUs; each prefill instance ships KV caches over its own link of
    ``link_gbps`` Gbit/s plus ``link_latency_us``. ``time_scale`` multiplies every model
    duration to get wall time (10 runs the physics at a tenth of real speed); reported
    times are model times. ``kv_capacity_tokens`` overrides the budget model's KV capacity
    per instance. ``max_model_len`` is the context limit (prompt plus ``max_tokens``) beyond
    which a request is refused with vLLM's 400; None takes the catalog's ``max_context``.
    ``admission_ttft_ms`` turns admission control on: a request whose estimated time to
    first token plus ``admission_margin_ms`` exceeds it is refused on arrival with 429
    (:mod:`analyzers.budget.engine.admission`).
    """

    model: str
    gpu: str = "h100"
    gpus: int = 1
    topology: Topology = "monolith"
    replicas: int = 1
    router: str = "least-loaded"
    prefill_instances: int = 1
    prefill_gpus: int = 1
    decode_instances: int = 1
    decode_gpus: int = 1
    link_gbps: float = 400.0
    link_latency_us: float = 0.0
    max_num_seqs: int = 256
    max_batched_tokens: int = 2048
    kv_block_size: int = 16
    prefix_cache: bool = True
    preempt: bool = False
    time_scale: float = 1.0
    efficiency_prefill: float = 0.6
    efficiency_decode: float = 0.6
    step_overhead_us: float = 0.0
    memory_fraction: float = 0.9
    kv_capacity_tokens: int | None = None
    max_model_len: int | None = None  # None: the catalog model's max_context
    admission_ttft_ms: float | None = None  # admission control's TTFT budget (None: off)
    admission_margin_ms: float = 10.0  # the client's TTFT beyond the engine's estimate
    tokenizer: Path | None = None
    profile: Path | None = None  # calibration profile TOML (loadgen plan calibrate)
    catalog: Path | None = None  # a user catalog TOML adding or replacing models and GPUs

    def __post_init__(self) -> None:
        _check(bool(self.model), "model", self.model, "must not be empty")
        _check(self.topology in TOPOLOGIES, "topology", self.topology, "must be monolith|disagg")
        _check(
            self.router in ("round-robin", "least-loaded"),
            "router",
            self.router,
            "must be round-robin|least-loaded",
        )
        for name in (
            "gpus", "replicas", "prefill_instances", "prefill_gpus", "decode_instances",
            "decode_gpus", "max_num_seqs", "max_batched_tokens", "kv_block_size",
        ):  # fmt: skip
            _check(getattr(self, name) >= 1, name, getattr(self, name), "must be >= 1")
        for name in ("link_gbps", "time_scale"):
            value = getattr(self, name)
            _check(math.isfinite(value) and value > 0, name, value, "must be a number > 0")
        for name in ("link_latency_us", "step_overhead_us"):
            value = getattr(self, name)
            _check(math.isfinite(value) and value >= 0, name, value, "must be a number >= 0")
        for name in ("efficiency_prefill", "efficiency_decode", "memory_fraction"):
            value = getattr(self, name)
            _check(0 < value <= 1, name, value, "must be in (0, 1]")
        cap = self.kv_capacity_tokens
        _check(cap is None or cap >= 1, "kv_capacity_tokens", cap, "must be >= 1")
        ctx = self.max_model_len
        _check(ctx is None or ctx >= 1, "max_model_len", ctx, "must be >= 1")
        margin = self.admission_margin_ms
        _check(math.isfinite(margin) and margin >= 0, "admission_margin_ms", margin, "must be >= 0")
        budget = self.admission_ttft_ms
        _check(
            budget is None or (math.isfinite(budget) and budget > 0),
            "admission_ttft_ms",
            budget,
            "must be a number > 0",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    """Everything that shapes the simulator's behaviour; every duration carries its unit.

    Timing of one request (independent of load in v0): the first content chunk is written
    ``ttft_ms + prefill_us_per_token * prompt_tokens / 1000`` ms after the request body was
    fully received, then one content chunk every ``itl_ms * tokens_per_chunk`` ms.

    Faults are drawn per request from ``(seed, X-Request-Id)``, each with its own rate:
    ``rate_429`` answers 429, ``error_rate`` answers 500, ``drop_rate`` drops the connection
    after half of ``max_tokens`` tokens, ``stall_rate`` pauses the stream ``stall_ms`` mid-way,
    ``malformed_rate`` replaces one mid-stream chunk by invalid JSON, ``accept_delay_rate``
    holds a request ``accept_delay_ms`` before reading it (slow accept). For ``loading_s``
    seconds after start every generation request is answered 503 (model loading).

    With ``engine`` set, timing comes from the physics-driven engine (:class:`EngineConfig`)
    instead of ``ttft_ms``/``itl_ms``; ``image_tokens`` is then the count for images whose
    size cannot be read or for a text-only model.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    served_model_name: str = DEFAULT_MODEL_NAME
    ttft_ms: float = 20.0
    prefill_us_per_token: float = 0.0
    itl_ms: float = 10.0
    tokens_per_chunk: int = 1
    image_tokens: int = 0
    error_rate: float = 0.0
    rate_429: float = 0.0
    drop_rate: float = 0.0
    stall_rate: float = 0.0
    stall_ms: float = 500.0
    seed: int = 0
    instance: str = "r0"
    max_records: int = 100_000
    default_max_tokens: int = 16
    loading_s: float = 0.0
    malformed_rate: float = 0.0
    accept_delay_ms: float = 0.0
    accept_delay_rate: float = 1.0
    tgi_headers: bool = False
    """Non-streamed replies carry TGI's timing headers (``x-queue-time``,
    ``x-inference-time``, ...) instead of the body's ``metrics``, as TGI sends them."""
    frontend_ms: float = 0.0
    """With ``engine``: a front end on the engine's core, ms of model time a request (vLLM's
    API server beside a CPU-served engine: parsing, tokenizing). Requests pass it one at a
    time before the engine sees them, and the engine loses ``frontend_share`` of its time
    (its steps stop at 1). The reported queue starts at the engine, as vLLM's does; the
    front end shows only in the client's TTFT. 0: none (a GPU server's front end has cores
    of its own)."""
    frontend_share: float = 1.0
    """The share of the front end's time its engine loses (1: the engine stops while the
    front end works; 0.5: the engine runs at half speed then). A front end's latency
    alone (``frontend_ms``) is more than the core it takes from a busy engine: vLLM's CPU
    build lost about half of it (``loadgen plan calibrate`` measures it from prefills that
    other requests arrived during)."""
    engine: EngineConfig | None = None

    def __post_init__(self) -> None:
        _check(0 <= self.port <= 65535, "port", self.port, "must be in 0..65535")
        _check(bool(self.served_model_name), "served_model_name", "", "must not be empty")
        for name in (
            "ttft_ms", "prefill_us_per_token", "itl_ms", "stall_ms", "loading_s", "accept_delay_ms",
            "frontend_ms",
        ):  # fmt: skip
            value = getattr(self, name)
            _check(math.isfinite(value) and value >= 0, name, value, "must be a finite number >= 0")
        for name in (
            "error_rate", "rate_429", "drop_rate", "stall_rate", "malformed_rate",
            "accept_delay_rate", "frontend_share",
        ):  # fmt: skip
            value = getattr(self, name)
            _check(0.0 <= value <= 1.0, name, value, "must be a rate in [0, 1]")
        _check(
            self.tokens_per_chunk >= 1, "tokens_per_chunk", self.tokens_per_chunk, "must be >= 1"
        )
        _check(self.image_tokens >= 0, "image_tokens", self.image_tokens, "must be >= 0")
        _check(self.max_records >= 1, "max_records", self.max_records, "must be >= 1")
        _check(
            self.default_max_tokens >= 1,
            "default_max_tokens",
            self.default_max_tokens,
            "must be >= 1",
        )

    @property
    def time_scale(self) -> float:
        """Wall seconds per model second (1.0 for the fixed-delay engine)."""
        return self.engine.time_scale if self.engine is not None else 1.0

    @property
    def fixed_ttft_ns(self) -> int:
        """Fixed part of the time to first content chunk, in ns (prompt-independent)."""
        return round(self.ttft_ms * 1e6)

    def prefill_ns(self, prompt_tokens: int) -> int:
        """Prompt-proportional part of the time to first content chunk, in ns."""
        return round(self.prefill_us_per_token * prompt_tokens * 1e3)

    @property
    def chunk_interval_ns(self) -> int:
        """Time between two content chunks, in ns: ``itl_ms * tokens_per_chunk``."""
        return round(self.itl_ms * self.tokens_per_chunk * 1e6)


def engine_deployment(engine: EngineConfig, *, max_model_len: int | None = None) -> DeploymentSpec:
    """The engine's whole deployment in the ``deployment.toml`` layout (what the simulator
    publishes on its model card, so that a run records it); ``max_model_len`` is the limit
    in force when the engine's own is None (the catalog's)."""
    disagg = engine.topology == "disagg"
    return DeploymentSpec(
        max_model_len=engine.max_model_len or max_model_len,
        engine="sim",
        model=engine.model,
        gpu=engine.gpu,
        gpus=engine.gpus,
        tensor_parallel=engine.gpus,
        pipeline_parallel=1,
        replicas=None if disagg else engine.replicas,
        time_scale=engine.time_scale,
        topology=engine.topology,
        scheduler=Scheduler(
            max_batched_tokens=engine.max_batched_tokens,
            max_num_seqs=engine.max_num_seqs,
            block_size=engine.kv_block_size,
            prefix_caching=engine.prefix_cache,
            kv_capacity_tokens=engine.kv_capacity_tokens,
        ),
        efficiency=Efficiency(
            prefill=engine.efficiency_prefill,
            decode=engine.efficiency_decode,
            step_overhead_us=engine.step_overhead_us,
            memory_fraction=engine.memory_fraction,
        ),
        prefill=Pool(instances=engine.prefill_instances, gpus=engine.prefill_gpus)
        if disagg
        else Pool(),
        decode=Pool(instances=engine.decode_instances, gpus=engine.decode_gpus)
        if disagg
        else Pool(),
        kv_link=KvLink(gbps=engine.link_gbps, latency_us=engine.link_latency_us)
        if disagg
        else KvLink(),
        admission=Admission(
            ttft_ms=engine.admission_ttft_ms,
            margin_ms=engine.admission_margin_ms if engine.admission_ttft_ms else None,
        ),
    )


def engine_options(spec: DeploymentSpec) -> dict[str, object]:
    """``EngineConfig`` keyword arguments for what ``spec`` says (keys it leaves out keep
    the engine's defaults). The simulator runs tensor parallel only: a pipeline is refused.
    ``efficiency.profile`` is not read here (it needs the budget file reader)."""
    if (spec.pipeline_parallel or 1) > 1:
        raise ConfigError(
            f"{spec.where}: pipeline_parallel = {spec.pipeline_parallel}: the simulator "
            "models tensor parallelism only"
        )
    pairs: dict[str, object] = {
        "model": spec.model,
        "gpu": spec.gpu,
        "gpus": spec.gpus_per_replica,
        "topology": spec.topology,
        "replicas": spec.replicas,
        "prefill_instances": spec.prefill.instances,
        "prefill_gpus": spec.prefill.gpus,
        "decode_instances": spec.decode.instances,
        "decode_gpus": spec.decode.gpus,
        "link_gbps": spec.kv_link.gbps,
        "link_latency_us": spec.kv_link.latency_us,
        "max_num_seqs": spec.scheduler.max_num_seqs,
        "max_batched_tokens": spec.scheduler.max_batched_tokens,
        "kv_block_size": spec.scheduler.block_size,
        "prefix_cache": spec.scheduler.prefix_caching,
        "kv_capacity_tokens": spec.scheduler.kv_capacity_tokens,
        "max_model_len": spec.max_model_len,
        "admission_ttft_ms": spec.admission.ttft_ms,
        "admission_margin_ms": spec.admission.margin_ms,
        "time_scale": spec.time_scale,
        "efficiency_prefill": spec.efficiency.prefill,
        "efficiency_decode": spec.efficiency.decode,
        "step_overhead_us": spec.efficiency.step_overhead_us,
        "memory_fraction": spec.efficiency.memory_fraction,
    }
    return {k: v for k, v in pairs.items() if v is not None}


def _check(ok: bool, name: str, value: object, why: str) -> None:
    if not ok:
        raise ConfigError(f"simulator option {name}={value!r} {why}")
