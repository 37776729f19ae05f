"""The plan as text a person reads: one line per prediction, then its arithmetic chain
(``loadgen plan``), a claim's verdict (``loadgen plan check-claim``), a calibration's
residuals (``loadgen plan calibrate``), admission control's figures (``loadgen plan
admission``), the chunk-size table (``loadgen plan chunk``) and a pipeline's fleet
(``loadgen plan fleet``).

Pure string building from a ``BudgetReport`` or ``ClaimVerdict``; the CLI prints what
this returns. Values are written in the chains' own engineering notation
(``analyzers.budget.formatting``), so that a prediction's value and the chain under it
read alike (``0.47 s`` over ``... = 0.47 s``). Must not import ``loadgen``, httpx or
polars: ``loadgen plan`` stays light.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from analyzers.budget.admission import AdmissionPlan
from analyzers.budget.calibrate import ProfileFit, Residual
from analyzers.budget.chunking import ChunkPlan
from analyzers.budget.claims import ClaimVerdict
from analyzers.budget.fleet import FleetLine, FleetPlan
from analyzers.budget.formatting import fmt, fmt_bytes, fmt_count, fmt_s
from analyzers.budget.report import BudgetReport, Prediction
from analyzers.budget.specs import Deployment


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


def _efficiency_line(d: Deployment) -> str:
    if d.profile is None:
        return (
            f"  efficiency: prefill {d.prefill_efficiency} of peak FLOP/s, decode "
            f"{d.decode_efficiency} of HBM bandwidth; step overhead {fmt_s(d.step_overhead_s)}"
        )
    pf, dc = d.profile.prefill, d.profile.decode
    return (
        f"  profile {d.profile.name!r}: prefill {fmt(pf.compute_efficiency, 3)} of peak "
        f"FLOP/s, launch {fmt_s(pf.layer_overhead_s)}/layer; decode "
        f"{fmt(dc.memory_efficiency, 3)} of HBM bandwidth, step {fmt_s(dc.step_overhead_s)}"
        f" + {fmt_s(dc.sequence_overhead_s)}/sequence; all-reduce link "
        f"{fmt(pf.link_efficiency, 3)}/{fmt(dc.link_efficiency, 3)}"
    )


def _summary(label: str, rows: Sequence[Residual]) -> str:
    if not rows:
        return f"    {label}: no points"
    errors = [r.abs_error for r in rows]
    worst = max(rows, key=lambda r: r.abs_error)
    o = worst.observation
    return (
        f"    {label}: {len(rows)} points, median |error| {statistics.median(errors) * 100:.1f}% "
        f"worst {worst.abs_error * 100:.1f}% at "
        f"{o.model} tp{o.tensor_parallel} {o.prompt_tokens} tokens x{o.batch}"
        + (f" beside {o.decoding} decoding" if o.decoding else "")
    )


def render_calibration(fits: Sequence[ProfileFit], *, all_points: bool = True) -> str:
    """Each fitted profile: its parameters, every point's predicted, measured and ratio
    (``all_points``), and the median and worst relative error per phase, fitted and held out."""
    out: list[str] = []
    for f in fits:
        p = f.profile
        out.append(f"Profile {p.name} (gpu {p.gpu}{', engine ' + p.engine if p.engine else ''})")
        for phase in ("prefill", "decode"):
            v = p.phase(phase == "prefill")
            out.append(
                f"  {phase}: compute {fmt(v.compute_efficiency, 3)}, memory "
                f"{fmt(v.memory_efficiency, 3)}, link {fmt(v.link_efficiency, 3)}, "
                f"all-reduce latency {fmt_s(v.collective_latency_s)}/hop, launch "
                f"{fmt_s(v.layer_overhead_s)}/layer, step {fmt_s(v.step_overhead_s)}, "
                f"{fmt_s(v.sequence_overhead_s)}/sequence"
            )
        if all_points:
            out.append(
                f"  {'phase':<7} {'model':<12} {'tp':>2} {'tokens':>6} {'batch':>5} "
                f"{'measured':>10} {'predicted':>10} {'ratio':>6}  set"
            )
            for r in f.residuals:
                o = r.observation
                batch = f"{o.batch}+{o.decoding}d" if o.decoding else str(o.batch)
                out.append(
                    f"  {o.phase:<7} {o.model:<12} {o.tensor_parallel:>2} {o.prompt_tokens:>6} "
                    f"{batch:>5} {o.seconds * 1e3:>8.1f}ms {r.predicted_s * 1e3:>8.1f}ms "
                    f"{r.ratio:>6.2f}  {'held out' if r.held_out else 'fitted'}"
                )
        for phase in ("prefill", "decode"):
            for held_out in (False, True):
                kept = "held out" if held_out else "fitted"
                for batched in (False, True):
                    rows = f.select(phase=phase, held_out=held_out, batched=batched, mixed=False)
                    label = f"{phase} {'batched' if batched else 'batch 1'} {kept}"
                    if rows:
                        out.append(_summary(label, rows))
                rows = f.select(phase=phase, held_out=held_out, mixed=True)
                if rows:
                    out.append(_summary(f"{phase} beside decodes {kept}", rows))
        out.append("")
    return "\n".join(out).rstrip("\n")


def render_report(report: BudgetReport) -> str:
    """The budget as readable text: a header, then title, value and chain per prediction."""
    m, d, inp = report.model, report.deployment, report.inputs
    hw = d.hardware
    head = [
        f"Budget: {m.name} ({m.weight_dtype} weights, {m.kv_dtype} KV) on "
        f"{d.tensor_parallel}x{d.pipeline_parallel} {hw.name} (tp x pp)",
        _efficiency_line(d),
        f"  workload: {inp.prompt_tokens} prompt tokens ({inp.cached_tokens} cached), "
        f"{inp.output_tokens} output tokens" + (f", trace {inp.trace}" if inp.trace else ""),
        "",
    ]
    body: list[str] = []
    for p in report.predictions:
        body.append(f"{p.title}: {_value(p)}")
        body.append(f"    {p.chain}")
    if report.refusal:
        body.append(report.refusal)
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


def render_admission(plan: AdmissionPlan) -> str:
    """``loadgen plan admission``: each figure, then its arithmetic."""
    lines = [
        f"Admission control for {plan.model} ({plan.where}), TTFT budget {fmt_s(plan.budget_s)}:"
    ]
    for line in plan.lines:
        lines.append(f"{line.label + ':':<29} {line.value}")
        lines.append(f"  {line.chain}")
    return "\n".join(lines)


def _fleet_lines(lines: Sequence[FleetLine], out: list[str]) -> None:
    for line in lines:
        out.append(f"  {line.label + ':':<28} {line.value}")
        out.append(f"      {line.chain}")


def render_fleet(plan: FleetPlan) -> str:
    """``loadgen plan fleet``: the budget split, then each stage's chain from queries/s to
    nodes, then the answer tier at each cache hit rate and the totals."""
    out = [
        f"Fleet for {plan.name} ({plan.path}): {fmt(plan.queries_per_s)} queries/s, "
        f"end-to-end p99 budget {fmt_s(plan.e2e_p99_s)}",
        "",
        "Budget split (p99 per stage; the stages' p99s add up to at most the whole):",
    ]
    for share in plan.split:
        out.append(f"  {share.stage + ':':<28} {fmt_s(share.budget_s):>8}  {share.share:6.1%}")
    out.append(f"  {'total:':<28} {fmt_s(sum(s.budget_s for s in plan.split)):>8}  100.0%")
    for stage in plan.stages:
        out += ["", f"{stage.name} ({stage.kind}, p99 {fmt_s(stage.budget_s)}):"]
        _fleet_lines(stage.lines, out)
    out += ["", f"{plan.answer_name} (llm: {plan.answer_where}):"]
    _fleet_lines(plan.answer_lines, out)
    for answer in plan.answers:
        out += ["", f"{plan.answer_name} at cache hit {answer.cache_hit:g}:"]
        _fleet_lines(answer.lines, out)
    out += ["", "Nodes:"]
    upstream = " + ".join(f"{s.name} {s.nodes:,}" for s in plan.stages)
    for answer in plan.answers:
        total = sum(s.nodes for s in plan.stages) + answer.nodes
        out.append(
            f"  cache hit {answer.cache_hit:<4g} {upstream} + {plan.answer_name} "
            f"{answer.nodes:,} = {total:,}"
        )
    return "\n".join(out)


def _mark(ok: bool | None) -> str:
    return "" if ok is None else ("ok" if ok else "MISS")


def render_chunks(plan: ChunkPlan) -> str:
    """``loadgen plan chunk``: the table per chunk size, each row's arithmetic, the
    deployment's chunk size against unchunked, and the recommendation."""
    head = (
        f"{'chunk':>9}  {'steps/prompt':>12}  {'TTFT p50':>9}  {'TTFT p99':>9}  "
        f"{'ITL p50':>8}  {'ITL p99':>8}  {'ITL max':>8}  {'capacity tok/s':>14}  "
        f"{'TTFT':>4}  {'ITL':>4}"
    )
    lines = [f"Chunked prefill for {plan.model} ({plan.where}): {plan.load}", head]
    for row in plan.rows:
        run = row.run
        mark = " <-" if row.label == plan.recommended else ""
        lines.append(
            f"{row.label:>9}  {row.steps_per_prompt:>12}  {run.ttft_p50_s * 1e3:>6.1f} ms  "
            f"{run.ttft_p99_s * 1e3:>6.1f} ms  {run.itl_p50_s * 1e3:>5.1f} ms  "
            f"{run.itl_p99_s * 1e3:>5.1f} ms  {run.itl_max_s * 1e3:>5.1f} ms  "
            f"{fmt(run.capacity_tokens_per_s, 4):>14}  "
            f"{_mark(row.meets_ttft):>4}  {_mark(row.meets_itl):>4}{mark}"
        )
    lines.append("Arithmetic (closed form beside the engine's p99):")
    for line in plan.lines:
        lines.append(f"{line.label + ':':<16} {line.value}")
        lines.append(f"  {line.chain}")
    if plan.deployment_line:
        lines.append(plan.deployment_line[0].upper() + plan.deployment_line[1:])
    lines.append(plan.verdict[0].upper() + plan.verdict[1:])
    return "\n".join(lines)
