"""Each formula against hand-computed cases and the worked examples of reference §6."""

from __future__ import annotations

from dataclasses import replace

import pytest

from analyzers.budget import catalog
from analyzers.budget.decode import decode_step_time_s, tpot_s
from analyzers.budget.engine.step import attention_flops, context_integral
from analyzers.budget.images import (
    cross_attention_kv_bytes,
    image_encoder_flops,
    image_encoder_time_s,
    image_tokens,
)
from analyzers.budget.kv import (
    kv_bytes,
    kv_bytes_per_token,
    kv_capacity_tokens,
    kv_transfer_exposed_s,
    kv_transfer_time_s,
    max_concurrent_requests,
)
from analyzers.budget.prefill import max_prompt_for_ttft, prefill_costs, prefill_time_s
from analyzers.budget.specs import Deployment, LinkSpec
from analyzers.budget.weights import expert_params, fits, weights_bytes, weights_read_bytes
from analyzers.errors import BudgetError

L70 = catalog.model("llama-3.3-70b")
L70_FP8 = replace(L70, weight_dtype="fp8")
H200 = catalog.gpu("h200")
H100 = catalog.gpu("h100")
SEED_EFF = 1.2e15 / H200.peak_flops("fp8")  # "1.2 PFLOP/s effective" on one H200


def test_seed_prefill_4000_tokens_is_047_s() -> None:
    deploy = Deployment(hardware=H200, prefill_efficiency=SEED_EFF)
    (cost,) = prefill_costs(L70_FP8, deploy, 4000)
    assert cost.linear_flops == pytest.approx(5.644e14, rel=1e-3)  # 2 x 70.55e9 x 4000
    assert cost.linear_flops / cost.compute_flops_per_s == pytest.approx(0.470, abs=5e-4)
    assert cost.attention_flops == pytest.approx(2 * 80 * 4000**2 * 8192)  # 2.10e13
    assert cost.attention_flops / cost.linear_flops == pytest.approx(0.037, abs=1e-3)
    assert prefill_time_s(L70_FP8, deploy, 4000) == pytest.approx(0.4878, abs=1e-3)  # ~0.49


def test_attention_term_with_cache_and_window() -> None:
    assert context_integral(4, 0) == 8  # 4 x 0 + 16/2
    assert context_integral(4, 10) == 48  # 4 x 10 + 8
    assert context_integral(4, 10, window=5) == 20  # all beyond the window: 4 x 5
    assert context_integral(4, 2, window=5) == pytest.approx(3 * 2 + 4.5 + 1 * 5)
    assert attention_flops(L70, 1000, 3000) == pytest.approx(
        2 * 80 * 64 * 256 * (1000 * 3000 + 1000**2 / 2)
    )


def test_chunked_prefill_pays_per_chunk_overheads() -> None:
    deploy = Deployment(hardware=H200, step_overhead_s=0.002)
    whole = prefill_time_s(L70_FP8, deploy, 4096)
    chunked = prefill_time_s(L70_FP8, deploy, 4096, chunk_tokens=512)
    assert len(prefill_costs(L70_FP8, deploy, 4096, chunk_tokens=512)) == 8
    assert chunked == pytest.approx(whole + 7 * 0.002, rel=2e-3)  # compute-bound chunks
    tiny = prefill_time_s(L70_FP8, deploy, 4096, chunk_tokens=16)  # memory-bound chunks
    assert tiny > 5 * whole


def test_cached_tokens_make_prefill_cheaper_but_not_free() -> None:
    deploy = Deployment(hardware=H200)
    full = prefill_time_s(L70_FP8, deploy, 8000)
    hit = prefill_time_s(L70_FP8, deploy, 2000, 6000)
    assert hit < full
    assert hit > prefill_time_s(L70_FP8, deploy, 2000)


@pytest.mark.parametrize(
    ("name", "per_token", "at_128k_gb"),
    [
        ("llama-3.1-8b", 131_072, 17.18),
        ("llama-3.3-70b", 327_680, 42.95),
        ("llama-3.1-405b", 516_096, 67.65),
        ("qwen2.5-72b", 327_680, 42.95),
        ("mixtral-8x7b", 131_072, 17.18),
        ("deepseek-v3", 70_272, 9.21),
    ],
)
def test_kv_bytes_match_reference_table(name: str, per_token: int, at_128k_gb: float) -> None:
    m = catalog.model(name)
    assert kv_bytes_per_token(m) == per_token
    assert kv_bytes(m, 131_072) / 1e9 == pytest.approx(at_128k_gb, abs=0.01)


