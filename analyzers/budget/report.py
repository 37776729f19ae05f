"""The budget report: every prediction for one model on one replica, with its arithmetic.

``build_report`` calls the formula modules and records each result as a ``Prediction``
whose ``chain`` shows the numbers that produced it (``2 x 70.55e9 x 4000 / 1.2e15 =
0.47 s``). The report is what ``loadgen plan`` prints and what ``budgetfile`` writes and
reads back. Pure arithmetic and strings: this module must not import ``loadgen``, httpx or
polars, and does no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from analyzers.budget import (
    chunksteps,
    decode,
    disagg,
    images,
    kv,
    longctx,
    prefill,
    queueing,
    weights,
)
from analyzers.budget.engine.step import StepCost, step_time_s
from analyzers.budget.formatting import fmt, fmt_bytes, fmt_count, fmt_s
from analyzers.budget.specs import Deployment, LinkSpec, ModelSpec, dtype_bytes
from analyzers.errors import BudgetError


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    """One predicted quantity: ``value`` in ``unit``, and the ``chain`` that computes it."""

    key: str
    title: str
    value: float
    unit: str
    chain: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanInputs:
    """The workload the report is for (lengths in tokens, SLOs in milliseconds)."""

    prompt_tokens: int = 4000
    cached_tokens: int = 0
    output_tokens: int = 256
    decode_batch: int = 0  # 0: as many sequences as the KV cache holds, at most 256
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float = 50.0
    replicas: int = 8
    image_width: int = 1920
    image_height: int = 1080
    trace: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetReport:
    """A model on a replica, the workload, and the predictions in print order."""

    model: ModelSpec
    deployment: Deployment
    inputs: PlanInputs
    predictions: tuple[Prediction, ...]
    refusal: str = ""  # why the deployment cannot serve (weights do not fit); "" when it can

    def value(self, key: str) -> float:
        """The value of the prediction called ``key``; ``BudgetError`` if there is none."""
        for p in self.predictions:
            if p.key == key:
                return p.value
        raise BudgetError(f"no prediction {key!r}; known: {', '.join(self.keys())}")

    def keys(self) -> list[str]:
        """Prediction keys in print order."""
        return [p.key for p in self.predictions]


class _Lines:
    """Collects predictions in order."""

    def __init__(self) -> None:
        self.items: list[Prediction] = []

    def add(self, key: str, title: str, value: float, unit: str, chain: str) -> None:
        self.items.append(Prediction(key=key, title=title, value=value, unit=unit, chain=chain))


def _kv_chain(m: ModelSpec) -> str:
    b = fmt(dtype_bytes(m.kv_dtype))
    if m.attention == "mla":
        return (
            f"{m.self_attention_layers} layers x ({m.kv_lora_rank} latent + "
            f"{m.qk_rope_head_dim} rope) x {b} B"
        )
    return (
        f"2 x {m.self_attention_layers} layers x {m.kv_heads} kv heads x {m.head_dim} head dim"
        f" x {b} B"
    )


def _memory(lines: _Lines, m: ModelSpec, d: Deployment, inp: PlanInputs) -> None:
    w = weights.weights_bytes(m)
    usable = weights.usable_memory_bytes(d)
    fits = weights.fits(m, d)
    lines.add(
        "weights_bytes",
        "Weights",
        w,
        "B",
        f"{fmt(m.params_total)} params x {fmt(dtype_bytes(m.weight_dtype))} B ({m.weight_dtype}) = "
        f"{fmt_bytes(w)}; usable {d.memory_fraction} x {d.gpus} x {fmt_bytes(d.hardware.hbm_bytes)}"
        f" = {fmt_bytes(usable)}: {'fits' if fits else 'DOES NOT FIT'}",
    )
    per_tok = kv.kv_bytes_per_token(m)
    if not fits:
        return  # no KV cache: no capacity, concurrency or figures derived from them
    lines.add(
        "kv_bytes_per_token",
        f"KV cache per token ({m.kv_dtype})",
        per_tok,
        "B",
        f"{_kv_chain(m)} = {fmt_count(per_tok)} B",
    )
    ctx = m.max_context or 131072
    full = kv.kv_bytes(m, ctx)
    lines.add(
        "kv_bytes_max_context",
        f"KV cache of one {fmt_count(ctx)}-token request",
        full,
        "B",
        f"{fmt_count(per_tok)} B x {ctx} = {fmt_bytes(full)} ({fmt(kv.gib(full), 4)} GiB)"
        + (" (sliding-window layers hold only the window)" if m.attention == "sliding" else ""),
    )
    budget = kv.kv_budget_bytes(m, d)
    cap = kv.kv_capacity_tokens(m, d)
    lines.add(
        "kv_capacity_tokens",
        "KV capacity",
        cap,
        "tokens",
        f"max(0, {fmt_bytes(usable)} - {fmt_bytes(w)}) / {fmt_count(per_tok)} B = "
        f"{fmt_count(cap)} tokens",
    )
    seq = inp.prompt_tokens + inp.output_tokens
    conc = kv.max_concurrent_requests(m, d, seq)
    lines.add(
        "max_concurrent_requests",
        f"Concurrent requests of {seq} tokens",
        conc,
        "requests",
        f"{fmt_bytes(budget)} / {fmt_bytes(kv.kv_bytes(m, seq))} = {conc} requests",
    )


def _prefill(lines: _Lines, m: ModelSpec, d: Deployment, inp: PlanInputs) -> None:
    n, c = inp.prompt_tokens, inp.cached_tokens
    costs = prefill.prefill_costs(m, d, n, c)
    f = costs[0].compute_flops_per_s
    lin = sum(x.linear_flops for x in costs)
    att = sum(x.attention_flops for x in costs)
    lines.add(
        "prefill_linear_s",
        f"Prefill of {n} tokens, weights term",
        lin / f,
        "s",
        f"2 x {fmt(m.params_active)} x {n} / {fmt(f)} = {fmt_s(lin / f)}"
        f"   (effective FLOP/s = {d.tensor_parallel} x {fmt(d.hardware.peak_flops(m.weight_dtype))}"
        f" x {fmt(d.compute_efficiency)})",
    )
    width = m.attention_qk_dim + m.attention_v_dim
    lines.add(
        "prefill_attention_s",
        "Prefill, attention term",
        att / f,
        "s",
        f"2 x {m.self_attention_layers} x {m.q_heads} x {width} x ({n} x {c} + {n}^2/2) / {fmt(f)}"
        f" = {fmt(att)} FLOP / {fmt(f)} = {fmt_s(att / f)} (+{fmt(100 * att / lin, 2)}%)",
    )
    byt = sum(x.bytes for x in costs)
    bw = costs[0].bandwidth_bytes_per_s
    lines.add(
        "prefill_memory_s",
        "Prefill, HBM term",
        byt / bw,
        "s",
        f"({fmt_bytes(sum(x.weight_bytes for x in costs))} weights + "
        f"{fmt_bytes(sum(x.kv_bytes for x in costs))} KV) / {fmt(bw)} B/s = {fmt_s(byt / bw)}",
    )
    total = sum(x.time_s for x in costs)
    steps = f" over {len(costs)} chunks of {d.chunk_tokens}" if len(costs) > 1 else ""
    lines.add(
        "prefill_time_s",
        f"Prefill time{steps}",
        total,
        "s",
        (
            f"max({fmt_s((lin + att) / f)} compute, {fmt_s(byt / bw)} memory) + "
            f"{len(costs)} x {fmt_s(d.step_overhead_s)} overhead = {fmt_s(total)}"
            if d.profile is None
            else _profiled_chain(costs, total)
        ),
    )


def _profiled_chain(costs: Sequence[StepCost], total: float) -> str:
    """The profiled step sum: ``max(launch, max(compute, memory) + all-reduce) + overhead``."""
    compute = sum(c.compute_s for c in costs)
    memory = sum(c.memory_s for c in costs)
    return (
        f"sum over {len(costs)} step(s) of max({fmt_s(sum(c.launch_s for c in costs))} launch, "
        f"max({fmt_s(compute)} compute, {fmt_s(memory)} memory) + "
        f"{fmt_s(sum(c.collective_s for c in costs))} all-reduce) + "
        f"{fmt_s(sum(c.overhead_s for c in costs))} overhead = {fmt_s(total)} (profile)"
    )


def _decode(lines: _Lines, m: ModelSpec, d: Deployment, inp: PlanInputs) -> int:
    ideal = d.ideal()
    w = weights.weights_read_bytes(m, 1)
    bw_peak = d.tensor_parallel * d.hardware.hbm_bandwidth_bytes_per_s
    lines.add(
        "decode_lower_bound_s",
        "Decode step lower bound (weights only, 100% HBM)",
        w / bw_peak,
        "s",
        f"{fmt_bytes(w)} / ({d.tensor_parallel} x {fmt(d.hardware.hbm_bandwidth_bytes_per_s)} B/s)"
        f" = {fmt_s(w / bw_peak)}",
    )
    ctx = inp.prompt_tokens + inp.output_tokens // 2
    one = decode.decode_cost(m, ideal, [ctx])
    lines.add(
        "decode_step_batch1_s",
        f"Decode step, batch 1 at {ctx} context (100% HBM)",
        one.time_s,
        "s",
        f"({fmt_bytes(one.weight_bytes)} + {fmt_bytes(one.kv_bytes)} KV) / {fmt(bw_peak)} B/s"
        f" = {fmt_s(one.time_s)}",
    )
    seq = inp.prompt_tokens + inp.output_tokens
    batch = inp.decode_batch or disagg.default_decode_batch(m, d, seq)
    cost = decode.uniform_decode_cost(m, d, batch, ctx)
    tpot = cost.time_s
    lines.add(
        "tpot_s",
        f"TPOT at batch {batch}, {ctx} context",
        tpot,
        "s",
        (
            f"max({fmt(cost.flops)} FLOP / {fmt(cost.compute_flops_per_s)}, "
            f"({fmt_bytes(cost.weight_bytes)} + {batch} x {fmt_bytes(cost.kv_bytes / batch)}) / "
            f"{fmt(cost.bandwidth_bytes_per_s)} B/s) + {fmt_s(d.step_overhead_s)} = {fmt_s(tpot)}"
            f" ({'compute' if cost.compute_bound else 'bandwidth'}-bound)"
            if d.profile is None
            else _profiled_chain([cost], tpot)
        ),
    )
    lines.add(
        "decode_tokens_per_s",
        f"Decode throughput at batch {batch}",
        batch / tpot,
        "tokens/s",
        f"{batch} / {fmt_s(tpot)} = {fmt(batch / tpot)} tokens/s",
    )
    return batch


def _transfer(lines: _Lines, m: ModelSpec, inp: PlanInputs, links: Sequence[LinkSpec]) -> None:
    for n in sorted({inp.prompt_tokens, m.max_context or 131072}):
        payload = kv.kv_bytes(m, n)
        for link in links:
            t = kv.kv_transfer_time_s(m, n, link)
            lines.add(
                f"kv_transfer_s.{link.name}.{n}",
                f"KV transfer of {n} tokens over {link.name}",
                t,
                "s",
                f"{fmt_bytes(payload)} / {fmt(link.bandwidth_bytes_per_s)} B/s = {fmt_s(t)}",
            )


def _slo(lines: _Lines, m: ModelSpec, d: Deployment, inp: PlanInputs) -> None:
    if inp.slo_ttft_ms is None:
        return
    budget = inp.slo_ttft_ms / 1e3
    longest = prefill.max_prompt_for_ttft(m, d, budget, n_cached=inp.cached_tokens)
    lines.add(
        "max_prompt_tokens_for_ttft",
        f"Longest prompt within TTFT {fmt(inp.slo_ttft_ms)} ms (prefill only)",
        longest,
        "tokens",
        f"largest n with prefill_time(n) <= {fmt_s(budget)}: n = {fmt_count(longest)}"
        f" (prefill_time = {fmt_s(prefill.prefill_time_s(m, d, max(longest, 1)))})",
    )
    service = prefill.prefill_time_s(m, d, inp.prompt_tokens, inp.cached_tokens)
    rho = queueing.max_utilisation(service, budget)
    room = budget - service
    lines.add(
        "max_utilisation_for_ttft",
        f"Utilisation the TTFT SLO allows (M/D/1, {inp.prompt_tokens}-token prompts)",
        rho,
        "",
        (
            f"rho = 2w / (S + 2w), S = {fmt_s(service)}, w = {fmt_s(budget)} - S = {fmt_s(room)}"
            f": rho = {fmt(rho, 3)}, the SLO costs {fmt(100 * (1 - rho), 3)}% of capacity"
        )
        if room > 0
        else f"prefill alone ({fmt_s(service)}) exceeds the budget: rho = 0",
    )


def _pools(
    lines: _Lines,
    m: ModelSpec,
    d: Deployment,
    inp: PlanInputs,
    trace_lengths: tuple[Sequence[int], Sequence[int]] | None,
    batch: int,
    link: LinkSpec,
) -> None:
    prompts, outputs = trace_lengths or ([inp.prompt_tokens], [inp.output_tokens])
    ratio = disagg.pool_ratio(m, d, prompts, outputs, decode_batch=batch)
    src = f"trace {inp.trace}" if trace_lengths else "the given lengths"
    lines.add(
        "pool_ratio_prefill_per_decode",
        f"Prefill:decode replicas for {src}",
        ratio.prefill_per_decode,
        "",
        f"mean prefill {fmt_s(ratio.prefill_s_per_request)} / (mean output "
        f"{fmt(ratio.mean_output_tokens, 4)} x TPOT / {ratio.decode_batch} = "
        f"{fmt_s(ratio.decode_s_per_request)}) = {fmt(ratio.prefill_per_decode, 3)} : 1",
    )
    slo_ttft = (inp.slo_ttft_ms or 2000.0) / 1e3
    be = disagg.disagg_break_even(
        m,
        d,
        replicas=inp.replicas,
        prompt_tokens=round(ratio.mean_prompt_tokens),
        output_tokens=max(1, round(ratio.mean_output_tokens)),
        slo_ttft_s=slo_ttft,
        slo_tpot_s=inp.slo_tpot_ms / 1e3,
        link=link,
    )
    rate = be.break_even_rate_per_s
    if rate is not None:
        verdict = f"disaggregation wins above {fmt(rate, 3)} req/s"
    elif be.disagg_max_rate_per_s == 0:
        verdict = "neither layout meets the SLOs at any rate"
    else:
        verdict = "the monolith is as good or better at every rate"
    lines.add(
        "disagg_break_even_rate_per_s",
        f"Disaggregation break-even, {inp.replicas} replicas, TTFT {fmt_s(slo_ttft)}, "
        f"TPOT {fmt(inp.slo_tpot_ms)} ms, {link.name}",
        rate if rate is not None else float("inf"),
        "req/s",
        f"monolith max {fmt(be.monolith_max_rate_per_s, 3)} req/s; {be.prefill_replicas}P:"
        f"{be.decode_replicas}D max {fmt(be.disagg_max_rate_per_s, 3)} req/s: {verdict}",
    )


def _images(lines: _Lines, m: ModelSpec, d: Deployment, inp: PlanInputs) -> None:
    if m.vision is None:
        return
    w, h = inp.image_width, inp.image_height
    toks = images.image_tokens(m, w, h)
    lines.add(
        "image_tokens",
        f"LM tokens of a {w}x{h} image ({m.vision.family})",
        toks,
        "tokens",
        f"{m.vision.family} rule at {w}x{h} = {toks} tokens",
    )
    flops = images.image_encoder_flops(m, w, h)
    t = images.image_encoder_time_s(m, d, w, h)
    peak = d.hardware.peak_flops("bf16") * d.prefill_efficiency
    lines.add(
        "image_encoder_s",
        "Vision encoder time for that image (one GPU, bf16)",
        t,
        "s",
        f"2 x {fmt(m.vision.encoder_params)} x {fmt(flops / (2 * m.vision.encoder_params))}"
        f" patches / {fmt(peak)} = {fmt_s(t)}",
    )
    n = inp.prompt_tokens + toks
    with_image = t + prefill.prefill_time_s(m, d, n, inp.cached_tokens)
    lines.add(
        "prefill_with_image_s",
        f"Encoder plus prefill of {inp.prompt_tokens} text + {toks} image tokens",
        with_image,
        "s",
        f"{fmt_s(t)} + prefill_time({n}) {fmt_s(with_image - t)} = {fmt_s(with_image)}",
    )


def _refusal(m: ModelSpec, d: Deployment, inp: PlanInputs) -> str:
    """Why the replica cannot serve the workload at all ("" when it can): its weights do
    not fit, or one request's KV cache exceeds what the weights leave."""
    w = weights.weights_bytes(m)
    usable = weights.usable_memory_bytes(d)
    if not weights.fits(m, d):
        need = math.ceil(w / (d.memory_fraction * d.hardware.hbm_bytes))
        return (
            f"DOES NOT FIT: {m.name} weights {fmt_bytes(w)} exceed the usable "
            f"{fmt_bytes(usable)} of {d.gpus} x {d.hardware.name} ({d.memory_fraction} x "
            f"{fmt_bytes(d.hardware.hbm_bytes)} each); the weights alone need {need} GPUs, and "
            f"the KV cache more; no KV capacity, TPOT or throughput is computed"
        )
    seq = inp.prompt_tokens + inp.output_tokens
    if kv.max_concurrent_requests(m, d, seq) < 1:
        return (
            f"DOES NOT FIT: one request of {seq} tokens needs {fmt_bytes(kv.kv_bytes(m, seq))} "
            f"of KV cache; {d.gpus} x {d.hardware.name} leave {fmt_bytes(kv.kv_budget_bytes(m, d))}"
            f" ({fmt_count(kv.kv_capacity_tokens(m, d))} tokens) after the weights; no TPOT or "
            f"throughput is computed"
        )
    return ""


