"""Benchmark prompt materialisation (words strategy): time and peak memory.

Run: ``.venv/bin/python bench/prompts.py``

1. One 1M-token prompt (1954 fresh blocks of 512 tokens), cold cache.
2. A 10k-request trace of 8k-token prompts (8 shared 2k-token prefixes, Zipf 1.1, plus
   unique tails), every prompt built through ``PromptMaker.make``.

Baseline, measured in the same run: joining the same number of pre-built words with
``" ".join`` (the least any materialiser must do). Time is the best of a few runs without
tracing; peak memory is measured in a separate traced run (tracemalloc slows code down).
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

from traces.prompts.maker import PromptMaker
from traces.records import TraceRequest, trace_requests_from_table
from traces.synth.lengths import Fixed
from traces.synth.trace import PrefixSpec, SynthConfig, synthesize, text_class


@dataclass(frozen=True, slots=True, kw_only=True)
class Measure:
    """Best wall time in seconds and traced peak memory in MiB of one workload."""

    seconds: float
    peak_mib: float


def _measure(work: Callable[[], object], repeat: int = 3) -> Measure:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    tracemalloc.start()
    work()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return Measure(seconds=best, peak_mib=peak / 2**20)


def main() -> None:
    tokens = 1_000_000
    big = TraceRequest(
        index=0,
        request_id="big",
        arrival_s=0.0,
        input_tokens=tokens,
        output_tokens=1,
        prefix_blocks=tuple(range(-(-tokens // 512))),
    )
    words = ["lantern"] * tokens
    base = _measure(lambda: " ".join(words))
    one = _measure(lambda: PromptMaker().make(big))
    print(f"1M-token prompt: {one.seconds * 1e3:.0f} ms, peak {one.peak_mib:.0f} MiB")
    ratio = one.seconds / base.seconds
    print(f"  baseline join of 1M words: {base.seconds * 1e3:.1f} ms ({ratio:.0f}x)")

    start = time.perf_counter()
    table = synthesize(
        SynthConfig(
            requests=10_000,
            classes=(text_class(input=Fixed(value=8192 - 2048), output=Fixed(value=128)),),
            prefix=PrefixSpec(groups=8, tokens=2048),
            seed=1,
        )
    ).table
    synth_s = time.perf_counter() - start
    requests = trace_requests_from_table(table)
    total = sum(r.input_tokens for r in requests)

    def build_all() -> None:
        maker = PromptMaker()
        for req in requests:
            maker.make(req)

    trace = _measure(build_all, repeat=1)
    all_words = ["lantern"] * 8192
    trace_base = _measure(lambda: [" ".join(all_words) for _ in range(len(requests))], repeat=1)
    print(
        f"10k x 8k-token trace ({total / 1e6:.1f}M tokens): synth {synth_s:.2f} s, "
        f"prompts {trace.seconds:.2f} s ({trace.seconds / len(requests) * 1e3:.2f} ms/request, "
        f"{total / trace.seconds / 1e6:.1f}M tokens/s), peak {trace.peak_mib:.0f} MiB"
    )
    print(
        f"  baseline join of 10k x 8192 words: {trace_base.seconds:.2f} s "
        f"({trace.seconds / trace_base.seconds:.1f}x)"
    )


if __name__ == "__main__":
    main()
