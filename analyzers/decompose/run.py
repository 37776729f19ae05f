"""The TTFT decomposition of one run directory, end to end.

``decompose(run, budget, options)`` splits every ok request's ``first_token - due`` into
its terms (:mod:`analyzers.decompose.terms`), judges the run's validity on the same rows,
aggregates per class and percentile (:mod:`analyzers.decompose.report`) and, with a budget
and the load replay, says what the deployment's chunk size does to ITL and TTFT p99
(:mod:`analyzers.decompose.chunking`). Polars, like
the rest of the package; must not import loadgen or httpx.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from analyzers.decompose.chunking import chunking_line
from analyzers.decompose.load import ROW
from analyzers.decompose.model import BudgetModel
from analyzers.decompose.options import DecomposeOptions
from analyzers.decompose.report import Decomposition, build_decomposition
from analyzers.decompose.terms import request_terms
from analyzers.exprs import CLASS
from analyzers.frames import scan_run, select_rows
from analyzers.metrics import run_validity
from analyzers.throughput import auto_window_s
from analyzers.validity import ClassCount
from traces import schema as s


def decompose(
    run: Path | str, budget: BudgetModel | None = None, options: DecomposeOptions | None = None
) -> Decomposition:
    """Decompose the TTFT of a run (see ``DecomposeOptions``); ``budget`` is needed when the
    server reports no timings (or they are hidden) and to calibrate."""
    options = options or DecomposeOptions()
    terms = request_terms(run, budget, options)
    last_due = terms.frame.get_column(s.DUE_NS).max()
    span_ns = (last_due if isinstance(last_due, int) else terms.first_due_ns) - terms.first_due_ns
    window_s = options.window_s or auto_window_s(max(span_ns, 0) / 1e9, windows=10)
    by_class = terms.frame.group_by(CLASS).len()
    counts = [ClassCount(workload=str(c), requests=int(n)) for c, n in by_class.iter_rows()]
    validity = run_validity(
        run,
        select_rows(scan_run(run), options.selection),
        class_counts=sorted(counts, key=lambda c: c.workload),
        percentiles=options.percentiles,
        thresholds=options.thresholds,
    )
    result = build_decomposition(str(run), terms, options, window_s=window_s, validity=validity)
    if budget is None or not options.load_aware:
        return result
    line = chunking_line(
        scan_run(run).with_row_index(ROW),
        budget,
        network_ms=terms.network.value_ms,
        time_scale=options.time_scale,
        max_steps=options.max_replay_steps,
    )
    return replace(result, chunking=line)
