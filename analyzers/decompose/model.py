"""The decomposition's budget model: which model on which replica the predictions are for.

``BudgetModel`` names the model, the deployment (GPU, tensor parallelism, efficiencies),
whether the prefill step samples the first token and the KV link of a disaggregated
deployment; it is built from a budget file (``loadgen plan --out``) or from catalog names.
``decompose_terms`` turns it into per-request predictions. Must not import loadgen or httpx.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from analyzers.budget.budgetfile import load_budget
from analyzers.budget.catalog import load_catalog
from analyzers.budget.profile import load_profile_for
from analyzers.budget.specs import Deployment, LinkSpec, ModelSpec
from analyzers.errors import BudgetError


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetModel:
    """The model and replica the predictions are for, and where they came from.

    ``first_token_in_prefill``: the step that finishes the prompt samples the first token
    (vLLM in one replica), so the predicted first-token term is 0 instead of one decode
    step. ``link``: disaggregated, the prompt's KV cache crosses this link (the transfer
    term is predicted as ``kv_transfer_time_s`` instead of 0) and a decode step on the
    decode side samples the first token. ``replicas`` (monolith replicas, or prefill
    instances with a link), ``decode_instances`` and ``max_num_seqs`` shape the
    load-aware replay of the run through the scheduler (``analyzers.decompose.load``).
    ``slot_admission``: the engine admits by slots (llama.cpp): a request holds one of
    ``max_num_seqs`` slots per replica from its admission to its last token and batches
    their prompts step by step, so with the server's timings missing the prefill is read
    from the run's own steps (``analyzers.decompose.admission``) instead of taken from the
    replay."""

    model: ModelSpec
    deployment: Deployment
    source: str
    first_token_in_prefill: bool = False
    link: LinkSpec | None = None
    replicas: int = 1
    decode_instances: int = 1
    max_num_seqs: int = 256
    slot_admission: bool = False

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.decode_instances < 1 or self.max_num_seqs < 1:
            raise BudgetError(
                "replicas, decode instances and max_num_seqs must be at least 1, got "
                f"{self.replicas}, {self.decode_instances}, {self.max_num_seqs}"
            )

    @classmethod
    def from_file(cls, path: Path | str) -> BudgetModel:
        """From a budget file written by ``loadgen plan --out``."""
        report = load_budget(path)
        return cls(model=report.model, deployment=report.deployment, source=str(path))

    @classmethod
    def from_catalog(
        cls,
        model: str,
        gpu: str,
        *,
        gpus: int = 1,
        catalog_file: Path | None = None,
        first_token_in_prefill: bool = False,
        link: LinkSpec | None = None,
        replicas: int = 1,
        profile_file: Path | None = None,
    ) -> BudgetModel:
        """From catalog names (``gpus``-way tensor parallel, the catalog's default
        efficiencies, or the calibration profile for ``gpu`` in ``profile_file``)."""
        cat = load_catalog(catalog_file)
        hardware = cat.gpu(gpu)
        profile = None
        if profile_file is not None:
            profile = load_profile_for(
                profile_file, gpu, lambda name: cat.gpu(name).name == hardware.name
            )
        deploy = Deployment(hardware=hardware, tensor_parallel=gpus, profile=profile)
        return cls(
            model=cat.model(model),
            deployment=deploy,
            source=f"{model} on {gpus}x {gpu}",
            first_token_in_prefill=first_token_in_prefill,
            link=link,
            replicas=replicas,
        )
