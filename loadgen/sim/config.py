"""The simulator's configuration: one frozen value, validated once at construction.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadgen.errors import ConfigError

DEFAULT_PORT = 8000
DEFAULT_MODEL_NAME = "sim-model"


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    """Everything that shapes the simulator's behaviour; every duration carries its unit.

    Timing of one request (independent of load in v0): the first content chunk is written
    ``ttft_ms + prefill_us_per_token * prompt_tokens / 1000`` ms after the request body was
    fully received, then one content chunk every ``itl_ms * tokens_per_chunk`` ms.

    Faults are drawn per request from ``(seed, X-Request-Id)``, each with its own rate:
    ``rate_429`` answers 429, ``error_rate`` answers 500, ``drop_rate`` drops the connection
    after half of ``max_tokens`` tokens, ``stall_rate`` pauses the stream ``stall_ms`` mid-way.
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

    def __post_init__(self) -> None:
        _check(0 <= self.port <= 65535, "port", self.port, "must be in 0..65535")
        _check(bool(self.served_model_name), "served_model_name", "", "must not be empty")
        for name in ("ttft_ms", "prefill_us_per_token", "itl_ms", "stall_ms"):
            value = getattr(self, name)
            _check(math.isfinite(value) and value >= 0, name, value, "must be a finite number >= 0")
        for name in ("error_rate", "rate_429", "drop_rate", "stall_rate"):
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


def _check(ok: bool, name: str, value: object, why: str) -> None:
    if not ok:
        raise ConfigError(f"simulator option {name}={value!r} {why}")
