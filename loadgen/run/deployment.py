"""What the endpoint tells of its deployment, for ``run.json`` (``traces.deployment``).

Asked once by the preflight, after ``/v1/models``:

- the simulator's model card (``sim_deployment_spec``): its whole deployment and time
  scale, in the ``deployment.toml`` layout; nothing else is asked then;
- the model card's ``max_model_len`` (vLLM puts it there);
- ``/metrics``: vLLM's ``vllm:cache_config_info`` labels (block size, GPU blocks, prefix
  caching, memory utilisation);
- ``/props``: llama.cpp's slots and per-slot context.

Every fact records its source. Nothing here fails a run: a source that cannot be reached,
answers an error or says nothing is recorded as a ``DeploymentGap`` with why.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

from traces.deployment import (
    DeploymentFact,
    DeploymentGap,
    DeploymentInfo,
    parse_deployment,
)
from traces.errors import DeploymentError

SIM_CARD = "simulator card"
MODELS_CARD = "/v1/models max_model_len"
VLLM_CACHE = "vLLM /metrics cache_config_info"
LLAMACPP_PROPS = "llama.cpp /props"
FETCH_TIMEOUT_S = 3.0
"""Per request: the server's own description is cheap, or it is not worth waiting for."""
_VLLM_INFO = "vllm:cache_config_info"


def model_card(models_doc: object, model: str) -> Mapping[str, object] | None:
    """The ``/v1/models`` entry of ``model`` (None when the listing has none)."""
    if not isinstance(models_doc, Mapping):
        return None
    data = models_doc.get("data")
    if not isinstance(data, list):
        return None
    for entry in data:
        if isinstance(entry, Mapping) and entry.get("id") == model:
            return entry
    return None


def _root(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


async def discover_deployment(
    http: httpx.AsyncClient,
    *,
    base_url: str,
    card: Mapping[str, object] | None,
    headers: Mapping[str, str],
) -> DeploymentInfo:
    """The facts the endpoint gives of its deployment (see the module docstring)."""
    if card is not None and isinstance(card.get("sim_deployment_spec"), Mapping):
        raw = card["sim_deployment_spec"]
        assert isinstance(raw, Mapping)
        try:
            spec = parse_deployment(raw, where=SIM_CARD)
        except DeploymentError as exc:
            return DeploymentInfo(unavailable=(DeploymentGap(source=SIM_CARD, reason=str(exc)),))
        return DeploymentInfo.of(spec, source=SIM_CARD)
    facts: list[DeploymentFact] = []
    gaps: list[DeploymentGap] = []
    max_len = None if card is None else card.get("max_model_len")
    if isinstance(max_len, int) and not isinstance(max_len, bool) and max_len >= 1:
        facts.append(DeploymentFact(key="max_model_len", value=max_len, source=MODELS_CARD))
    else:
        gaps.append(DeploymentGap(source=MODELS_CARD, reason="not in the model card"))
    root = _root(base_url)
    for source, path, read in (
        (VLLM_CACHE, "/metrics", vllm_cache_facts),
        (LLAMACPP_PROPS, "/props", llamacpp_facts),
    ):
        try:
            resp = await http.get(root + path, headers=dict(headers), timeout=FETCH_TIMEOUT_S)
        except httpx.HTTPError as exc:
            gaps.append(DeploymentGap(source=source, reason=f"{type(exc).__name__}"))
            continue
        if resp.status_code != 200:
            gaps.append(DeploymentGap(source=source, reason=f"HTTP {resp.status_code}"))
            continue
        found, why = read(resp.content)
        facts.extend(DeploymentFact(key=k, value=v, source=source) for k, v in found.items())
        if not found:
            gaps.append(DeploymentGap(source=source, reason=why))
    return DeploymentInfo(facts=tuple(facts), unavailable=tuple(gaps))


def _int(text: object) -> int | None:
    try:
        value = int(float(str(text)))
    except ValueError:
        return None
    return value if value >= 1 else None


def vllm_cache_facts(body: bytes) -> tuple[dict[str, object], str]:
    """Facts from vLLM's ``cache_config_info`` labels, or why there are none."""
    try:
        text = body.decode("utf-8")
        families = list(text_string_to_metric_families(text))
    except (UnicodeDecodeError, ValueError, TypeError, IndexError, KeyError) as exc:
        return {}, f"not Prometheus text ({type(exc).__name__})"
    labels: Mapping[str, str] | None = None
    for family in families:
        for sample in family.samples:
            if sample.name.startswith(_VLLM_INFO):
                labels = sample.labels
                break
        if labels is not None:
            break
    if labels is None:
        return {}, f"no {_VLLM_INFO} metric"
    out: dict[str, object] = {}
    block = _int(labels.get("block_size"))
    if block is not None:
        out["scheduler.block_size"] = block
        blocks = _int(labels.get("num_gpu_blocks"))
        if blocks is not None:
            out["scheduler.kv_capacity_tokens"] = blocks * block
    caching = labels.get("enable_prefix_caching")
    if caching in ("True", "False", "true", "false"):
        out["scheduler.prefix_caching"] = caching.lower() == "true"
    try:
        fraction = float(labels.get("gpu_memory_utilization", ""))
    except ValueError:
        fraction = 0.0
    if 0 < fraction <= 1:
        out["efficiency.memory_fraction"] = fraction
    if out:
        out["engine"] = "vllm"
    return out, f"{_VLLM_INFO} has none of the labels read"


def llamacpp_facts(body: bytes) -> tuple[dict[str, object], str]:
    """Facts from llama.cpp's ``/props``: slots and the context of one slot."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}, "not JSON"
    if not isinstance(doc, dict):
        return {}, "not a JSON object"
    out: dict[str, object] = {}
    slots = _int(doc.get("total_slots"))
    if slots is not None:
        out["scheduler.max_num_seqs"] = slots
    settings = doc.get("default_generation_settings")
    n_ctx = _int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    if n_ctx is not None:
        out["max_model_len"] = n_ctx
    if out:
        out["engine"] = "llama.cpp"
    return out, "no total_slots nor default_generation_settings.n_ctx"
