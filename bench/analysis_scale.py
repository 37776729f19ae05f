"""Analysis at scale: wall time and peak memory of ``loadgen analyze``, ``decompose``,
``report`` and ``compare`` (the run against itself) on one synthetic run of N requests x T
tokens.

    .venv/bin/python bench/analysis_scale.py [--requests 1000000] [--tokens 256] [--keep DIR]

Generates a run directory (``bench/analyze.py``'s generator: ok requests of one-token
content chunks, here with the simulator-style server timings ``decompose`` splits with),
then runs each command as the user does, ``python -m loadgen.cli.root CMD RUN``, each in a
fresh process under a fresh wrapper, so the peak RSS (``ru_maxrss`` of the one child) is
that command's own. Prints wall seconds, CPU seconds (user plus system of that process: they
move less with the machine's load than the wall time), peak MiB, the exit code, and the
load average (the machine may be shared: compare figures of one run, not across runs).
Default: 50,000 requests (a quick look); ``--requests 1000000`` is the issue's size (~0.9
GiB of Parquet).
``--baseline TREE`` (a checkout of another revision, e.g. ``git archive main | tar -x -C
/tmp/base``, C extensions copied in) runs each command with that tree's code too, rounds
interleaved (``--rounds``: this tree then the baseline, then the other way round), and
prints each figure's median beside the baseline's and their ratio.
Internal mode: ``--measure -- CMD...`` runs one command and prints its figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from analyze import generate  # noqa: E402

from traces import schema as s  # noqa: E402

COMMANDS = ("analyze", "decompose", "report", "compare")


def add_server_timings(path: Path) -> None:
    """Rewrite ``path`` with server timings that add up to the server's TTFT (queue 1 ms,
    first token 1 ms, prefill the rest; no KV transfer), batch by batch."""
    tmp = path.with_suffix(".tmp")
    reader = pq.ParquetFile(path)
    writer = pq.ParquetWriter(tmp, s.RUN_SCHEMA, compression="zstd")
    try:
        for batch in reader.iter_batches(batch_size=50_000):
            table = pa.Table.from_batches([batch])
            after_write = pc.divide(
                pc.cast(
                    pc.subtract(table[s.FIRST_TOKEN_NS], table[s.REQUEST_WRITTEN_NS]), pa.float64()
                ),
                1e6,
            )
            ttft = pc.subtract(after_write, 0.3)  # 0.3 ms of network
            values = {
                s.SERVER_QUEUE_MS: pc.add(pc.multiply(ttft, 0.0), 1.0),
                s.SERVER_FIRST_TOKEN_MS: pc.add(pc.multiply(ttft, 0.0), 1.0),
                s.SERVER_PREFILL_MS: pc.subtract(ttft, 2.0),
                s.SERVER_TTFT_MS: ttft,
            }
            for name, column in values.items():
                i = table.schema.get_field_index(name)
                field = s.RUN_SCHEMA.field(name)
                table = table.set_column(i, field, pc.cast(column, field.type))
            writer.write_table(table)
    finally:
        writer.close()
    tmp.replace(path)


def measure(cmd: list[str]) -> int:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] if proc.returncode else []
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_mib": usage.ru_maxrss / 1024,
                      "rc": proc.returncode, "tail": tail}))  # fmt: skip
    return 0


def run_one(command: str, run_dir: Path, out_dir: Path, tree: Path = ROOT) -> dict[str, Any]:
    cli = [sys.executable, "-m", "loadgen.cli.root", command, str(run_dir)]
    if command == "compare":  # the run against itself: the same work as two runs of it
        cli.append(str(run_dir))
    if command == "report":
        cli += ["-o", str(out_dir / "report.html")]
    wrapper = [sys.executable, str(Path(__file__).resolve()), "--measure", "--", *cli]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(wrapper, cwd=tree, capture_output=True, text=True, env=env, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:2] == ["--measure", "--"]:
        return measure(argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--keep", type=Path, help="generate into (or reuse) this directory")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--baseline", type=Path, help="another tree to compare with")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep if args.keep is not None else Path(tmp)
        run_dir = base / f"run-{args.requests}x{args.tokens}"
        run_dir.mkdir(parents=True, exist_ok=True)
        requests = run_dir / s.REQUESTS_FILE
        if not requests.exists():
            t0 = time.perf_counter()
            generate(requests, args.requests, args.tokens)
            add_server_timings(requests)
            print(f"generated {requests} in {time.perf_counter() - t0:.1f} s")
        size_mib = requests.stat().st_size / 2**20
        print(f"{args.requests:,} requests x {args.tokens} tokens, {size_mib:.0f} MiB")
        print(f"load average (1 min) before: {os.getloadavg()[0]:.2f}")
        trees = {"this": ROOT} if args.baseline is None else {"this": ROOT, "base": args.baseline}
        figures: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for rnd in range(args.rounds):
            order = list(trees) if rnd % 2 == 0 else list(reversed(trees))
            for command in args.commands.split(","):
                for name in order:
                    r = run_one(command, run_dir, Path(tmp), trees[name])
                    figures.setdefault((command, name), []).append(r)
                    print(
                        f"  round {rnd + 1} {name:>4} {command:>10}: {r['wall_s']:7.2f} s, "
                        f"cpu {r['cpu_s']:7.2f} s, peak {r['peak_mib']:6.0f} MiB, "
                        f"exit {r['rc']}, load {os.getloadavg()[0]:.2f} {' '.join(r['tail'])}"
                    )
        for command in args.commands.split(","):
            line = f"{command:>10}:"
            for name in trees:
                rows = figures[(command, name)]
                wall = median(r["wall_s"] for r in rows)
                cpu = median(r["cpu_s"] for r in rows)
                peak = median(r["peak_mib"] for r in rows)
                line += f"  {name} {wall:6.2f} s (cpu {cpu:6.2f} s) {peak:6.0f} MiB"
            if args.baseline is not None:
                this, base = figures[(command, "this")], figures[(command, "base")]
                ratio_wall = median(r["wall_s"] for r in this) / median(r["wall_s"] for r in base)
                ratio_peak = median(r["peak_mib"] for r in this) / median(
                    r["peak_mib"] for r in base
                )
                ratio_cpu = median(r["cpu_s"] for r in this) / median(r["cpu_s"] for r in base)
                line += (
                    f"  (this/base: wall {ratio_wall:.2f}x, cpu {ratio_cpu:.2f}x, "
                    f"peak {ratio_peak:.2f}x)"
                )
            print(line)
        print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")
        if args.json is not None:
            args.json.write_text(
                json.dumps(
                    [
                        {"command": c, "tree": name, **r}
                        for (c, name), rows in figures.items()
                        for r in rows
                    ],
                    indent=1,
                )
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
