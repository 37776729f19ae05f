"""Server-reported per-request timings, one adapter per server family (sans-IO).

The simulator's ``metrics`` (its ground truth), vLLM's per-request ``metrics``, llama.cpp's
``timings`` (all read from a decoded chunk by ``parse_timings``), and TGI's ``x-*-time``
headers (``timings_from_headers``). Every value is in milliseconds; unknown or malformed
fields are ignored, never an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerTimings:
    """Per-request timings a server reports about itself, in milliseconds."""

    queue_ms: float | None = None
    prefill_ms: float | None = None
    transfer_ms: float | None = None
    first_token_ms: float | None = None
    ttft_ms: float | None = None
    decode_ms: float | None = None
    instance: str | None = None
    slip_ms: float | None = None
    """The server's own lateness against its plan (the simulator's ``slip_ms``): wall ms."""
    inference_ms: float | None = None
    """Prefill and decode together, where a server reports only their sum (TGI)."""
    decode_wait_ms: float | None = None
    """Disaggregated: the KV's arrival to the decode instance's first step with it."""


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


_VLLM_METRICS_KEYS = ("queue_time_ms", "time_to_first_token_ms", "generation_time_ms")


def _sim_timings(metrics: dict[str, Any]) -> ServerTimings:
    """The simulator's ground truth (``loadgen.sim``): every term of the split, in ms."""
    instance = metrics.get("instance")
    return ServerTimings(
        queue_ms=_float(metrics.get("queue_ms")),
        prefill_ms=_float(metrics.get("prefill_ms")),
        transfer_ms=_float(metrics.get("transfer_ms")),
        first_token_ms=_float(metrics.get("first_token_ms")),
        ttft_ms=_float(metrics.get("ttft_ms")),
        decode_ms=_float(metrics.get("decode_ms")),
        instance=str(instance) if instance is not None else None,
        slip_ms=_float(metrics.get("slip_ms")),
        decode_wait_ms=_float(metrics.get("decode_wait_ms")),
    )


def _vllm_timings(metrics: dict[str, Any]) -> ServerTimings | None:
    """vLLM's per-request ``metrics`` (``--enable-per-request-metrics``, vLLM PR #46768),
    on the final usage chunk of a stream. vLLM computes, from engine-core timestamps:
    ``queue_time_ms`` = scheduled - queued, ``time_to_first_token_ms`` = first token -
    scheduled (so it excludes the queue: the prefill forward passes, which also sample the
    first token), ``generation_time_ms`` = last token - first token. Hence prefill is
    ``time_to_first_token_ms``, the first token costs no separate step, and the server-side
    TTFT is queue + prefill. Fields vLLM could not compute are absent (or null)."""
    queue = _float(metrics.get("queue_time_ms"))
    prefill = _float(metrics.get("time_to_first_token_ms"))
    decode = _float(metrics.get("generation_time_ms"))
    if queue is None and prefill is None and decode is None:
        return None
    return ServerTimings(
        queue_ms=queue,
        prefill_ms=prefill,
        first_token_ms=0.0 if prefill is not None else None,
        ttft_ms=queue + prefill if queue is not None and prefill is not None else None,
        decode_ms=decode,
    )


def _llamacpp_timings(timings: dict[str, Any]) -> ServerTimings:
    """llama.cpp's ``timings`` (llama-server, on the last chunk and non-stream bodies):
    ``prompt_ms`` is the processing of the ``prompt_n`` uncached prompt tokens (``cache_n``
    were reused), measured from the start of prompt processing to the sampling of the
    first token, so it includes the first token and excludes the wait for a free slot;
    ``predicted_ms`` runs from the first to the last generated token. llama.cpp reports no
    queue time: the decomposition infers it as the remainder."""
    prefill = _float(timings.get("prompt_ms"))
    return ServerTimings(
        prefill_ms=prefill,
        first_token_ms=0.0 if prefill is not None else None,
        decode_ms=_float(timings.get("predicted_ms")),
    )


def parse_timings(obj: dict[str, Any]) -> ServerTimings | None:
    """Server timings carried in a decoded chunk or body, whichever server sent them: the
    simulator's ``metrics`` (has ``prefill_ms``), vLLM's per-request ``metrics`` or
    llama.cpp's ``timings``. None when the chunk carries none; unknown or malformed
    fields are ignored, never an error."""
    metrics = obj.get("metrics")
    if isinstance(metrics, dict):
        if "prefill_ms" in metrics:
            return _sim_timings(metrics)
        if any(key in metrics for key in _VLLM_METRICS_KEYS):
            return _vllm_timings(metrics)
    timings = obj.get("timings")
    if isinstance(timings, dict) and "prompt_ms" in timings:
        return _llamacpp_timings(timings)
    return None


def _header_ms(headers: Mapping[str, str], name: str) -> float | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def timings_from_headers(headers: Mapping[str, str]) -> ServerTimings | None:
    """Server timings from response headers: Hugging Face TGI's, which it sets on
    non-streamed replies only (a stream's headers leave before the work is done), so a
    streamed run never has them: replay with ``--no-stream`` to join them. TGI
    (``router/src/server.rs``, ``generate_internal``) sends, in whole milliseconds,
    ``x-queue-time`` (from validation to the start of the batch), ``x-inference-time``
    (in the batch: prefill and decode together), ``x-time-per-token`` (inference time /
    generated tokens), ``x-validation-time`` and ``x-total-time``; ``x-compute-time`` is
    the total in seconds; ``x-prompt-tokens`` and ``x-generated-tokens`` are counts (the
    body's ``usage`` carries them too). The queue maps onto ``queue_ms``, the inference
    time onto ``inference_ms``: TGI does not split prefill from decode. None without
    ``x-queue-time``. ``headers`` must look names up case-insensitively
    (``httpx.Headers``) or be lower-case.
    """
    queue = _header_ms(headers, "x-queue-time")
    if queue is None:
        return None
    return ServerTimings(queue_ms=queue, inference_ms=_header_ms(headers, "x-inference-time"))
