"""Fixtures for tests against a real OpenAI-compatible server: llama.cpp's own HTTP server
(the ``xllamacpp`` wheel) doing real prefill and decode on the CPU with a tiny random-weight
llama built here (``tiny_model.py``) and served by ``serve.py``, both run by file path.

- ``tiny_model`` (session): the model, built once into ``$LOADGEN_CACHE_DIR`` or
  ``~/.cache/llm-loadgen`` (keyed by the builder's version), about 3 s the first time.
- ``llama`` / ``llama_serial`` (package): servers with 4 slots and with 1 slot, one compute
  thread each, started on a free port; a server prints READY once ``/health`` answers.
- ``llama_factory``: start more servers with other flags (stopped after the test).

Without the ``realserver`` extra (``pip install -e '.[realserver]'``) every test here is
skipped with the reason; with ``CI`` set in the environment it fails instead, so CI never
silently loses these tests.
"""

from __future__ import annotations

import importlib.util
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import pytest

HERE = Path(__file__).resolve().parent
SERVE = HERE / "serve.py"
_REQUIRED = ("xllamacpp", "gguf", "numpy", "tokenizers")
_READY_TIMEOUT_S = 60.0


def load_helper(name: str) -> ModuleType:
    """Import a helper module of this directory by path (pytest runs in importlib mode)."""
    key = f"_realserver_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


def _missing_extra() -> str | None:
    missing = [m for m in _REQUIRED if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return (
        f"real-server tests need the realserver extra ({', '.join(missing)} not installed): "
        "pip install -e '.[realserver]'"
    )


def cache_root() -> Path:
    """Where built models are kept between runs."""
    env = os.environ.get("LOADGEN_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-loadgen"


@dataclass(frozen=True, slots=True, kw_only=True)
class LlamaServer:
    """A running llama.cpp server: ``base_url`` ends in ``/v1``; ``root_url`` has
    ``/health``, ``/metrics``, ``/slots`` and ``/tokenize``."""

    base_url: str
    root_url: str
    pid: int
    parallel: int
    model_id: str


LlamaFactory = Callable[..., LlamaServer]


@pytest.fixture(scope="session")
def tiny_model() -> Any:
    """The tiny model's files (``TinyModel``), built once per cache directory."""
    why = _missing_extra()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    tiny = load_helper("tiny_model")
    started = time.monotonic()
    model = tiny.ensure_model(cache_root() / "tiny-llama")
    elapsed = time.monotonic() - started
    if elapsed > 0.5:
        sys.stderr.write(f"\nbuilt the tiny model in {elapsed:.1f} s: {model.directory}\n")
    return model


@pytest.fixture(scope="session")
def tokenizer(tiny_model: Any) -> Any:
    """The server's own tokenizer (``tokenizers.Tokenizer``)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tiny_model.tokenizer_json))


@contextmanager
def start_llama(model: Any, *args: str, alias: str = "tiny-llama") -> Iterator[LlamaServer]:
    """Run ``serve.py`` until the block exits; SIGTERM (then SIGKILL) on exit."""
    parallel = 4
    if "--parallel" in args:
        parallel = int(args[args.index("--parallel") + 1])
    command = [
        sys.executable,
        str(SERVE),
        "--model",
        str(model.gguf),
        "--port",
        "0",
        "--alias",
        alias,
        *args,
    ]
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr
        )
        try:
            assert proc.stdout is not None
            root = _wait_ready(proc, proc.stdout, stderr)
            yield LlamaServer(
                base_url=f"{root}/v1",
                root_url=root,
                pid=proc.pid,
                parallel=parallel,
                model_id=alias,
            )
        finally:
            _stop(proc)


def _wait_ready(proc: subprocess.Popen[bytes], stdout: IO[bytes], stderr: IO[bytes]) -> str:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(stdout, selectors.EVENT_READ)
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(_tail("llama server did not print READY in time", stderr))
            if not selector.select(remaining):
                continue
            data = os.read(stdout.fileno(), 4096)
            if not data:
                proc.wait(timeout=10)
                raise RuntimeError(_tail(f"llama server exited ({proc.returncode})", stderr))
            buffer += data
    line = buffer.split(b"\n", 1)[0].decode(errors="replace").strip()
    if not line.startswith("READY "):
        raise RuntimeError(_tail(f"llama server printed {line!r}", stderr))
    return line.removeprefix("READY ")


def _tail(why: str, stderr: IO[bytes]) -> str:
    stderr.seek(0)
    return f"{why}: {stderr.read().decode(errors='replace')[-3000:]}"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.fixture(scope="package")
def llama(tiny_model: Any) -> Iterator[LlamaServer]:
    """A server with 4 slots of 4096 tokens, shared by the package's tests."""
    with start_llama(tiny_model, "--parallel", "4") as server:
        yield server


@pytest.fixture(scope="package")
def llama_serial(tiny_model: Any) -> Iterator[LlamaServer]:
    """A server with one slot: concurrent requests queue for it."""
    with start_llama(tiny_model, "--parallel", "1") as server:
        yield server


@pytest.fixture
def llama_factory(tiny_model: Any) -> Iterator[LlamaFactory]:
    """``llama_factory(*serve_args) -> LlamaServer``; stopped after the test."""
    with ExitStack() as stack:

        def start(*args: str) -> LlamaServer:
            return stack.enter_context(start_llama(tiny_model, *args))

        yield start
