"""Fleet sizing of a multi-stage pipeline (``loadgen plan fleet``): each stage's nodes from
the work it does per second (tokens, pairs, shard queries), not from queries.

Every stage gets a share of the end-to-end p99 budget (its ``budget_ms``; the rest is the
network, routing and slack) and is sized so its p99 stays within it:

- **encoder** (embedder, reranker): ``tokens/s = queries/s x items/query x tokens/item``;
  a GPU does ``tp x peak(dtype) x efficiency / (2 N + 4 L d n)`` tokens/s (the prefill
  arithmetic of an encoder: ``2 N`` for the weights, ``4 L d n`` for bidirectional
  attention over ``n`` tokens); one query's items are one batch on one GPU,
  ``S = items x tokens / (tokens/s per GPU)``; a node of ``c`` GPUs is an M/D/c queue run
  at the highest utilisation whose ``S + p99 wait`` fits the budget.
- **index** (a sharded vector index): shards = ``ceil(corpus bytes / usable node
  memory)``; every query visits every shard, so ``shard queries/s = queries/s x shards``;
  a node of ``c`` cores is an M/D/c queue of ``S = core time per shard query``, and the
  query waits for its slowest shard, so each shard must meet the budget at the
  ``0.99^(1/shards)`` quantile.
- **llm** (the answer model): the queries the response cache misses,
  ``queries/s x (1 - hit)``, become prefill tokens/s (``prompt - cached`` each) and decode
  tokens/s (``output`` each); a replica's capacity is the break-even monolith of
  :func:`analyzers.budget.disagg.monolith_capacity` (the same prefill and decode step
  model, deployment and profile as the rest of ``plan``) at the TPOT SLO and a p99 TTFT
  of the stage's budget.

Pure arithmetic on frozen dataclasses: must not import ``loadgen``, httpx or polars, and
does no I/O (:mod:`analyzers.budget.fleetfile` reads the file and holds its values).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from analyzers.budget.disagg import monolith_capacity
from analyzers.budget.fleetfile import (
    AnswerStage,
    EncoderStage,
    IndexStage,
    PipelineSpec,
)
from analyzers.budget.formatting import fmt, fmt_bytes, fmt_s
from analyzers.budget.prefill import prefill_time_s
from analyzers.budget.queueing import max_utilisation_quantile
from analyzers.budget.specs import Deployment, HardwareSpec, ModelSpec
from analyzers.errors import BudgetError

P99 = 0.99


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetLine:
    """One figure and the arithmetic that gives it."""

    label: str
    value: str
    chain: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetShare:
    """A stage's share of the end-to-end p99 budget."""

    stage: str
    budget_s: float
    share: float


