"""How long ``loadgen plan calibrate`` takes, and a full-grid prediction with its profiles.

One command::

    .venv/bin/python bench/calibrate.py [--measurements PATH] [--repeats 5]

Reads the Splitwise table (default ``../shared/reference/measurements/
splitwise_perf_model.csv`` beside the repository), then times, best of ``--repeats``:

- calibration: reading the CSV and fitting one profile per GPU type (A100, H100,
  power-capped H100) on the acceptance split (prompts 256/1024/4096 and batches 4/16 held
  out, batch 64 dropped);
- full grid: predicting every combination of {llama-2-70b, bloom-176b} x {3 profiles} x
  TP {1, 2, 4, 8} x prompt {128 ... 131072, 11 sizes} x batch {1, 2, 4 ... 256, 9 sizes}
  for both the prefill step and the decode step through ``step_cost`` (the scheduler's
  and the simulator's entry point) with a profiled ``Deployment``.

Target: under 1 s each. Prints the times and the held-out error summary it fitted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from analyzers.budget import catalog
from analyzers.budget.calibrate import ProfileFit, fit_profiles, prompt_split
from analyzers.budget.engine.step import SequenceWork, step_cost
from analyzers.budget.measurements import load_measurements
from analyzers.budget.specs import Deployment

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO.parent / "shared" / "reference" / "measurements" / "splitwise_perf_model.csv"
TARGET_S = 1.0


def _best(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    best, value = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - t0)
    return best, value


def _calibrate(path: Path) -> list[ProfileFit]:
    observations = [o for o in load_measurements(path) if o.batch != 64]
    cat = catalog.load_catalog()
    return fit_profiles(
        observations,
        model_of=cat.model,
        gpu_of=cat.gpu,
        held_out=prompt_split(frozenset({256, 1024, 4096}), frozenset({4, 16})),
    )


def _grid(fits: list[ProfileFit]) -> int:
    count = 0
    cat = catalog.load_catalog()
    prompts = [128 * 2**k for k in range(11)]
    batches = [2**k for k in range(9)]
    for name in ("llama-2-70b", "bloom-176b"):
        model = replace(cat.model(name), max_context=None)
        for fit in fits:
            hardware = cat.gpu(fit.profile.gpu)
            for tp in (1, 2, 4, 8):
                deploy = Deployment(hardware=hardware, tensor_parallel=tp, profile=fit.profile)
                for n in prompts:
                    for b in batches:
                        step_cost(model, deploy, [SequenceWork(new_tokens=n)] * b)
                        step_cost(model, deploy, [SequenceWork(new_tokens=1, cached_tokens=n)] * b)
                        count += 2
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measurements", type=Path, default=DEFAULT)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not args.measurements.exists():
        print(f"{args.measurements} is absent: nothing to calibrate against", file=sys.stderr)
        return 2
    cal_s, fits = _best(lambda: _calibrate(args.measurements), args.repeats)
    assert isinstance(fits, list)
    grid_s, steps = _best(lambda: _grid(fits), args.repeats)
    print(f"calibration (read + fit {len(fits)} profiles): {cal_s * 1e3:.1f} ms")
    print(f"full grid ({steps} steps predicted): {grid_s * 1e3:.1f} ms")
    for fit in fits:
        for phase in ("prefill", "decode"):
            rows = fit.select(phase=phase, held_out=True, batched=False)
            errors = [r.abs_error for r in rows]
            print(
                f"  {fit.profile.name} {phase} batch 1 held out: median "
                f"{statistics.median(errors) * 100:.1f}%, worst {max(errors) * 100:.1f}%"
            )
    ok = cal_s < TARGET_S and grid_s < TARGET_S
    print(f"target < {TARGET_S:.0f} s each: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
