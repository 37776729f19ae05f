"""The decomposition's budget from a deployment description (``traces.deployment``).

``budget_from_deployment`` turns what a ``deployment.toml`` or a run's ``run.json`` says
into the ``BudgetModel`` (model, GPUs, efficiencies, chunk size, batch limit, replicas, the
KV link of a disaggregated deployment) and the server's time scale, and records for every
key it needed whether it was *used* (and from where) or *assumed* (a default), and which
keys it read but the decomposition does not model. ``DeploymentBudget.summary()`` is the
one line the CLI prints. Must not import loadgen, reports or httpx.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, TypeVar

from analyzers.budget.budgetfile import load_budget
from analyzers.budget.catalog import load_catalog
from analyzers.budget.specs import Deployment, LinkSpec
from analyzers.decompose.model import BudgetModel
from analyzers.errors import BudgetError
from traces.deployment import DeploymentSpec, Efficiency

T = TypeVar("T")

DEFAULT_LINK_GBPS = 400.0
"""The KV link assumed for a disaggregated deployment that does not name one (the
simulator's default)."""
DEFAULT_MAX_NUM_SEQS = 256
"""vLLM's default batch limit, assumed when the deployment does not say."""
UNUSED_KEYS = (
    "scheduler.block_size",
    "scheduler.prefix_caching",
    "scheduler.kv_capacity_tokens",
    "max_model_len",
)
"""Keys the decomposition reads past: the cache hits it uses are the server's own
reported counts, and capacity limits do not enter the TTFT split."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Provenance:
    """One key of the deployment as the budget used it: its value and where it came from
    (a file, ``simulator card``, a flag, or ``default`` when assumed)."""

    key: str
    value: str
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentBudget:
    """The budget a deployment gives, the server's time scale (wall seconds per model
    second), and what was used, assumed, and left unmodelled."""

    budget: BudgetModel
    time_scale: float
    used: tuple[Provenance, ...]
    assumed: tuple[Provenance, ...]
    not_modelled: tuple[str, ...]

    def summary(self, where: str) -> str:
        """One line: the keys used by source, the ones assumed, the ones not modelled."""
        by_source: dict[str, list[str]] = {}
        for p in self.used:
            by_source.setdefault(p.source, []).append(f"{p.key}={p.value}")
        parts = [f"{', '.join(keys)} ({source})" for source, keys in by_source.items()]
        line = f"deployment from {where}: {'; '.join(parts) or 'nothing'}"
        if self.assumed:
            line += "; assumed " + ", ".join(
                f"{p.key}={p.value}" + (f" ({p.source})" if p.source != "default" else "")
                for p in self.assumed
            )
        if self.not_modelled:
            line += "; read, not used: " + ", ".join(self.not_modelled)
        return line


def with_profile(spec: DeploymentSpec) -> DeploymentSpec:
    """``spec`` with the efficiencies it leaves out taken from its ``efficiency.profile``
    (a budget file of ``loadgen plan --out``); unchanged without a profile."""
    eff = spec.efficiency
    if eff.profile is None:
        return spec
    try:
        d = load_budget(eff.profile).deployment
    except BudgetError as exc:
        raise BudgetError(f"{spec.where}: efficiency.profile: {exc}") from None
    filled = Efficiency(
        prefill=eff.prefill if eff.prefill is not None else d.prefill_efficiency,
        decode=eff.decode if eff.decode is not None else d.decode_efficiency,
        step_overhead_us=(
            eff.step_overhead_us if eff.step_overhead_us is not None else d.step_overhead_s * 1e6
        ),
        memory_fraction=(
            eff.memory_fraction if eff.memory_fraction is not None else d.memory_fraction
        ),
        profile=eff.profile,
    )
    return replace(spec, efficiency=filled)


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


SLOT_ENGINES: Final = frozenset({"llama.cpp"})
"""Engines that admit by slots: a request holds one of ``scheduler.max_num_seqs`` slots
(llama.cpp's ``-np``) from its admission to its last token, and a waiting request is
admitted when a slot frees (``BudgetModel.slot_admission``)."""
ENGINE_DEFAULT_CHUNK: Final[Mapping[str, int]] = {"llama.cpp": 2048}
"""The step's token budget an engine uses when not told otherwise and does not publish:
llama.cpp's logical batch (``-b``, ``n_batch``; ``/props`` does not give it), shared by
its slots' prompts in one ``llama_decode``. Assumed, and reported as such, for a run whose
deployment names the engine but no ``scheduler.max_batched_tokens``."""


def budget_from_deployment(
    spec: DeploymentSpec,
    *,
    sources: Mapping[str, str],
    default_source: str,
    catalog_file: Path | None = None,
) -> DeploymentBudget:
    """The decomposition's budget for ``spec``.

    ``sources`` names where each dotted key came from (``DeploymentInfo.sources()``, or
    the flags that overrode it); keys missing there are from ``default_source`` (the
    file). ``model`` and ``gpu`` are required (``BudgetError`` naming them); every other
    key falls back to a default that is reported as assumed.
    """
    spec = with_profile(spec)
    used: list[Provenance] = []
    assumed: list[Provenance] = []
    flat = spec.flat()

    def take(key: str, value: T | None, default: T) -> T:
        if value is not None:
            source = sources.get(key, default_source)
            if key.startswith("efficiency.") and key not in flat:
                source = "efficiency.profile"
            used.append(Provenance(key=key, value=_shown(value), source=source))
            return value
        assumed.append(Provenance(key=key, value=_shown(default), source="default"))
        return default

    missing = [k for k in ("model", "gpu") if getattr(spec, k) is None]
    if missing:
        raise BudgetError(
            f"{spec.where or 'the deployment'} names no {' and no '.join(missing)}: give "
            "--model/--gpu, --budget or --deployment"
        )
    cat = load_catalog(catalog_file)
    model_name = take("model", spec.model, "")
    gpu_name = take("gpu", spec.gpu, "")
    disagg = spec.disaggregated
    take("topology", spec.topology, "monolith")
    pp = 1
    if disagg:
        tp = take("prefill.gpus", spec.prefill.gpus, spec.gpus_per_replica or 1)
    elif spec.tensor_parallel is not None or spec.pipeline_parallel is not None:
        tp = take("tensor_parallel", spec.tensor_parallel, 1)
        pp = take("pipeline_parallel", spec.pipeline_parallel, 1)
    else:
        tp = take("gpus", spec.gpus, 1)
    eff = spec.efficiency
    chunk = spec.scheduler.max_batched_tokens
    engine_chunk = ENGINE_DEFAULT_CHUNK.get(spec.engine or "")
    deploy = Deployment(
        hardware=cat.gpu(gpu_name),
        tensor_parallel=tp,
        pipeline_parallel=pp,
        prefill_efficiency=take("efficiency.prefill", eff.prefill, 0.6),
        decode_efficiency=take("efficiency.decode", eff.decode, 0.6),
        step_overhead_s=take("efficiency.step_overhead_us", eff.step_overhead_us, 0.0) / 1e6,
        memory_fraction=take("efficiency.memory_fraction", eff.memory_fraction, 0.9),
        chunk_tokens=chunk if chunk is not None else engine_chunk,
    )
    if chunk is not None:
        take("scheduler.max_batched_tokens", chunk, 0)
    elif engine_chunk is not None:
        assumed.append(
            Provenance(
                key="scheduler.max_batched_tokens",
                value=str(engine_chunk),
                source=f"default of {spec.engine}",
            )
        )
    else:
        assumed.append(
            Provenance(key="scheduler.max_batched_tokens", value="unchunked", source="default")
        )
    max_num_seqs = take("scheduler.max_num_seqs", spec.scheduler.max_num_seqs, DEFAULT_MAX_NUM_SEQS)
    slot_admission = spec.engine in SLOT_ENGINES
    if slot_admission:
        take("engine", spec.engine, "")
    link: LinkSpec | None = None
    decode_instances = 1
    if disagg:
        replicas = take("prefill.instances", spec.prefill.instances, 1)
        decode_instances = take("decode.instances", spec.decode.instances, 1)
        gbps = take("kv_link.gbps", spec.kv_link.gbps, DEFAULT_LINK_GBPS)
        latency_us = take("kv_link.latency_us", spec.kv_link.latency_us, 0.0)
        link = LinkSpec(
            name=f"{gbps:g}gbps", bandwidth_bytes_per_s=gbps * 1e9 / 8, latency_s=latency_us / 1e6
        )
    else:
        replicas = take("replicas", spec.replicas, 1)
    time_scale = take("time_scale", spec.time_scale, 1.0)
    not_modelled = [k for k in UNUSED_KEYS if k in flat]
    if disagg and spec.decode.gpus is not None and spec.decode.gpus != tp:
        not_modelled.append(f"decode.gpus={spec.decode.gpus} (decode steps timed on {tp} GPUs)")
    budget = BudgetModel(
        model=cat.model(model_name),
        deployment=deploy,
        source=f"{model_name} on {tp * pp}x {gpu_name} ({spec.where or default_source})",
        first_token_in_prefill=not disagg,
        link=link,
        replicas=replicas,
        decode_instances=decode_instances,
        max_num_seqs=max_num_seqs,
        slot_admission=slot_admission,
    )
    return DeploymentBudget(
        budget=budget,
        time_scale=time_scale,
        used=tuple(used),
        assumed=tuple(assumed),
        not_modelled=tuple(not_modelled),
    )