def build_report(
    model: ModelSpec,
    deploy: Deployment,
    inputs: PlanInputs,
    *,
    links: Sequence[LinkSpec],
    break_even_link: LinkSpec,
    trace_lengths: tuple[Sequence[int], Sequence[int]] | None = None,
) -> BudgetReport:
    """Every prediction for ``model`` on ``deploy`` under ``inputs``, in print order.

    ``links`` are tabulated for KV transfer; ``break_even_link`` carries the KV in the
    disaggregation estimate; ``trace_lengths`` (prompt and output lengths of a trace)
    drive the pool ratio when given.
    """
    lines = _Lines()
    _memory(lines, model, deploy, inputs)
    if weights.fits(model, deploy):  # the million-token chapter (a KV budget to share)
        for line in longctx.long_context_lines(
            model, deploy, inputs.prompt_tokens, inputs.output_tokens, inputs.cached_tokens
        ):
            lines.add(*line)
    refusal = _refusal(model, deploy, inputs)
    if refusal:
        return BudgetReport(
            model=model,
            deployment=deploy,
            inputs=inputs,
            predictions=tuple(lines.items),
            refusal=refusal,
        )
    _prefill(lines, model, deploy, inputs)
    _images(lines, model, deploy, inputs)
    batch = _decode(lines, model, deploy, inputs)
    if deploy.chunk_tokens is not None and weights.fits(model, deploy):
        for step in chunksteps.chunk_step_lines(
            lambda work: step_time_s(model, deploy, work),
            deploy.chunk_tokens,
            prompt_tokens=max(1, inputs.prompt_tokens - inputs.cached_tokens),
            output_tokens=inputs.output_tokens,
            batch=batch,
        ):
            lines.add(step.key, step.title, step.value_s, "s", step.chain)
    _transfer(lines, model, inputs, links)
    _slo(lines, model, deploy, inputs)
    if weights.fits(model, deploy):
        _pools(lines, model, deploy, inputs, trace_lengths, batch, break_even_link)
    return BudgetReport(
        model=model, deployment=deploy, inputs=inputs, predictions=tuple(lines.items)
    )
