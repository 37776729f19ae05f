"""Start vLLM's OpenAI server on the CPU (the ``vllm`` extra), wait until it serves, stop it.

Used by ``loadgen demo --engine vllm`` and by the test suite's real-server fixture::

    model = ensure_model(cache_root)                     # loadgen.engines.tinymodel
    with start_vllm(model.directory, VllmOptions(max_num_seqs=2)) as server:
        ...  # server.base_url ends in /v1

The server runs as ``python -m loadgen.engines.serve`` (a subprocess in a session of its
own, pinned to one CPU, on a free loopback port) and prints READY once ``/health``
answers (:func:`loadgen.sim.launch.start_ready`, the simulator's protocol). It imports
nothing of vLLM itself: :func:`vllm_missing` says in one line what to install when the
extra is not there. Must not import the replay client.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import ConfigError
from loadgen.sim.launch import start_ready

_REQUIRED = ("vllm", "safetensors", "numpy", "tokenizers")
READY_TIMEOUT_S = 300.0
"""vLLM is healthy in about 40-60 s on one free core (it imports torch and spawns its
engine core); a loaded 2-core machine takes longer."""
_STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmOptions:
    """vLLM's server flags that this tool sets: the served name, the context limit, the
    batch limit (``--max-num-seqs``; None: vLLM's default), the weights' ``dtype`` (the
    tiny model's own float32: vLLM's CPU default, bfloat16, falls back from oneDNN to
    slow kernels on CPUs without AVX-512 BF16, 2-3x slower on an AVX2-only EPYC), the KV
    cache in GiB (``VLLM_CPU_KVCACHE_SPACE``), the one CPU (None: the last this process
    may use), and ``extra`` flags passed as they are. Per-request metrics, prompt-token details and
    prefix caching are always on: they are what the harness joins and checks."""

    served_model_name: str = "tiny-llama"
    max_model_len: int = 2048
    max_num_seqs: int | None = None
    dtype: str = "float32"
    kv_cache_gib: int = 1
    cpu: int | None = None
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_model_len < 1:
            raise ConfigError(f"vLLM max_model_len must be >= 1, got {self.max_model_len}")
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise ConfigError(f"vLLM max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.kv_cache_gib < 1:
            raise ConfigError(f"vLLM kv_cache_gib must be >= 1, got {self.kv_cache_gib}")


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmServer:
    """A running vLLM server: ``base_url`` ends in ``/v1``; ``root_url`` has ``/health``,
    ``/metrics`` and ``/tokenize``. ``cpu`` is the one CPU it runs on; ``start_s`` the
    seconds from launch to healthy."""

    base_url: str
    root_url: str
    pid: int
    cpu: int
    model_id: str
    max_num_seqs: int | None
    start_s: float


def vllm_missing() -> str | None:
    """None when the ``vllm`` extra is installed; else one line naming what is missing and
    the install command."""
    missing = [m for m in _REQUIRED if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return (
        f"the vLLM engine needs the vllm extra ({', '.join(missing)} not installed): "
        "pip install 'llm-loadgen[vllm]' (vLLM's CPU build, about 3 GB; docs/endpoints.md)"
    )


def server_args(model_dir: Path, options: VllmOptions) -> list[str]:
    """vLLM's own server flags for ``model_dir`` under ``options``."""
    args = [
        "--model", str(model_dir),
        "--served-model-name", options.served_model_name,
        "--host", "127.0.0.1",
        "--port", "0",
        "--max-model-len", str(options.max_model_len),
        "--dtype", options.dtype,
        # No graph capture: healthy in about 40 s instead of 60-80 on one core.
        "--enforce-eager",
        "--enable-prefix-caching",
        "--enable-per-request-metrics",
        "--enable-prompt-tokens-details",
        "--disable-uvicorn-access-log",
    ]  # fmt: skip
    if options.max_num_seqs is not None:
        args += ["--max-num-seqs", str(options.max_num_seqs)]
    return [*args, *options.extra]


@contextmanager
def start_vllm(
    model_dir: Path,
    options: VllmOptions | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    timeout_s: float = READY_TIMEOUT_S,
) -> Iterator[VllmServer]:
    """Run vLLM's OpenAI server on ``model_dir`` until the block exits.

    Raises ConfigError (one line) without the ``vllm`` extra, EndpointError with the tail
    of the server's stderr if it is not healthy within ``timeout_s``. ``environ`` is the
    server's environment (default: this process's), to which the CPU KV cache size and
    the offline switches are added.
    """
    missing = vllm_missing()
    if missing is not None:
        raise ConfigError(missing)
    options = options or VllmOptions()
    cpu = options.cpu if options.cpu is not None else max(os.sched_getaffinity(0))
    command = [
        sys.executable, "-m", "loadgen.engines.serve", "--cpu", str(cpu), "--",
        *server_args(model_dir, options),
    ]  # fmt: skip
    env = dict(os.environ if environ is None else environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE=str(options.kv_cache_gib),
        VLLM_NO_USAGE_STATS="1",
        HF_HUB_OFFLINE="1",
    )
    started = time.monotonic()
    with start_ready(
        command,
        what="vLLM",
        timeout_s=timeout_s,
        env=env,
        own_session=True,
        stop_timeout_s=_STOP_TIMEOUT_S,
    ) as ready:
        yield VllmServer(
            base_url=f"{ready.root_url}/v1",
            root_url=ready.root_url,
            pid=ready.pid,
            cpu=cpu,
            model_id=options.served_model_name,
            max_num_seqs=options.max_num_seqs,
            start_s=time.monotonic() - started,
        )
