"""The catalog: lookups, sources, consistency of the numbers with the reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzers.budget import catalog
from analyzers.budget.catalog import default_catalog, load_catalog
from analyzers.budget.specs import Deployment, ModelSpec
from analyzers.errors import AnalyzerError, BudgetError

REQUIRED_MODELS = [
    "llama-3-8b", "llama-3.1-8b", "llama-3-70b", "llama-3.1-70b", "llama-3.3-70b",
    "llama-3.1-405b", "qwen2.5-72b", "mixtral-8x7b", "deepseek-v3",
    "llama-3.2-11b-vision", "qwen2.5-vl-72b", "llava-1.5-7b", "llava-next-7b",
    "internvl2.5-78b", "pixtral-12b", "gemma-3-27b",
    "llama-2-70b", "llama2-70b", "bloom-176b", "opt-13b", "opt-66b", "opt-175b",
]  # fmt: skip
REQUIRED_GPUS = ["a100", "h100", "h200", "b200", "l40s", "mi300x", "h100-pcap", "h100-pcie"]


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_models_resolve(name: str) -> None:
    assert isinstance(catalog.model(name), ModelSpec)


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_gpus_resolve_case_insensitively(name: str) -> None:
    assert catalog.gpu(name.upper()).name == name


def test_every_entry_has_a_source() -> None:
    cat = default_catalog()
    sources = [s.source for s in cat.models.values()] + [s.source for s in cat.gpus.values()]
    sources += [s.source for s in cat.links.values()]
    assert all(s.strip() for s in sources)
    assert all(m.vision.source for m in cat.models.values() if m.vision is not None)


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(BudgetError, match=r"llama-3\.3-70b") as err:
        catalog.model("gpt-5")
    assert isinstance(err.value, AnalyzerError)
    assert err.value.exit_code == 2
    with pytest.raises(BudgetError, match="h200"):
        catalog.gpu("tpu-v5")


def _llama_params(m: ModelSpec) -> float:
    """Sum of a Llama config's parameters (untied embeddings, SwiGLU), as ref §3 does."""
    assert m.ffn_hidden is not None
    d, kv = m.hidden, m.kv_heads * m.head_dim
    attn = 2 * d * m.q_heads * m.head_dim + 2 * d * kv
    per_layer = attn + 3 * d * m.ffn_hidden + 2 * d
    return 2 * m.vocab * d + m.layers * per_layer + d


@pytest.mark.parametrize(
    ("name", "stated"),
    [
        ("llama-3.1-8b", 8.03e9),
        ("llama-3.3-70b", 70.55e9),
        ("llama-3.1-405b", 405.85e9),
        ("llama-2-70b", 68.98e9),
    ],
)
def test_llama_parameter_counts_follow_from_the_config(name: str, stated: float) -> None:
    m = catalog.model(name)
    assert _llama_params(m) == pytest.approx(stated, rel=1e-3)
    assert m.params_total == stated


def test_user_catalog_adds_and_overrides(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text(
        """
[gpus.h100]
source = "my lab's measured H100"
peak_flops_bf16 = 900e12
hbm_bytes = 80e9
hbm_bandwidth_bytes_per_s = 3.0e12

[models.tiny]
aliases = ["tiny-1b"]
source = "made up for a test"
params_total = 1e9
params_active = 1e9
layers = 16
hidden = 2048
q_heads = 16
kv_heads = 4
head_dim = 128
vocab = 32000
""",
        encoding="utf-8",
    )
    cat = load_catalog(user)
    assert cat.gpu("h100").peak_flops_bf16 == 900e12
    assert cat.model("TINY-1B").layers == 16
    assert cat.model("llama-3.3-70b").layers == 80  # shipped entries stay


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[models.x]\nsource = "s"\nparams_total = 1\nlayerz = 3\n', "unknown key"),
        ("[gpu.h100]\n", "unknown section"),
        (
            "[gpus.x]\npeak_flops_bf16 = 1e12\nhbm_bytes = 1\nhbm_bandwidth_bytes_per_s = 1\n",
            "source",
        ),
        ("not toml [", "not valid TOML"),
    ],
)
def test_bad_user_catalogs_are_rejected(tmp_path: Path, text: str, message: str) -> None:
    user = tmp_path / "bad.toml"
    user.write_text(text, encoding="utf-8")
    with pytest.raises(BudgetError, match=message):
        load_catalog(user)


def test_bad_values_are_rejected() -> None:
    with pytest.raises(BudgetError, match="positive"):
        Deployment(hardware=catalog.gpu("h100"), tensor_parallel=0)
    with pytest.raises(BudgetError, match="prefill_efficiency"):
        Deployment(hardware=catalog.gpu("h100"), prefill_efficiency=1.5)
    with pytest.raises(BudgetError, match="FP8"):
        catalog.gpu("a100").peak_flops("fp8")


@pytest.mark.parametrize(
    ("name", "stated"),
    [("bloom-176b", 176.2e9), ("opt-13b", 12.85e9), ("opt-66b", 65.7e9), ("opt-175b", 174.6e9)],
)
def test_mha_parameter_counts_follow_from_the_shape(name: str, stated: float) -> None:
    """12 hidden^2 per layer (QKV, output, a 4x MLP) plus the tied embeddings (and OPT's
    2,048 learned positions): the counts in the catalog within 0.5%."""
    m = catalog.model(name)
    positions = 2048 * m.hidden if name.startswith("opt") else 0
    total = m.layers * 12 * m.hidden**2 + m.vocab * m.hidden + positions
    assert total == pytest.approx(stated, rel=5e-3)
    assert m.kv_heads == m.q_heads
    assert m.params_total == stated


def test_every_gpu_names_its_interconnect() -> None:
    for gpu in default_catalog().gpus.values():
        assert gpu.interconnect, gpu.name
        assert gpu.scale_up_bandwidth_bytes_per_s > 0 or gpu.pcie_bandwidth_bytes_per_s > 0
