"""Serve a GGUF model with llama.cpp's own HTTP server (the ``xllamacpp`` wheel) on loopback.

Run as a subprocess by the real-server fixture (like the simulator, it prints one line
``READY http://127.0.0.1:PORT`` once ``/health`` answers, then serves until SIGTERM or
SIGINT)::

    python tests/realserver/serve.py --model tiny-llama.gguf --port 0 --parallel 4

``--port 0`` picks a free port by binding to port 0 first. One compute thread by default:
on a small machine, more threads spin-wait on barriers and make timings erratic whenever
another process (the load generator) takes a core. The context is ``--ctx-per-slot``
tokens per slot. Needs only ``xllamacpp``; nothing of the project.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from typing import Any

_READY_TIMEOUT_S = 60.0


def free_port(host: str) -> int:
    """A port the kernel considers free right now (bind to 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", required=True, help="the GGUF file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: pick a free port")
    parser.add_argument("--parallel", type=int, default=4, help="slots (concurrent requests)")
    parser.add_argument("--ctx-per-slot", type=int, default=4096, help="KV cells per slot")
    parser.add_argument("--threads", type=int, default=1, help="compute threads")
    parser.add_argument("--batch", type=int, default=2048, help="logical batch (tokens)")
    parser.add_argument("--ubatch", type=int, default=512, help="physical batch (tokens)")
    parser.add_argument("--alias", default="tiny-llama", help="the served model id")
    parser.add_argument("--api-key", default=None, help="require this bearer key")
    parser.add_argument("--no-cache-prompt", action="store_true", help="no prefix reuse")
    parser.add_argument("--cache-ram-mib", type=int, default=256, help="host prompt cache")
    return parser.parse_args(argv)


def make_params(args: argparse.Namespace, port: int) -> Any:
    """llama.cpp's ``common_params`` for the server."""
    import xllamacpp  # type: ignore[import-untyped]

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = port
    params.n_parallel = args.parallel
    params.n_ctx = args.parallel * args.ctx_per_slot
    params.n_batch = args.batch
    params.n_ubatch = args.ubatch
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.cont_batching = True
    params.cache_prompt = not args.no_cache_prompt
    params.cache_ram_mib = args.cache_ram_mib
    params.endpoint_metrics = True
    params.endpoint_slots = True
    params.warmup = True
    if args.api_key:
        params.api_keys = [args.api_key]
    return params


def wait_healthy(url: str, deadline: float) -> None:
    """Return once ``GET url`` answers 200 (the model is loaded), or raise TimeoutError."""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2.0) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer 200 in time")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import xllamacpp

    port = args.port or free_port(args.host)
    server = xllamacpp.Server(make_params(args, port))
    root = f"http://{args.host}:{port}"
    wait_healthy(root + "/health", time.monotonic() + _READY_TIMEOUT_S)
    info = {"xllamacpp": xllamacpp.__version__, "pid": os.getpid()}
    print(json.dumps(info), file=sys.stderr, flush=True)
    print(f"READY {root}", flush=True)
    stop = [False]

    def on_signal(signum: int, frame: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop[0]:
        signal.pause()
    del server
    # llama.cpp's threads need no orderly shutdown for a test server; skip interpreter
    # teardown, which can wait on them.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
