"""Fixtures for tests against a real OpenAI-compatible server: llama.cpp's own HTTP server
(the ``xllamacpp`` wheel) doing real prefill and decode on the CPU with a tiny random-weight
llama built here (``tiny_model.py``) and served by ``serve.py``, both run by file path.

- ``tiny_model`` (session): the model, built once into ``$LOADGEN_CACHE_DIR`` or
  ``~/.cache/llm-loadgen`` (keyed by the builder's version), about 3 s the first time.
- ``llama`` / ``llama_serial`` (package): servers with 4 slots and with 1 slot, one compute
  thread each, started on a free port; a server prints READY once ``/health`` answers.
- ``llama_factory``: start more servers with other flags (stopped after the test).
- ``vllm_model`` (session): a tiny random-weight Llama in Hugging Face layout with the same
  kind of tokenizer, built by the product (``loadgen.engines.tinymodel``), cached like the
  GGUF.
- ``vllm`` (package): vLLM's OpenAI server on that model, on one CPU, with two sequences
  per batch, started by the product's launcher (``loadgen.engines.launch``, what ``loadgen
  demo --engine vllm`` runs) once for every test that needs it (about a minute: vLLM
  imports torch and spawns its engine core) and stopped when the package's tests end.

Without the ``realserver`` extra (``pip install -e '.[realserver]'``) the llama.cpp tests
are skipped with the reason; with ``CI`` set in the environment they fail instead, so CI
never silently loses these tests. The vLLM tests run with ``LOADGEN_VLLM=1``, which ``make
test`` sets on Linux x86_64 (and then installs the ``vllm`` extra too), and fail if the
extra is missing; without it (``LOADGEN_VLLM=0 make test``, a plain ``pytest``) they are
skipped with that reason.

Trace helpers shared by the test modules: ``make_trace``, ``replay``, ``rows``, ``ttft_ms``.
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

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from replaying import replay as replay  # re-exported: the tests here import it from conftest

from loadgen.engines.launch import VllmOptions, VllmServer, start_vllm, vllm_missing
from loadgen.engines.tinymodel import HFModel, default_cache_root, ensure_model
from traces import schema as s
from traces.io import write_trace
from traces.prompts.maker import HFTokenCounter, PromptMaker
from traces.records import TraceRequest

HERE = Path(__file__).resolve().parent
SERVE = HERE / "serve.py"
_REQUIRED = ("xllamacpp", "gguf", "numpy", "tokenizers")
_READY_TIMEOUT_S = 60.0
VLLM_MAX_MODEL_LEN = 2048
VLLM_MAX_NUM_SEQS = 2
VLLM_MODEL_ID = "tiny-llama"


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


def _missing_extra(required: tuple[str, ...] = _REQUIRED, extra: str = "realserver") -> str | None:
    missing = [m for m in required if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return (
        f"real-server tests need the {extra} extra ({', '.join(missing)} not installed): "
        f"pip install -e '.[{extra}]'"
    )


def _skip_or_fail(why: str) -> None:
    """Skip with the reason; under CI fail instead, so CI never silently loses tests."""
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def cache_root() -> Path:
    """Where built models are kept between runs (the product's rule: ``LOADGEN_CACHE_DIR``,
    else the user's cache directory)."""
    return default_cache_root(dict(os.environ))


@dataclass(frozen=True, slots=True, kw_only=True)
class LlamaServer:
    """A running llama.cpp server: ``base_url`` ends in ``/v1``; ``root_url`` has
    ``/health``, ``/metrics``, ``/slots`` and ``/tokenize``."""

    base_url: str
    root_url: str
    pid: int
    parallel: int
    model_id: str
    batch: int
    """Its logical batch (``-b``, ``n_batch``): the prompt tokens one ``llama_decode`` takes
    across the slots, a deployment's ``scheduler.max_batched_tokens``."""


LlamaFactory = Callable[..., LlamaServer]


@pytest.fixture(scope="session")
def tiny_model() -> Any:
    """The tiny model's files (``TinyModel``), built once per cache directory."""
    why = _missing_extra()
    if why is not None:
        _skip_or_fail(why)
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
    batch = 2048  # serve.py's default, said outright below
    if "--batch" in args:
        batch = int(args[args.index("--batch") + 1])
    else:
        args = (*args, "--batch", str(batch))
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
                batch=batch,
            )
        finally:
            _stop(proc)


def _wait_ready(
    proc: subprocess.Popen[bytes],
    stdout: IO[bytes],
    stderr: IO[bytes],
    timeout_s: float = _READY_TIMEOUT_S,
    what: str = "llama server",
) -> str:
    deadline = time.monotonic() + timeout_s
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(stdout, selectors.EVENT_READ)
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(_tail(f"{what} did not print READY in time", stderr))
            if not selector.select(remaining):
                continue
            data = os.read(stdout.fileno(), 4096)
            if not data:
                proc.wait(timeout=10)
                raise RuntimeError(_tail(f"{what} exited ({proc.returncode})", stderr))
            buffer += data
    line = buffer.split(b"\n", 1)[0].decode(errors="replace").strip()
    if not line.startswith("READY "):
        raise RuntimeError(_tail(f"{what} printed {line!r}", stderr))
    return line.removeprefix("READY ")


def _tail(why: str, stderr: IO[bytes]) -> str:
    stderr.seek(0)
    return f"{why}: {stderr.read().decode(errors='replace')[-3000:]}"


