"""Analyzer benchmark: ``analyzers.metrics.summarize`` against a plain per-request Python loop.

One command, baseline measured in the same run::

    .venv/bin/python bench/analyze.py [--requests 1000000] [--tokens 256] [--keep DIR] [--json F]

Generates a synthetic run file (``--requests`` rows of ``--tokens`` one-token content chunks,
``chunk_offsets_us`` lists; built with Polars expressions, written with pyarrow in batches),
then times, each in a fresh process so peak memory (``ru_maxrss``) is its own:

* ``polars``: ``summarize(run)``: exact TTFT, TTFT from due, TTFB, TPOT, ITL (per token),
  E2E and schedule-lag percentiles, outcomes, throughput windows;
* ``python``: ``pyarrow`` ``iter_batches(...).to_pylist()`` and a loop computing TTFT, TPOT
  and per-token ITL with exact percentiles (TTFT/TPOT sorted lists; ITL values counted in a
  ``Counter`` of integer-µs gaps, since a list of 256 M floats would need ~8 GB).

Prints the times, their ratio, peak RSS, and checks that both agree on the percentiles.
Internal mode (spawned by the driver): ``--child polars|python FILE``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from traces import schema as s  # noqa: E402

T0 = 1_700_000_000_000_000_000
BATCH = 20_000
PERCENTILES = (50.0, 90.0, 99.0)


def generate(path: Path, requests: int, tokens: int, rate_per_s: float = 1000.0) -> None:
    """Write a run file of ``requests`` ok requests with ``tokens`` one-token chunks each."""
    import polars as pl

    writer = pq.ParquetWriter(path, s.RUN_SCHEMA, compression="zstd")
    try:
        for start in range(0, requests, BATCH):
            n = min(BATCH, requests - start)
            i = pl.int_range(start, start + n, dtype=pl.Int64, eager=True)
            df = pl.DataFrame({"i": i}).with_columns(
                due=T0 + (pl.col("i") * (1e9 / rate_per_s)).cast(pl.Int64),
                lag_ns=(pl.col("i") * 7919 % 500_000),
                ttft_us=20_000 + (pl.col("i") * 104_729 % 180_000),
                step_us=4_000 + (pl.col("i") * 31 % 2_000),
            )
            df = df.with_columns(
                sent=pl.col("due") + pl.col("lag_ns"),
                offsets=(
                    pl.int_ranges(0, tokens, dtype=pl.Int64) * pl.col("step_us")
                    + pl.int_ranges(0, tokens, dtype=pl.Int64) * 37 % 1_500
                    + pl.col("ttft_us")
                ).cast(pl.List(pl.Int32)),
            )
            last_us = pl.col("offsets").list.last().cast(pl.Int64)
            df = df.select(
                pl.lit("bench").alias(s.RUN_ID),
                pl.col("i").alias(s.TRACE_INDEX),
                pl.format("q{}", "i").alias(s.REQUEST_ID),
                pl.format("bench-q{}", "i").alias(s.X_REQUEST_ID),
                pl.lit(0, dtype=pl.Int16).alias(s.WORKER),
                pl.lit("text").alias(s.WORKLOAD),
                pl.lit("chat").alias(s.API),
                pl.lit(1000, dtype=pl.Int32).alias(s.INPUT_TOKENS),
                pl.lit(tokens, dtype=pl.Int32).alias(s.OUTPUT_TOKENS),
                pl.lit(0, dtype=pl.Int16).alias(s.N_IMAGES),
                pl.lit(False).alias(s.WARMUP),
                pl.lit(False).alias(s.DRAIN),
                pl.col("due").alias(s.DUE_NS),
                pl.col("sent").alias(s.SENT_NS),
                (pl.col("sent") + 200_000).alias(s.REQUEST_WRITTEN_NS),
                (pl.col("sent") + 1_000_000).alias(s.FIRST_BYTE_NS),
                (pl.col("sent") + pl.col("ttft_us") * 1000).alias(s.FIRST_TOKEN_NS),
                (pl.col("sent") + last_us * 1000 + 100_000).alias(s.END_NS),
                pl.col("offsets").alias(s.CHUNK_OFFSETS_US),
                pl.lit([], dtype=pl.List(pl.Int32)).alias(s.REASONING_OFFSETS_US),
                pl.lit(1000, dtype=pl.Int32).alias(s.PROMPT_TOKENS),
                pl.lit(tokens, dtype=pl.Int32).alias(s.COMPLETION_TOKENS),
                pl.lit(s.OUTCOME_OK).alias(s.OUTCOME),
            )
            arrow = df.to_arrow()
            columns = [
                arrow.column(f.name).cast(f.type)
                if f.name in arrow.column_names
                else pa.nulls(n, type=f.type)
                for f in s.RUN_SCHEMA
            ]
            writer.write_table(pa.Table.from_arrays(columns, schema=s.RUN_SCHEMA))
    finally:
        writer.close()


def _quantile(sorted_values: list[float], p: float) -> float:
    """Linear interpolation between order statistics (NumPy's default, Polars' 'linear')."""
    h = (len(sorted_values) - 1) * p / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


def _counter_quantile(counts: Counter[int], p: float, scale: float) -> float:
    keys = sorted(counts)
    total = sum(counts.values())
    h = (total - 1) * p / 100
    lo = math.floor(h)

    def at(rank: int) -> float:
        seen = 0
        for k in keys:
            seen += counts[k]
            if seen > rank:
                return k / scale
        return keys[-1] / scale

    lo_v, hi_v = at(lo), at(min(lo + 1, total - 1))
    return lo_v + (h - lo) * (hi_v - lo_v)


def python_baseline(path: Path) -> dict[str, float]:
    """The straightforward loop: TTFT, TPOT, per-token ITL percentiles of ok requests."""
    ttft: list[float] = []
    tpot: list[float] = []
    itl: Counter[int] = Counter()
    cols = [s.SENT_NS, s.FIRST_TOKEN_NS, s.CHUNK_OFFSETS_US, s.OUTCOME, s.COMPLETION_TOKENS]
    for batch in pq.ParquetFile(path).iter_batches(batch_size=8192, columns=cols):
        for row in batch.to_pylist():
            if row[s.OUTCOME] != s.OUTCOME_OK:
                continue
            ttft.append((row[s.FIRST_TOKEN_NS] - row[s.SENT_NS]) / 1e6)
            offsets = row[s.CHUNK_OFFSETS_US]
            n = row[s.COMPLETION_TOKENS] or len(offsets)
            if n > 1:
                tpot.append((offsets[-1] - offsets[0]) / 1e3 / (n - 1))
            for a, b in itertools.pairwise(offsets):
                itl[b - a] += 1
    ttft.sort()
    tpot.sort()
    out: dict[str, float] = {}
    for p in PERCENTILES:
        out[f"ttft_ms_p{p:g}"] = _quantile(ttft, p)
        out[f"tpot_ms_p{p:g}"] = _quantile(tpot, p)
        out[f"itl_ms_p{p:g}"] = _counter_quantile(itl, p, 1e3)
    return out


def polars_summary(path: Path) -> dict[str, float]:
    """``summarize``: the whole-run analysis, the same percentiles picked out."""
    from analyzers import exprs as e
    from analyzers.metrics import summarize

    a = summarize(path, PERCENTILES)
    out: dict[str, float] = {}
    for key, name in ((e.TTFT_MS, "ttft_ms"), (e.TPOT_MS, "tpot_ms"), (e.ITL_MS, "itl_ms")):
        m = a.overall.metric(key)
        for p in PERCENTILES:
            out[f"{name}_p{p:g}"] = float(m.value(p) or 0.0)
    return out


def child(kind: str, path: Path) -> None:
    start = time.perf_counter()
    result = polars_summary(path) if kind == "polars" else python_baseline(path)
    elapsed = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": elapsed, "peak_rss_mib": peak_mib, "result": result}))


def run_child(kind: str, path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    value: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--keep", type=Path, default=None, help="Directory to keep the file in.")
    parser.add_argument("--json", type=Path, default=None, help="Also write the numbers here.")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / s.REQUESTS_FILE
        t = time.perf_counter()
        generate(path, args.requests, args.tokens)
        gen_s = time.perf_counter() - t
        size_mib = path.stat().st_size / 2**20
        print(
            f"generated {args.requests:,} requests x {args.tokens} tokens "
            f"({size_mib:,.0f} MiB) in {gen_s:.1f} s"
        )
        fast = run_child("polars", path)
        slow = run_child("python", path)
    mismatches = [
        k
        for k, v in slow["result"].items()
        if not math.isclose(v, fast["result"][k], rel_tol=1e-9, abs_tol=1e-9)
    ]
    ratio = slow["seconds"] / fast["seconds"]
    print(
        f"polars summarize: {fast['seconds']:.2f} s, peak RSS {fast['peak_rss_mib']:,.0f} MiB "
        "(TTFT, TTFT from due, TTFB, TPOT, ITL, E2E, lag, outcomes, windows)"
    )
    print(
        f"python loop:      {slow['seconds']:.2f} s, peak RSS {slow['peak_rss_mib']:,.0f} MiB "
        "(TTFT, TPOT, ITL only)"
    )
    print(f"speed-up: {ratio:.1f}x; percentiles agree: {mismatches if mismatches else 'yes'}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "requests": args.requests,
                    "tokens": args.tokens,
                    "file_mib": size_mib,
                    "polars": fast,
                    "python": slow,
                    "speedup": ratio,
                    "mismatches": mismatches,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