def test_seed_128k_request_is_42_95_gb_40_gib() -> None:
    b = kv_bytes(L70, 131_072)
    assert b == 42_949_672_960
    assert b / 2**30 == 40.0
    assert kv_bytes(L70, 128_000) / 1e9 == pytest.approx(41.94, abs=0.01)
    assert kv_bytes(replace(L70, kv_dtype="fp8"), 131_072) / 1e9 == pytest.approx(21.47, abs=0.01)


def test_mla_is_not_the_naive_formula() -> None:
    ds = catalog.model("deepseek-v3")
    assert kv_bytes_per_token(ds) == 61 * 576 * 2 == 70_272
    naive = 128 * (192 + 128) * 2 * 61  # per-head K and V: 4.997 MB
    assert kv_bytes_per_token(ds) < naive / 70


def test_mha_uses_kv_heads_not_hidden() -> None:
    mha70 = replace(L70, kv_heads=64)  # the hypothetical MHA 70B of ref §6
    assert kv_bytes(mha70, 131_072) / 1e9 == pytest.approx(343.6, abs=0.1)
    assert kv_bytes_per_token(L70) != 2 * 80 * 8192 * 2  # the SplitwiseSim error


def test_sliding_window_layers_hold_only_the_window() -> None:
    g = catalog.model("gemma-3-27b")
    per_layer = 2 * 16 * 128 * 2
    assert kv_bytes(g, 512) == 512 * 62 * per_layer
    assert kv_bytes(g, 100_000) == per_layer * (10 * 100_000 + 52 * 1024)


# ref §6 KV transfer table: (tokens, GB/s) -> seconds
TRANSFER = [
    (4000, 12.5, 0.105), (4000, 50, 0.0262), (4000, 87, 0.0151), (4000, 190, 0.0069),
    (4000, 400, 0.0033), (131_072, 12.5, 3.44), (131_072, 50, 0.86), (131_072, 87, 0.49),
    (131_072, 190, 0.23), (131_072, 400, 0.11),
]  # fmt: skip


@pytest.mark.parametrize(("tokens", "gbps", "seconds"), TRANSFER)
def test_kv_transfer_table(tokens: int, gbps: float, seconds: float) -> None:
    t = kv_transfer_time_s(L70, tokens, gbps * 1e9)
    assert t == pytest.approx(seconds, rel=0.06)
    half = kv_transfer_time_s(replace(L70, kv_dtype="fp8"), tokens, gbps * 1e9)
    assert half == pytest.approx(t / 2)


def test_kv_transfer_over_catalog_link_and_exposure() -> None:
    link = catalog.link("400g")
    assert kv_transfer_time_s(L70, 4000, link) == pytest.approx(0.0262, abs=1e-4)
    slow = LinkSpec(name="x", bandwidth_bytes_per_s=50e9, latency_s=0.001)
    assert kv_transfer_time_s(L70, 4000, slow) == pytest.approx(0.0272, abs=1e-4)
    # streamed under a long prefill, only the last layer's share is exposed
    assert kv_transfer_exposed_s(L70, 4000, link, 0.5) == pytest.approx(0.0262 / 80, rel=1e-2)
    with pytest.raises(BudgetError):
        kv_transfer_time_s(L70, 10, 0.0)


@pytest.mark.parametrize(
    ("model", "dtype", "gpu", "tp", "ms"),
    [
        ("llama-3.3-70b", "bf16", "h100", 8, 5.3),
        ("llama-3.3-70b", "fp8", "h100", 2, 10.5),
        ("llama-3.1-8b", "bf16", "h100", 1, 4.8),
        ("llama-3.3-70b", "fp8", "h200", 1, 14.7),
    ],
)
def test_decode_lower_bounds(model: str, dtype: str, gpu: str, tp: int, ms: float) -> None:
    m = replace(catalog.model(model), weight_dtype=dtype)  # type: ignore[arg-type]
    ideal = Deployment(hardware=catalog.gpu(gpu), tensor_parallel=tp).ideal()
    assert decode_step_time_s(m, ideal, [0]) * 1e3 == pytest.approx(ms, abs=0.05)