def _stop(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
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


@pytest.fixture(scope="session")
def vllm_model() -> HFModel:
    """The tiny Hugging Face model's files, built once per cache directory by the product's
    builder (``loadgen.engines.tinymodel``, what ``loadgen demo --engine vllm`` uses)."""
    if os.environ.get("LOADGEN_VLLM") != "1":
        pytest.skip(
            "vLLM tests are off: LOADGEN_VLLM is not 1 (`make test` sets it on Linux x86_64, "
            "installs the vllm extra, about 3 GB, and runs them)"
        )
    why = vllm_missing()
    if why is not None:
        pytest.fail(f"LOADGEN_VLLM=1 but {why}")
    started = time.monotonic()
    model = ensure_model(cache_root() / "tiny-llama-hf")
    elapsed = time.monotonic() - started
    if elapsed > 0.5:
        sys.stderr.write(f"\nbuilt the tiny HF model in {elapsed:.1f} s: {model.directory}\n")
    return model


@pytest.fixture(scope="session")
def vllm_tokenizer(vllm_model: HFModel) -> Any:
    """The vLLM server's own tokenizer (``tokenizers.Tokenizer``)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(vllm_model.tokenizer_json))


VLLM_OPTIONS = VllmOptions(
    served_model_name=VLLM_MODEL_ID,
    max_model_len=VLLM_MAX_MODEL_LEN,
    max_num_seqs=VLLM_MAX_NUM_SEQS,
    extra=("--enable-auto-tool-choice", "--tool-call-parser", "pythonic"),
)
"""The tests' server: every per-request report and prefix caching on (always, in the
launcher), a batch of two sequences, so a burst queues (the decomposition's case), and a
tool-call parser, without which vLLM 0.32 refuses a forced ``tool_choice`` (it loads one only
with auto tool choice on; ``pythonic`` needs no special tokens in the tiny model's
vocabulary)."""


@pytest.fixture(scope="package")
def vllm(vllm_model: HFModel) -> Iterator[VllmServer]:
    """One vLLM server shared by the package's tests, on the last CPU this process may use
    (the product's launcher, ``loadgen.engines.launch``)."""
    with start_vllm(vllm_model.directory, VLLM_OPTIONS, timeout_s=600) as server:
        sys.stderr.write(
            f"\nvLLM healthy in {server.start_s:.1f} s on CPU {server.cpu}: {server.root_url}\n"
        )
        yield server


Row = dict[str, Any]


def make_trace(
    path: Path,
    tiny_model: Any,
    specs: list[dict[str, Any]],
    *,
    seed: int,
    block_size: int = 128,
) -> Path:
    """A trace whose rows carry literal prompts of exactly ``input_tokens`` tokens.
    ``specs``: dicts with ``input_tokens``, ``output_tokens`` and optionally ``api``,
    ``arrival_s``, ``prefix_blocks``."""
    maker = PromptMaker(
        block_size=block_size,
        seed=seed,
        counter=HFTokenCounter.from_file(tiny_model.tokenizer_json),
    )
    columns: dict[str, list[Any]] = {
        "request_id": [],
        "arrival_s": [],
        "api": [],
        "input_tokens": [],
        "output_tokens": [],
        "prompt": [],
    }
    for i, spec in enumerate(specs):
        req = TraceRequest(
            index=i,
            request_id=f"r{seed}-{i}",
            arrival_s=float(spec.get("arrival_s", 0.0)),
            api=spec.get("api", s.API_COMPLETIONS),
            input_tokens=spec["input_tokens"],
            output_tokens=spec["output_tokens"],
            prefix_blocks=spec.get("prefix_blocks"),
        )
        columns["request_id"].append(req.request_id)
        columns["arrival_s"].append(req.arrival_s)
        columns["api"].append(req.api)
        columns["input_tokens"].append(req.input_tokens)
        columns["output_tokens"].append(req.output_tokens)
        columns["prompt"].append(maker.text(req))
    write_trace(pa.table(columns), path)
    return path


def rows(run_dir: Path) -> list[Row]:
    table: list[Row] = pq.read_table(run_dir / s.REQUESTS_FILE).to_pylist()
    return sorted(table, key=lambda r: r["trace_index"])


def ttft_ms(row: Row) -> float:
    return float(row["first_token_ns"] - row["sent_ns"]) / 1e6


def tpot_ms(row: Row) -> float:
    """Time per output token after the first, ms (the client's first-to-last span)."""
    return float(row["end_ns"] - row["first_token_ns"]) / 1e6 / float(row["completion_tokens"] - 1)


SplitReport = dict[str, list[tuple[float, float]]]
"""Per term (queue, prefill): (inferred, the server's own) ms at p50, p90 and p99."""


def hidden_split(own: pl.DataFrame, inferred: pl.DataFrame) -> SplitReport:
    """The decomposition with the server's timings hidden (``inferred``) against the one
    that reads them (``own``), per term at p50/p90/p99, after checking that both splits
    add up to each request's server-side time."""
    server = ("network_ms", "queue_ms", "prefill_ms", "transfer_ms", "first_token_ms")
    for frame in (own, inferred):
        total = frame.select(pl.sum_horizontal(server) + pl.col("overshoot_ms")).to_series()
        assert (total - frame.get_column("server_side_ms")).abs().max() < 1e-6  # type: ignore[operator]
    return {
        term: [
            (
                round(float(inferred.get_column(f"{term}_ms").quantile(p, "linear") or 0.0), 2),
                round(float(own.get_column(f"{term}_ms").quantile(p, "linear") or 0.0), 2),
            )
            for p in (0.5, 0.9, 0.99)
        ]
        for term in ("queue", "prefill")
    }


def p99_misses(report: SplitReport) -> list[str]:
    """The terms whose p99 is off by more than 15% or 5 ms (the issues' target)."""
    return [t for t, v in report.items() if abs(v[2][0] - v[2][1]) > max(0.15 * v[2][1], 5.0)]
