"""``loadgen demo --engine vllm``: the demo's endpoint is a real vLLM server on the CPU.

Builds the tiny model once (:mod:`loadgen.engines.tinymodel`, cached), starts vLLM's
OpenAI server on it pinned to the last CPU (:mod:`loadgen.engines.launch`) and keeps this
process, the load generator, off that CPU where there is another: a server and a client
sharing a small machine's cores stall each other for seconds. The environment (the cache
directory) is read here, in the composition root.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

from loadgen.cli.demo.harness import DemoEndpoint
from loadgen.errors import ConfigError


def check_vllm() -> None:
    """Raise ConfigError (one line, exit 2) unless the ``vllm`` extra is installed."""
    from loadgen.engines.launch import vllm_missing

    missing = vllm_missing()
    if missing is not None:
        raise ConfigError(f"--engine vllm: {missing}")


@contextmanager
def vllm_endpoint(console: Console) -> Iterator[DemoEndpoint]:
    """vLLM serving the tiny model until the block exits (this process kept off its CPU)."""
    from loadgen.engines.launch import VllmOptions, start_vllm
    from loadgen.engines.tinymodel import default_cache_root, ensure_model

    model = ensure_model(default_cache_root(dict(os.environ)) / "tiny-llama-hf")
    cpus = os.sched_getaffinity(0)
    server_cpu = max(cpus)
    console.print(f"starting vLLM on CPU {server_cpu} with {model.directory} (about a minute)")
    with start_vllm(model.directory, VllmOptions(cpu=server_cpu)) as server:
        if len(cpus) > 1:
            os.sched_setaffinity(0, cpus - {server_cpu})
        try:
            yield DemoEndpoint(
                base_url=server.base_url,
                tokenizer=model.tokenizer_json,
                label=(
                    f"vLLM: {server.base_url} (pid {server.pid}, CPU {server.cpu}, "
                    f"healthy in {server.start_s:.0f} s)"
                ),
            )
        finally:
            os.sched_setaffinity(0, cpus)
