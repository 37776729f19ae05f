"""``loadgen trace info|validate|slice|scale|merge``: inspect and transform trace files.

Thin commands over ``traces.stats`` and ``traces.transform``; every output file keeps its
inputs' provenance and appends the operation to it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import click

from loadgen.cli.options.outfile import parquet_out
from reports import fmt
from traces.context import ContextOverflow, clip_inputs, context_overflow
from traces.io import read_metadata, read_trace_table, write_trace
from traces.stats import ClassStats, TraceStats, trace_stats
from traces.transform import (
    Slice,
    Source,
    extend_provenance,
    merge_traces,
    scale_trace,
    slice_trace,
)

_TRACE = click.Path(dir_okay=False, path_type=Path)


def _class_row(c: ClassStats) -> str:
    i, o = c.input_tokens, c.output_tokens
    return (
        f"  {c.workload:<14} {c.requests:>9}  "
        f"{i.mean:>9.1f} {i.p50:>9.0f} {i.p90:>9.0f} {i.p99:>9.0f} {i.max:>9}  "
        f"{o.mean:>8.1f} {o.p50:>7.0f} {o.p90:>7.0f} {o.p99:>7.0f} {o.max:>7}"
    )


def render_stats(path: Path, st: TraceStats, meta: dict[str, Any]) -> str:
    """The human-readable ``trace info`` report."""
    lines = [
        f"trace            {path}",
        f"source           {meta.get('source', '-')}"
        + (f" ({meta['source_file']})" if "source_file" in meta else ""),
        f"requests         {st.rows}",
        f"duration         {st.duration_s:.3f} s",
        f"mean rate        {fmt.fixed(st.mean_rate_rps)} req/s",
        f"inter-arrival CV {fmt.fixed(st.interarrival_cv)}",
        f"prefix blocks    {st.prefix_blocks}  "
        f"reuse ratio {fmt.fixed(st.prefix_reuse_ratio, '.4f')}",
    ]
    if st.images:
        lines.append(
            f"images           {st.images}  image tokens {fmt.fixed(st.image_tokens_sum, 'd')}"
        )
    if st.sessions:
        lines.append(f"sessions         {st.sessions}")
    lines.append(f"prompt tokens    {st.expected_prompt_tokens} expected (text + image)")
    lines.append(
        f"  {'workload':<14} {'requests':>9}  "
        f"{'in mean':>9} {'in p50':>9} {'in p90':>9} {'in p99':>9} {'in max':>9}  "
        f"{'out mean':>8} {'out p50':>7} {'out p90':>7} {'out p99':>7} {'out max':>7}"
    )
    lines.extend(_class_row(c) for c in st.classes)
    if len(st.classes) > 1:
        lines.append(_class_row(st.overall))
    return "\n".join(lines)


def _context_limit(max_context: int | None, model: str | None) -> tuple[int, str] | None:
    """The context limit to check against and where it comes from (None: not asked)."""
    if max_context is not None:
        return max_context, "--max-context"
    if model is None:
        return None
    from analyzers.budget.catalog import load_catalog  # deferred: only with --model

    spec = load_catalog().model(model)
    if spec.max_context is None:
        raise click.UsageError(f"the catalog gives no max_context for {spec.name}")
    return spec.max_context, f"{spec.name}'s max_context in the catalog"


@click.command()
@click.argument("trace", type=_TRACE)
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
@click.option(
    "--max-context",
    type=click.IntRange(min=1),
    default=None,
    help="Count requests whose prompt + output exceed this context (tokens).",
)
@click.option(
    "--model",
    default=None,
    help="Catalog model whose max_context to check against (e.g. llama-3.1-8b).",
)
def info(trace: Path, as_json: bool, max_context: int | None, model: str | None) -> None:
    """Summarize TRACE: rate, burstiness, lengths by workload class, prefix reuse, images.

    With --max-context N (or --model NAME, the catalog's context) it also counts the
    requests a server of that context would refuse, and says how to clip them.

    Example: loadgen trace info trace.parquet --model llama-3.1-8b
    """
    table = read_trace_table(trace)
    stats = trace_stats(table)
    meta = read_metadata(trace)
    limit = _context_limit(max_context, model)
    overflow: ContextOverflow | None = None
    if limit is not None:
        overflow = context_overflow(table, limit=limit[0], source=limit[1])
    if as_json:
        payload = {"trace": str(trace), "provenance": meta, **dataclasses.asdict(stats)}
        if overflow is not None:
            payload["context"] = dataclasses.asdict(overflow)
        click.echo(json.dumps(payload, indent=2, sort_keys=True))
    else:
        click.echo(render_stats(trace, stats, meta))
        if overflow is not None:
            click.echo(
                f"context          {overflow.over} of {overflow.requests} requests exceed "
                f"{overflow.limit:,} tokens ({overflow.source})"
            )
    warning = None if overflow is None else overflow.warning(str(trace))
    if warning is not None:
        click.echo(f"warning: {warning}", err=True)


@click.command()
@click.argument("trace", type=_TRACE)
def validate(trace: Path) -> None:
    """Check TRACE against schema v1: prints "ok: N requests", or the first bad row (exit 2)."""
    table = read_trace_table(trace)
    click.echo(f"ok: {table.num_rows} requests")


@click.command(name="slice")
@click.argument("trace", type=_TRACE)
@click.option(
    "-o", "--out", type=_TRACE, required=True, callback=parquet_out, help="Trace file to write."
)
@click.option("--start", "start_s", type=float, default=None, help="Keep arrivals >= this, s.")
@click.option("--end", "end_s", type=float, default=None, help="Keep arrivals < this, s.")
@click.option("--first", type=int, default=None, help="Keep the first N matching requests.")
@click.option("--workload", default=None, help="Keep one workload class.")
@click.option(
    "--rezero/--no-rezero",
    default=False,
    show_default=True,
    help="Shift arrivals so the first kept request is at 0 s.",
)
@click.option(
    "--max-input-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="Clip longer text prompts (and their prefix blocks) to N tokens.",
)
def slice_(
    trace: Path,
    out: Path,
    start_s: float | None,
    end_s: float | None,
    first: int | None,
    workload: str | None,
    rezero: bool,
    max_input_tokens: int | None,
) -> None:
    """Cut TRACE by time window, count or workload class; clip long prompts.

    Example: loadgen trace slice trace.parquet -o clipped.parquet --max-input-tokens 126000
    """
    spec = Slice(start_s=start_s, end_s=end_s, first=first, workload=workload, rezero=rezero)
    meta = read_metadata(trace)
    table = slice_trace(read_trace_table(trace), spec)
    op: dict[str, object] = {"op": "slice", "input": trace.name, **dataclasses.asdict(spec)}
    clipped = 0
    if max_input_tokens is not None:
        block = meta.get("block_size")
        table, clipped = clip_inputs(
            table, max_input_tokens, block_size=block if isinstance(block, int) else None
        )
        op["max_input_tokens"] = max_input_tokens
    write_trace(table, out, extend_provenance(meta, op))
    note = f" ({clipped} clipped to {max_input_tokens} input tokens)" if clipped else ""
    click.echo(f"wrote {table.num_rows} requests{note} -> {out}")


@click.command()
@click.argument("trace", type=_TRACE)
@click.option(
    "-o", "--out", type=_TRACE, required=True, callback=parquet_out, help="Trace file to write."
)
@click.option(
    "--time-scale",
    type=float,
    default=None,
    help="Multiply every inter-arrival gap by F (2 = half the rate).",
)
@click.option("--rate", type=float, default=None, help="Target mean rate, requests/s.")
def scale(trace: Path, out: Path, time_scale: float | None, rate: float | None) -> None:
    """Rescale TRACE's time axis by one factor, keeping its burstiness."""
    result = scale_trace(read_trace_table(trace), time_scale=time_scale, rate=rate)
    op = {"op": "scale", "input": trace.name, "factor": result.factor, "rate": rate}
    write_trace(result.table, out, extend_provenance(read_metadata(trace), op))
    click.echo(f"wrote {result.table.num_rows} requests, gaps x{result.factor:.6g} -> {out}")


@click.command()
@click.argument("traces", nargs=-1, required=True, type=_TRACE)
@click.option(
    "-o", "--out", type=_TRACE, required=True, callback=parquet_out, help="Trace file to write."
)
@click.option(
    "--share-prefix-blocks",
    is_flag=True,
    default=False,
    help="Inputs share one prefix-hash space (default: keep their blocks disjoint).",
)
def merge(traces: tuple[Path, ...], out: Path, share_prefix_blocks: bool) -> None:
    """Merge TRACES into one, ordered by arrival; colliding request ids get a per-file prefix."""
    sources = [Source(table=read_trace_table(p), label=p.stem) for p in traces]
    table = merge_traces(sources, share_prefix_blocks=share_prefix_blocks)
    inputs: list[dict[str, Any]] = []
    for p in traces:
        entry = {k: v for k, v in read_metadata(p).items() if k not in ("schema_version", "kind")}
        inputs.append({"file": p.name, **entry})
    op = {
        "op": "merge",
        "inputs": [p.name for p in traces],
        "share_prefix_blocks": share_prefix_blocks,
    }
    provenance = {"source": "merge", "sources": inputs, "transforms": [op]}
    write_trace(table, out, provenance)
    click.echo(f"wrote {table.num_rows} requests from {len(traces)} traces -> {out}")
