"""The pipeline file of ``loadgen plan fleet``: a multi-stage serving pipeline in TOML.

Layout (docs/arithmetic.md, "Fleet sizing"; ``examples/pipelines/rag.toml``)::

    [pipeline]      name, queries_per_s, e2e_p99_ms
    [stages.NAME]   kind = "encoder" | "index" | "llm", budget_ms, source, and per kind:
      encoder       model, params, layers, hidden, tokens_per_item, items_per_query,
                    gpu, gpus_per_node, dtype, efficiency
      index         vectors, dim, bytes_per_value, graph_bytes_per_vector,
                    node_memory_gb, memory_fraction, cores_per_node,
                    core_ms_per_shard_query
      llm           model, gpu, gpus_per_node, tensor_parallel, dtype, prompt_tokens,
                    cached_prompt_tokens, output_tokens, slo_tpot_ms,
                    efficiency_prefill, efficiency_decode, deployment

Stages run in file order; exactly one is ``llm`` (the answer model, whose ``budget_ms``
is its p99 TTFT). An unknown or missing key, or a bad value, is one ``BudgetError`` line
naming the key and the file (exit 2). A relative ``deployment`` path is resolved against
the file's folder. The file's values are frozen dataclasses (:class:`PipelineSpec` and its
stages); :mod:`analyzers.budget.fleet` sizes them. Reads one file; no other I/O.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from analyzers.budget.specs import DTYPES
from analyzers.errors import BudgetError


@dataclass(frozen=True, slots=True, kw_only=True)
class EncoderStage:
    """An encoder stage (embedder, cross-encoder reranker) sized from tokens per second."""

    name: str
    model: str
    params: float
    layers: int
    hidden: int
    tokens_per_item: int
    items_per_query: int
    gpu: str
    gpus_per_node: int
    dtype: str
    efficiency: float
    budget_ms: float
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexStage:
    """A sharded vector index on CPU nodes, sized from shard queries per second."""

    name: str
    vectors: int
    dim: int
    bytes_per_value: float
    graph_bytes_per_vector: float
    node_memory_gb: float
    memory_fraction: float
    cores_per_node: int
    core_ms_per_shard_query: float
    budget_ms: float
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerStage:
    """The answer model: its deployment and request shape; ``budget_ms`` is its p99 TTFT."""

    name: str
    model: str
    gpu: str
    gpus_per_node: int
    tensor_parallel: int
    dtype: str | None
    prompt_tokens: int
    cached_prompt_tokens: int
    output_tokens: int
    slo_tpot_ms: float
    efficiency_prefill: float
    efficiency_decode: float
    deployment: str | None
    budget_ms: float
    source: str


Stage = EncoderStage | IndexStage | AnswerStage


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineSpec:
    """A pipeline file: the load, the end-to-end p99 budget and the stages in order."""

    name: str
    queries_per_s: float
    e2e_p99_ms: float
    stages: tuple[Stage, ...]
    path: str

    @property
    def answer(self) -> AnswerStage:
        """The one ``llm`` stage."""
        return next(s for s in self.stages if isinstance(s, AnswerStage))


_COMMON: Final = ("kind", "budget_ms", "source")
_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "encoder": (
        "model",
        "params",
        "layers",
        "hidden",
        "tokens_per_item",
        "items_per_query",
        "gpu",
        "gpus_per_node",
        "dtype",
        "efficiency",
    ),
    "index": (
        "vectors",
        "dim",
        "bytes_per_value",
        "graph_bytes_per_vector",
        "node_memory_gb",
        "memory_fraction",
        "cores_per_node",
        "core_ms_per_shard_query",
    ),
    "llm": (
        "model",
        "gpu",
        "gpus_per_node",
        "tensor_parallel",
        "dtype",
        "prompt_tokens",
        "cached_prompt_tokens",
        "output_tokens",
        "slo_tpot_ms",
        "efficiency_prefill",
        "efficiency_decode",
        "deployment",
    ),
}
_OPTIONAL: Final = frozenset(
    {
        "source",
        "dtype",
        "cached_prompt_tokens",
        "efficiency_prefill",
        "efficiency_decode",
        "deployment",
        "memory_fraction",
        "graph_bytes_per_vector",
    }
)
_FRACTIONS: Final = frozenset(
    {"efficiency", "efficiency_prefill", "efficiency_decode", "memory_fraction"}
)
_INTS: Final = frozenset(
    {
        "layers",
        "hidden",
        "tokens_per_item",
        "items_per_query",
        "gpus_per_node",
        "vectors",
        "dim",
        "cores_per_node",
        "tensor_parallel",
        "prompt_tokens",
        "output_tokens",
    }
)
_TEXT: Final = frozenset({"kind", "source", "model", "gpu", "dtype", "deployment"})


class _Table:
    """One table of the file and where it is, for error lines."""

    def __init__(self, data: Mapping[str, object], where: str) -> None:
        self.data, self.where = data, where

    def fail(self, key: str, why: str) -> BudgetError:
        return BudgetError(f"{self.where} {key}: {why}")

    def text(self, key: str, default: str | None = None) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"must be a non-empty string, got {value!r}")
        return value

    def number(self, key: str, default: float | None = None) -> float:
        value = self.data.get(key, default)
        if value is None:
            raise self.fail(key, "missing (required)")
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise self.fail(key, f"must be a positive number, got {value!r}")
        if key in _FRACTIONS and value > 1:
            raise self.fail(key, f"must be in (0, 1], got {value!r}")
        return float(value)

    def integer(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        value = self.data.get(key, default)
        if value is None:
            raise self.fail(key, "missing (required)")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"must be an integer >= {minimum}, got {value!r}")
        return value

    def check_keys(self, known: tuple[str, ...]) -> None:
        for key in self.data:
            if key not in known:
                raise self.fail(key, f"unknown key (known: {', '.join(known)})")
        for key in known:
            if key not in self.data and key not in _OPTIONAL:
                raise self.fail(key, "missing (required)")


def _encoder(t: _Table, name: str) -> EncoderStage:
    dtype = t.text("dtype", "bf16")
    if dtype not in DTYPES:
        raise t.fail("dtype", f"must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return EncoderStage(
        name=name,
        model=t.text("model"),
        params=t.number("params"),
        layers=t.integer("layers"),
        hidden=t.integer("hidden"),
        tokens_per_item=t.integer("tokens_per_item"),
        items_per_query=t.integer("items_per_query"),
        gpu=t.text("gpu"),
        gpus_per_node=t.integer("gpus_per_node"),
        dtype=dtype,
        efficiency=t.number("efficiency"),
        budget_ms=t.number("budget_ms"),
        source=t.text("source", "(not given)"),
    )


def _index(t: _Table, name: str) -> IndexStage:
    graph = t.data.get("graph_bytes_per_vector", 0)
    if isinstance(graph, bool) or not isinstance(graph, int | float) or graph < 0:
        raise t.fail("graph_bytes_per_vector", f"must be a number >= 0, got {graph!r}")
    return IndexStage(
        name=name,
        vectors=t.integer("vectors"),
        dim=t.integer("dim"),
        bytes_per_value=t.number("bytes_per_value"),
        graph_bytes_per_vector=float(graph),
        node_memory_gb=t.number("node_memory_gb"),
        memory_fraction=t.number("memory_fraction", 0.75),
        cores_per_node=t.integer("cores_per_node"),
        core_ms_per_shard_query=t.number("core_ms_per_shard_query"),
        budget_ms=t.number("budget_ms"),
        source=t.text("source", "(not given)"),
    )


def _answer(t: _Table, name: str, folder: Path) -> AnswerStage:
    dtype = t.data.get("dtype")
    if dtype is not None and dtype not in DTYPES:
        raise t.fail("dtype", f"must be one of {', '.join(DTYPES)}, got {dtype!r}")
    deployment = t.data.get("deployment")
    if deployment is not None:
        path = Path(t.text("deployment"))
        deployment = str(path if path.is_absolute() else folder / path)
    prompt = t.integer("prompt_tokens")
    cached = t.integer("cached_prompt_tokens", 0, minimum=0)
    if cached >= prompt:
        raise t.fail("cached_prompt_tokens", f"must be below prompt_tokens ({prompt})")
    gpus, tp = t.integer("gpus_per_node"), t.integer("tensor_parallel")
    if gpus % tp:
        raise t.fail("tensor_parallel", f"must divide gpus_per_node ({gpus}), got {tp}")
    return AnswerStage(
        name=name,
        model=t.text("model"),
        gpu=t.text("gpu"),
        gpus_per_node=gpus,
        tensor_parallel=tp,
        dtype=str(dtype) if dtype is not None else None,
        prompt_tokens=prompt,
        cached_prompt_tokens=cached,
        output_tokens=t.integer("output_tokens"),
        slo_tpot_ms=t.number("slo_tpot_ms"),
        efficiency_prefill=t.number("efficiency_prefill", 0.6),
        efficiency_decode=t.number("efficiency_decode", 0.6),
        deployment=deployment,
        budget_ms=t.number("budget_ms"),
        source=t.text("source", "(not given)"),
    )


def parse_pipeline(doc: Mapping[str, object], where: str, folder: Path) -> PipelineSpec:
    """The pipeline described by a parsed TOML document (``where`` names it in errors)."""
    for key in doc:
        if key not in ("pipeline", "stages"):
            raise BudgetError(f"{where}: unknown table [{key}] (known: [pipeline], [stages.*])")
    head = doc.get("pipeline")
    if not isinstance(head, dict):
        raise BudgetError(f"{where}: missing table [pipeline]")
    top = _Table(head, f"{where}: [pipeline]")
    top.check_keys(("name", "queries_per_s", "e2e_p99_ms"))
    stages_doc = doc.get("stages")
    if not isinstance(stages_doc, dict) or not stages_doc:
        raise BudgetError(f"{where}: missing tables [stages.NAME] (one per stage)")
    stages: list[Stage] = []
    for name, table in stages_doc.items():
        if not isinstance(table, dict):
            raise BudgetError(f"{where}: stages.{name} must be a table")
        t = _Table(table, f"{where}: [stages.{name}]")
        kind = t.text("kind")
        if kind not in _KEYS:
            raise t.fail("kind", f"must be one of {', '.join(_KEYS)}, got {kind!r}")
        t.check_keys(_COMMON + _KEYS[kind])
        if kind == "encoder":
            stages.append(_encoder(t, name))
        elif kind == "index":
            stages.append(_index(t, name))
        else:
            stages.append(_answer(t, name, folder))
    answers = [s for s in stages if isinstance(s, AnswerStage)]
    if len(answers) != 1:
        raise BudgetError(
            f"{where}: [stages.*] kind: need exactly one 'llm' stage, got {len(answers)}"
        )
    spec = PipelineSpec(
        name=top.text("name"),
        queries_per_s=top.number("queries_per_s"),
        e2e_p99_ms=top.number("e2e_p99_ms"),
        stages=tuple(stages),
        path=where,
    )
    spent = sum(s.budget_ms for s in stages)
    if spent > spec.e2e_p99_ms:
        raise BudgetError(
            f"{where}: [pipeline] e2e_p99_ms: the stages' budget_ms sum to {spent:g} ms, "
            f"more than e2e_p99_ms = {spec.e2e_p99_ms:g}"
        )
    return spec


def load_pipeline(path: Path | str) -> PipelineSpec:
    """Read a pipeline file; a missing or malformed one is a ``BudgetError`` (exit 2)."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BudgetError(f"{p}: cannot read the pipeline file ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BudgetError(f"{p}: not valid TOML ({exc})") from None
    return parse_pipeline(doc, str(p), p.parent)
