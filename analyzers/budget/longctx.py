"""The million-token chapter of ``loadgen plan``: what one very long prompt costs.

For a prompt of ``n`` tokens (``plan --prompt-tokens``, from ``LONG_CONTEXT_TOKENS`` up),
each figure with its arithmetic (docs/arithmetic.md):

- the KV cache of the request (``kv_bytes(n + output)``) and what the replica holds after
  the weights, so how many such requests fit at once;
- prefill in one pass, chunked (the deployment's chunk, else ``DEFAULT_CHUNK``), and with
  prefix reuse (``--cached-tokens``, else 90% of the prompt cached); TTFT at idle is the
  chunked prefill (its last step samples the first token);
- what the architecture changes: the KV per request and the requests that fit for the same
  model with multi-head attention, as served (GQA), with MLA (DeepSeek-V3's 512 latent +
  64 RoPE dims), with 5 local : 1 global layers over a 1,024-token window (Gemma 3's
  shape), and with the KV cache in fp8.

Pure arithmetic: must not import ``loadgen``, httpx or polars, and does no I/O.
"""

from __future__ import annotations

import math
from dataclasses import replace

from analyzers.budget import kv, prefill
from analyzers.budget.formatting import fmt, fmt_bytes, fmt_count, fmt_s
from analyzers.budget.specs import Deployment, ModelSpec

LONG_CONTEXT_TOKENS = 100_000
"""Prompts from this length up get the chapter."""
DEFAULT_CHUNK = 8192
"""The chunk when the deployment names none (vLLM's default for long contexts is 8192 or
the batch budget, ``--max-num-batched-tokens``)."""
REUSE_SHARE = 0.9
"""The cached share shown when ``--cached-tokens`` is not given."""

Line = tuple[str, str, float, str, str]
"""``(key, title, value, unit, chain)``: one prediction of the report."""


def _fit(budget: float, need: float) -> int:
    return max(0, math.floor(budget / need)) if need > 0 else 0


def long_context_lines(
    m: ModelSpec, d: Deployment, prompt_tokens: int, output_tokens: int, cached_tokens: int
) -> list[Line]:
    """The chapter's predictions (empty below ``LONG_CONTEXT_TOKENS``)."""
    n = prompt_tokens
    if n < LONG_CONTEXT_TOKENS:
        return []
    seq = n + output_tokens
    out: list[Line] = []
    per_tok = kv.kv_bytes_per_token(m)
    need = kv.kv_bytes(m, seq)
    budget = kv.kv_budget_bytes(m, d)
    fit = _fit(budget, need)
    out.append(
        (
            "long_kv_bytes_request",
            f"KV cache of one {fmt_count(seq)}-token request",
            need,
            "B",
            f"{fmt_count(per_tok)} B/token x {fmt_count(seq)} = {fmt_bytes(need)} "
            f"({fmt(kv.gib(need), 4)} GiB)",
        )
    )
    out.append(
        (
            "long_requests_fit",
            f"Such requests per replica ({d.gpus} x {d.hardware.name})",
            fit,
            "requests",
            f"floor(KV budget {fmt_bytes(budget)} / {fmt_bytes(need)}) = {fit}",
        )
    )
    chunk = d.chunk_tokens or DEFAULT_CHUNK
    one_pass = prefill.prefill_time_s(m, d, n, chunk_tokens=n)
    chunked = prefill.prefill_time_s(m, d, n, chunk_tokens=chunk)
    longest_step = max(c.time_s for c in prefill.prefill_costs(m, d, n, chunk_tokens=chunk))
    cached = cached_tokens if cached_tokens > 0 else math.floor(REUSE_SHARE * n)
    cached = min(cached, n - 1)
    reused = prefill.prefill_time_s(m, d, n - cached, cached, chunk_tokens=chunk)
    out.append(
        (
            "long_prefill_one_pass_s",
            f"Prefill of {fmt_count(n)} tokens in one pass",
            one_pass,
            "s",
            f"prefill_time({fmt_count(n)}), one step = {fmt_s(one_pass)} "
            f"({fmt(one_pass / 60, 3)} min); attention grows as n^2",
        )
    )
    out.append(
        (
            "long_prefill_chunked_s",
            f"Prefill chunked by {fmt_count(chunk)} tokens",
            chunked,
            "s",
            f"{math.ceil(n / chunk)} chunks, each re-reading the KV before it: "
            f"{fmt_s(chunked)} ({fmt(chunked / one_pass, 3)} x one pass); chunking does not "
            f"shorten it, it bounds each step (longest {fmt_s(longest_step)}, the last "
            f"chunk's) so that decodes beside it keep running",
        )
    )
    out.append(
        (
            "long_prefill_prefix_reuse_s",
            f"Prefill with {fmt_count(cached)} tokens cached (prefix reuse)",
            reused,
            "s",
            f"prefill_time({fmt_count(n - cached)} new over {fmt_count(cached)} cached), "
            f"chunked = {fmt_s(reused)} ({fmt(reused / chunked, 3)} x uncached)",
        )
    )
    out.append(
        (
            "long_ttft_idle_s",
            "TTFT at idle (chunked prefill; its last step samples the first token)",
            chunked,
            "s",
            f"= chunked prefill {fmt_s(chunked)}",
        )
    )
    b = 2.0 if m.kv_dtype in ("bf16", "fp16") else 1.0
    variants: list[tuple[str, str, ModelSpec]] = [
        (
            "mha",
            f"multi-head attention ({m.q_heads} kv heads)",
            replace(m, attention="gqa", kv_heads=m.q_heads, kv_lora_rank=0),
        ),
        ("served", f"as served ({m.attention}, {m.kv_heads} kv heads, {m.kv_dtype})", m),
        (
            "mla",
            "MLA, 512 latent + 64 RoPE dims per layer",
            replace(m, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64),
        ),
        (
            "sliding",
            "5 local : 1 global layers, 1,024-token window",
            replace(
                m,
                attention="sliding",
                sliding_window=1024,
                full_attention_layers=math.ceil(m.layers / 6),
            ),
        ),
        ("fp8", f"KV cache in fp8 ({fmt(b)} -> 1 B per value)", replace(m, kv_dtype="fp8")),
    ]
    for key, label, spec in variants:
        v_need = kv.kv_bytes(spec, seq)
        v_fit = _fit(budget, v_need)
        if v_need < need:
            versus = f"{fmt(need / v_need, 3)}x less than as served"
        elif v_need > need:
            versus = f"{fmt(v_need / need, 3)}x as served"
        else:
            versus = "as served"
        out.append(
            (
                f"long_arch_{key}",
                f"KV per request, {label}",
                v_need,
                "B",
                f"{fmt_count(round(v_need / seq))} B/token on average x "
                f"{fmt_count(seq)} = {fmt_bytes(v_need)} ({versus}); {v_fit} fit in "
                f"{fmt_bytes(budget)}",
            )
        )
    return out
