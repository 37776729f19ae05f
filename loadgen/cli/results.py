"""``results.json``: a finished run's summary where scripts look for it, written by the CLI
after ``replay``, ``simulate`` and each ``sweep`` step (the replay itself never imports the
analyzers). It is ``loadgen analyze RUN --json`` with default options (the expected cached tokens
included when the trace is where ``run.json`` says), under ``"loadgen"``,
plus one block per class (``"overall"`` and each workload) keyed as ``vllm bench serve
--save-result`` keys the same quantities; docs/formats.md says where the definitions differ.
A class of embeddings requests only has no output, TTFT, TPOT or ITL keys, and has
``item_throughput`` and ``input_throughput`` instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS_FILE = "results.json"
RESULTS_SCHEMA_VERSION = 1

# Our metric name -> vllm bench serve's metric stem (mean_/median_/pNN_ + stem + _ms).
_VLLM_METRICS = {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "e2e_ms": "e2el"}


def _vllm_block(c: dict[str, Any]) -> dict[str, Any]:
    """One class's summary under vllm bench serve's keys (no per-request arrays)."""
    duration = float(c["duration_s"] or 0.0)
    total_tps = float(c["total_tokens_per_s"] or 0.0)
    out_tps = float(c["output_tokens_per_s"] or 0.0)
    goodput = c.get("goodput")
    block: dict[str, Any] = {
        "duration": duration,
        "completed": c["ok"],
        "failed": c["requests"] - c["ok"],
        "total_input_tokens": round((total_tps - out_tps) * duration),
        "total_output_tokens": c["output_tokens"],
        "request_throughput": c["requests_per_s"],
        "request_goodput": goodput.get("rate_per_s") if isinstance(goodput, dict) else None,
        "output_throughput": out_tps,
        "total_token_throughput": total_tps,
    }
    if c.get("embeddings_requests") and c["embeddings_requests"] == c["requests"]:
        # Embeddings only: nothing streams back. No output, TTFT, TPOT nor ITL keys (they
        # would read 0 or null); the latency is E2E, the rate items and input tokens.
        for key in ("total_output_tokens", "output_throughput"):
            del block[key]
        block["item_throughput"] = c.get("items_per_s")
        block["input_throughput"] = c.get("input_tokens_per_s")
        metrics = {"e2e_ms": "e2el"}
    else:
        metrics = _VLLM_METRICS
    for ours, stem in metrics.items():
        m = c["metrics"].get(ours, {})
        block[f"mean_{stem}_ms"] = m.get("mean")
        block[f"median_{stem}_ms"] = m.get("p50")
        for key, value in m.items():
            if key.startswith("p") and key != "p50":
                block[f"{key}_{stem}_ms"] = value
    return block


def results_doc(analysis: dict[str, Any]) -> dict[str, Any]:
    """``results.json``'s document from ``analyze --json``'s (``reports.jsondoc``)."""
    classes = {"overall": _vllm_block(analysis["overall"])}
    for c in analysis.get("classes") or []:
        classes[str(c["workload"])] = _vllm_block(c)
    validity = analysis["validity"]
    return {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "kind": "results",
        "valid": validity["valid"],
        "validity": validity,
        **classes["overall"],
        "classes": classes,
        "loadgen": analysis,
    }


def write_run_results(run_dir: Path) -> Path | None:
    """Analyse ``run_dir`` as ``analyze --json`` does and write ``RUN/results.json``; None
    (nothing written) when the run has no rows to analyse."""
    from analyzers.analysis import AnalysisOptions
    from analyzers.cache import CacheOptions
    from analyzers.errors import InvalidRunError
    from analyzers.metrics import analyze
    from reports.jsondoc import analysis_json

    try:
        analysis = analyze(run_dir, AnalysisOptions(cache=CacheOptions()))
    except InvalidRunError:
        return None
    path = run_dir / RESULTS_FILE
    path.write_text(json.dumps(results_doc(analysis_json(analysis)), indent=1, allow_nan=False))
    return path