def test_decode_kv_reads_match_108_sequences_of_weights() -> None:
    # ref §6: ~108 sequences at 4k context read as many KV bytes as 141 GB of bf16 weights
    assert 141e9 / kv_bytes(L70, 4000) == pytest.approx(107.6, abs=0.5)
    ideal = Deployment(hardware=H100, tensor_parallel=8).ideal()
    t = decode_step_time_s(L70, ideal, [4000] * 108)
    assert t == pytest.approx(2 * weights_bytes(L70) / (8 * 3.35e12), rel=0.01)


def test_tpot_is_the_roofline_max() -> None:
    deploy = Deployment(hardware=H100, tensor_parallel=8, prefill_efficiency=0.5)
    small = tpot_s(L70, deploy, 1, 1000)
    assert small == pytest.approx(
        (weights_bytes(L70) + kv_bytes(L70, 1001)) / (8 * 3.35e12 * 0.6), rel=1e-9
    )
    huge = tpot_s(L70, deploy, 4096, 10)  # compute-bound at this batch
    flops = 2 * 70.55e9 * 4096 + 4096 * attention_flops(L70, 1, 10)
    assert huge == pytest.approx(max(flops / (8 * 989.4e12 * 0.5), 0), rel=1e-3)


def test_weights_fit_and_capacity() -> None:
    assert weights_bytes(L70_FP8) == pytest.approx(70.55e9)
    one_h100 = Deployment(hardware=H100)
    assert not fits(L70, one_h100)
    assert kv_capacity_tokens(L70, one_h100) == 0
    assert max_concurrent_requests(L70, one_h100, 1000) == 0
    h200 = Deployment(hardware=H200, memory_fraction=0.9)
    cap = kv_capacity_tokens(L70_FP8, h200)
    assert cap == (0.9 * 141e9 - 70.55e9) // 327_680
    assert max_concurrent_requests(L70_FP8, h200, 4000) == cap // 4000


def test_moe_reads_more_experts_as_the_batch_grows() -> None:
    mix = catalog.model("mixtral-8x7b")
    shared, per_expert = expert_params(mix)
    assert shared + 8 * per_expert == pytest.approx(46.70e9)
    assert shared + 2 * per_expert == pytest.approx(12.88e9)
    assert weights_read_bytes(mix, 1) == pytest.approx(12.88e9 * 2)
    assert weights_read_bytes(mix, 1000) == pytest.approx(46.70e9 * 2, rel=1e-6)


def test_max_prompt_for_ttft_inverts_prefill() -> None:
    deploy = Deployment(hardware=H200)
    n = max_prompt_for_ttft(L70_FP8, deploy, 0.2)
    assert prefill_time_s(L70_FP8, deploy, n) <= 0.2 < prefill_time_s(L70_FP8, deploy, n + 1)
    assert max_prompt_for_ttft(L70_FP8, deploy, 0.001) == 0
    assert max_prompt_for_ttft(L70_FP8, deploy, 1.0, other_s=1.0) == 0


def test_images() -> None:
    qvl = catalog.model("qwen2.5-vl-72b")
    assert image_tokens(qvl, 1920, 1080) == 1222
    # ref §4: 4,888 patches x 2 x 0.675e9 = 6.6 TFLOP (catalog has 0.67e9)
    assert image_encoder_flops(qvl, 1920, 1080) == pytest.approx(2 * 0.67e9 * 4888)
    deploy = Deployment(hardware=H100, prefill_efficiency=0.5)
    assert image_encoder_time_s(qvl, deploy, 1920, 1080) == pytest.approx(
        2 * 0.67e9 * 4888 / (989.4e12 * 0.5)
    )
    mllama = catalog.model("llama-3.2-11b-vision")
    assert image_tokens(mllama, 1920, 1080) == 1
    assert cross_attention_kv_bytes(mllama, 1120, 1120) == 6404 * 8 * 2 * 8 * 128 * 2
    assert kv_bytes_per_token(mllama) == 2 * 32 * 8 * 128 * 2  # 32 self-attention layers
    with pytest.raises(BudgetError, match="no vision encoder"):
        image_tokens(L70, 10, 10)
