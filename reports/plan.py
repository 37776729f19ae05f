"""The plan as text a person reads: one line per prediction, then its arithmetic chain
(``loadgen plan``), and a claim's verdict (``loadgen plan check-claim``).

Pure string building from a ``BudgetReport`` or ``ClaimVerdict``; the CLI prints what
this returns. Values are written in the chains' own engineering notation
(``analyzers.budget.formatting``), so that a prediction's value and the chain under it
read alike (``0.47 s`` over ``... = 0.47 s``). Must not import ``loadgen``, httpx or
polars: ``loadgen plan`` stays light.
"""

from __future__ import annotations

from analyzers.budget.claims import ClaimVerdict
from analyzers.budget.formatting import fmt, fmt_bytes, fmt_count, fmt_s
from analyzers.budget.report import BudgetReport, Prediction


def _value(p: Prediction) -> str:
    """A prediction's value with its unit, in the friendliest form."""
    if p.unit == "s":
        return fmt_s(p.value)
    if p.unit == "B":
        return fmt_bytes(p.value)
    if p.unit in ("tokens", "requests"):
        return f"{fmt_count(p.value)} {p.unit}"
    if p.unit:
        return f"{fmt(p.value, 4)} {p.unit}"
    return fmt(p.value, 3)


def render_report(report: BudgetReport) -> str:
    """The budget as readable text: a header, then title, value and chain per prediction."""
    m, d, inp = report.model, report.deployment, report.inputs
    hw = d.hardware
    head = [
        f"Budget: {m.name} ({m.weight_dtype} weights, {m.kv_dtype} KV) on "
        f"{d.tensor_parallel}x{d.pipeline_parallel} {hw.name} (tp x pp)",
        f"  efficiency: prefill {d.prefill_efficiency} of peak FLOP/s, decode "
        f"{d.decode_efficiency} of HBM bandwidth; step overhead {fmt_s(d.step_overhead_s)}",
        f"  workload: {inp.prompt_tokens} prompt tokens ({inp.cached_tokens} cached), "
        f"{inp.output_tokens} output tokens" + (f", trace {inp.trace}" if inp.trace else ""),
        "",
    ]
    body: list[str] = []
    for p in report.predictions:
        body.append(f"{p.title}: {_value(p)}")
        body.append(f"    {p.chain}")
    return "\n".join(head + body)


def render_claim(verdict: ClaimVerdict, model_name: str, gpu_name: str, gpus: int) -> str:
    """A claim verdict as text: POSSIBLE or IMPOSSIBLE, the bounds, the reasons."""
    word = "POSSIBLE" if verdict.possible else "IMPOSSIBLE"
    lines = [
        f"Claim: {fmt(verdict.tokens_per_s)} {verdict.phase} tokens/s for {model_name} on "
        f"{gpus} x {gpu_name}: {word}",
        *(f"    {c}" for c in verdict.chains),
    ]
    lines.extend(f"  reason: {r}" for r in verdict.reasons)
    return "\n".join(lines)