@dataclass(frozen=True, slots=True, kw_only=True)
class StageFleet:
    """An upstream stage sized: its work per second, a node's capacity at the SLO, nodes."""

    name: str
    kind: str
    budget_s: float
    work_per_s: float
    unit: str
    node_capacity_per_s: float
    utilisation: float
    nodes: int
    lines: tuple[FleetLine, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerFleet:
    """The answer tier at one cache hit rate."""

    cache_hit: float
    queries_per_s: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    nodes: int
    lines: tuple[FleetLine, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetPlan:
    """``loadgen plan fleet``'s answer (see the module docstring)."""

    name: str
    path: str
    queries_per_s: float
    e2e_p99_s: float
    split: tuple[BudgetShare, ...]
    stages: tuple[StageFleet, ...]
    answer_name: str
    answer_where: str
    node_queries_per_s: float
    answer_lines: tuple[FleetLine, ...]
    answers: tuple[AnswerFleet, ...]


def _nodes(work: float, capacity: float) -> int:
    return math.ceil(work / capacity - 1e-9) if work > 0 else 0


def size_encoder(stage: EncoderStage, hardware: HardwareSpec, queries_per_s: float) -> StageFleet:
    """Nodes of an encoder stage (module docstring)."""
    budget = stage.budget_ms / 1e3
    items = queries_per_s * stage.items_per_query
    tokens = items * stage.tokens_per_item
    n = stage.tokens_per_item
    per_token = 2 * stage.params + 4 * stage.layers * stage.hidden * n
    flops = Deployment(hardware=hardware, prefill_efficiency=stage.efficiency).compute_flops(
        stage.dtype
    )
    gpu_tokens = flops / per_token
    service = stage.items_per_query * n / gpu_tokens
    c = stage.gpus_per_node
    rho = max_utilisation_quantile(service, budget, servers=c, quantile=P99)
    if rho <= 0:
        raise BudgetError(
            f"stage {stage.name}: one query's {stage.items_per_query} items take "
            f"{fmt_s(service)} on one {hardware.name}, more than its budget {fmt_s(budget)}"
        )
    node = c * gpu_tokens * rho
    nodes = _nodes(tokens, node)
    what = "pairs" if stage.items_per_query > 1 else "items"
    lines = (
        FleetLine(
            label="work",
            value=f"{fmt(tokens)} tokens/s",
            chain=(
                f"{fmt(queries_per_s)} queries/s x {stage.items_per_query} {what}/query = "
                f"{fmt(items)} {what}/s x {n} tokens = {fmt(tokens)} tokens/s"
            ),
        ),
        FleetLine(
            label="per GPU",
            value=f"{fmt(gpu_tokens)} tokens/s",
            chain=(
                f"{stage.model}: 2 x {fmt(stage.params)} + 4 x {stage.layers} x "
                f"{stage.hidden} x {n} = {fmt(per_token)} FLOP/token; {hardware.name} "
                f"{stage.dtype} x {stage.efficiency:g} = {fmt(flops)} FLOP/s -> "
                f"{fmt(gpu_tokens)} tokens/s"
            ),
        ),
        FleetLine(
            label="per node at the p99 budget",
            value=f"{fmt(node)} tokens/s",
            chain=(
                f"one query's batch S = {stage.items_per_query} x {n} / {fmt(gpu_tokens)} = "
                f"{fmt_s(service)}; M/D/{c}: S + p99 wait <= {fmt_s(budget)} up to "
                f"rho = {rho:.3f}; {c} x {fmt(gpu_tokens)} x {rho:.3f} = {fmt(node)} tokens/s"
            ),
        ),
        FleetLine(
            label="nodes",
            value=f"{nodes:,} x {c} x {hardware.name}",
            chain=f"ceil({fmt(tokens)} / {fmt(node)}) = {nodes:,}",
        ),
    )
    return StageFleet(
        name=stage.name,
        kind="encoder",
        budget_s=budget,
        work_per_s=tokens,
        unit="tokens/s",
        node_capacity_per_s=node,
        utilisation=rho,
        nodes=nodes,
        lines=lines,
    )


def size_index(stage: IndexStage, queries_per_s: float) -> StageFleet:
    """Nodes of a sharded vector index (module docstring)."""
    budget = stage.budget_ms / 1e3
    per_vector = stage.dim * stage.bytes_per_value + stage.graph_bytes_per_vector
    corpus = stage.vectors * per_vector
    usable = stage.node_memory_gb * 1e9 * stage.memory_fraction
    shards = max(1, math.ceil(corpus / usable))
    work = queries_per_s * shards
    service = stage.core_ms_per_shard_query / 1e3
    quantile = P99 ** (1 / shards)
    c = stage.cores_per_node
    rho = max_utilisation_quantile(service, budget, servers=c, quantile=quantile)
    if rho <= 0:
        raise BudgetError(
            f"stage {stage.name}: a shard query takes {fmt_s(service)}, more than its budget "
            f"{fmt_s(budget)}"
        )
    node = c / service * rho
    replicas = _nodes(queries_per_s, node)
    nodes = shards * replicas
    lines = (
        FleetLine(
            label="shards",
            value=f"{shards}",
            chain=(
                f"{fmt(stage.vectors)} vectors x ({stage.dim} x {stage.bytes_per_value:g} B + "
                f"{stage.graph_bytes_per_vector:g} B graph) = {fmt_bytes(corpus)}; per node "
                f"{stage.node_memory_gb:g} GB x {stage.memory_fraction:g} = "
                f"{fmt_bytes(usable)}; ceil = {shards}"
            ),
        ),
        FleetLine(
            label="work",
            value=f"{fmt(work)} shard queries/s",
            chain=f"{fmt(queries_per_s)} queries/s x {shards} shards (every query visits each)",
        ),
        FleetLine(
            label="per node at the p99 budget",
            value=f"{fmt(node)} shard queries/s",
            chain=(
                f"S = {fmt_s(service)} core time per shard query; the slowest of {shards} "
                f"shards sets the query's p99, so each meets 0.99^(1/{shards}) = "
                f"{quantile:.4f}; M/D/{c}: up to rho = {rho:.3f}; {c} / {fmt_s(service)} x "
                f"{rho:.3f} = {fmt(node)}/s"
            ),
        ),
        FleetLine(
            label="nodes",
            value=f"{nodes:,} ({shards} shards x {replicas} replicas)",
            chain=(
                f"replicas per shard = ceil({fmt(queries_per_s)} / {fmt(node)}) = {replicas}; "
                f"{shards} x {replicas} = {nodes:,}"
            ),
        ),
    )
    return StageFleet(
        name=stage.name,
        kind="index",
        budget_s=budget,
        work_per_s=work,
        unit="shard queries/s",
        node_capacity_per_s=node,
        utilisation=rho,
        nodes=nodes,
        lines=lines,
    )


def _answer_at(
    stage: AnswerStage, queries_per_s: float, hit: float, node_rps: float, gpu: str
) -> AnswerFleet:
    llm = queries_per_s * (1 - hit)
    new = stage.prompt_tokens - stage.cached_prompt_tokens
    prefill, decode = llm * new, llm * stage.output_tokens
    nodes = _nodes(llm, node_rps)
    lines = (
        FleetLine(
            label="queries to the model",
            value=f"{fmt(llm)}/s",
            chain=f"{fmt(queries_per_s)} x (1 - {hit:g} cache hits) = {fmt(llm)}/s",
        ),
        FleetLine(
            label="tokens",
            value=f"prefill {fmt(prefill)}/s, decode {fmt(decode)}/s",
            chain=(
                f"{fmt(llm)} x {new:,} uncached prompt tokens = {fmt(prefill)}/s "
                f"({fmt(llm * stage.cached_prompt_tokens)}/s from the prefix cache); "
                f"{fmt(llm)} x {stage.output_tokens} output tokens = {fmt(decode)}/s"
            ),
        ),
        FleetLine(
            label="nodes",
            value=f"{nodes:,} x {stage.gpus_per_node} x {gpu}",
            chain=(
                f"ceil({fmt(llm)} / {fmt(node_rps)}) = {nodes:,}; as tokens: "
                f"{fmt(decode)} / {fmt(node_rps * stage.output_tokens)} decode tokens/s per node"
            ),
        ),
    )
    return AnswerFleet(
        cache_hit=hit,
        queries_per_s=llm,
        prefill_tokens_per_s=prefill,
        decode_tokens_per_s=decode,
        nodes=nodes,
        lines=lines,
    )


def plan_fleet(
    spec: PipelineSpec,
    *,
    hardware: Callable[[str], HardwareSpec],
    answer_model: ModelSpec,
    answer_deploy: Deployment,
    cache_hits: Sequence[float],
    answer_where: str,
) -> FleetPlan:
    """Size every stage of ``spec``; the answer tier at each of ``cache_hits``.

    ``answer_deploy`` is one replica of the answer model (its tensor-parallel group, the
    efficiencies or profile); ``spec.answer.gpus_per_node // tp`` replicas share a node.
    """
    if not cache_hits:
        raise BudgetError("plan fleet needs at least one cache hit rate")
    for hit in cache_hits:
        if not 0 <= hit <= 1:
            raise BudgetError(f"a cache hit rate must be in [0, 1], got {hit}")
    q = spec.queries_per_s
    e2e = spec.e2e_p99_ms / 1e3
    split = [BudgetShare(stage=s.name, budget_s=s.budget_ms / 1e3, share=0.0) for s in spec.stages]
    rest = round(e2e - sum(s.budget_s for s in split), 9)
    split.append(BudgetShare(stage="network, routing, slack", budget_s=rest, share=0.0))
    shares = tuple(
        BudgetShare(stage=s.stage, budget_s=s.budget_s, share=s.budget_s / e2e) for s in split
    )
    sized: list[StageFleet] = []
    for stage in spec.stages:
        if isinstance(stage, EncoderStage):
            sized.append(size_encoder(stage, hardware(stage.gpu), q))
        elif isinstance(stage, IndexStage):
            sized.append(size_index(stage, q))
    a = spec.answer
    per_node = answer_deploy.tensor_parallel * answer_deploy.pipeline_parallel
    replicas = a.gpus_per_node // per_node
    if replicas < 1:
        raise BudgetError(
            f"stage {a.name}: a replica of {per_node} GPUs does not fit a node of {a.gpus_per_node}"
        )
    ttft = a.budget_ms / 1e3
    replica_rps = monolith_capacity(
        answer_model,
        answer_deploy,
        prompt_tokens=a.prompt_tokens,
        output_tokens=a.output_tokens,
        slo_ttft_s=ttft,
        slo_tpot_s=a.slo_tpot_ms / 1e3,
        cached_tokens=a.cached_prompt_tokens,
        wait_quantile=P99,
    )
    if replica_rps <= 0:
        raise BudgetError(
            f"stage {a.name}: one replica cannot meet TTFT {fmt_s(ttft)} and TPOT "
            f"{a.slo_tpot_ms:g} ms at any load"
        )
    node_rps = replica_rps * replicas
    new = a.prompt_tokens - a.cached_prompt_tokens
    t_p = prefill_time_s(answer_model, answer_deploy, new, a.cached_prompt_tokens)
    answer_lines = (
        FleetLine(
            label="prefill per request",
            value=fmt_s(t_p),
            chain=(
                f"{a.prompt_tokens:,} prompt tokens, {a.cached_prompt_tokens:,} from the "
                f"prefix cache: prefill({new:,} new on {a.cached_prompt_tokens:,} cached) = "
                f"{fmt_s(t_p)} (the plan step model)"
            ),
        ),
        FleetLine(
            label="per replica at the SLO",
            value=f"{fmt(replica_rps)} queries/s",
            chain=(
                f"the break-even monolith: rho = r x {fmt_s(t_p)}, TPOT = tpot(b) / (1 - rho) "
                f"<= {a.slo_tpot_ms:g} ms, TTFT = t_p + p99 wait + TPOT <= {fmt_s(ttft)}: "
                f"r = {fmt(replica_rps)}/s (prefill busy {replica_rps * t_p:.0%})"
            ),
        ),
        FleetLine(
            label="per node",
            value=f"{fmt(node_rps)} queries/s",
            chain=(
                f"{replicas} replica(s) of {per_node} GPUs per {a.gpus_per_node}-GPU node: "
                f"{fmt(node_rps)} queries/s = {fmt(node_rps * new)} prefill + "
                f"{fmt(node_rps * a.output_tokens)} decode tokens/s"
            ),
        ),
    )
    gpu = answer_deploy.hardware.name
    answers = tuple(_answer_at(a, q, hit, node_rps, gpu) for hit in cache_hits)
    return FleetPlan(
        name=spec.name,
        path=spec.path,
        queries_per_s=q,
        e2e_p99_s=e2e,
        split=shares,
        stages=tuple(sized),
        answer_name=a.name,
        answer_where=answer_where,
        node_queries_per_s=node_rps,
        answer_lines=answer_lines,
        answers=answers,
    )
