"""Compare: known, controlled shifts are recovered inside the bootstrap interval."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyzers.compare import CompareOptions, compare_runs
from analyzers.errors import DifferentTracesError
from analyzers.trace_identity import trace_identity
from loadgen.cli import cli
from loadgen.runinfo import write_run_json
from reports.compare import comparison_markdown
from traces.records import RequestRecord, records_to_batch


def make_run(
    path: Path,
    *,
    n: int = 400,
    seed: int = 0,
    slow: float = 1.0,
    ttft_shift_ms: float = 0.0,
    outcome: str = "ok",
    fail_first: int = 0,
    transfer_ms: float = 0.0,
    schedule_lag_ms: float = 0.0,
    workloads: tuple[str, ...] = ("text",),
) -> Path:
    """A hand-built run: TTFT ~ lognormal around 100 ms (x ``slow`` + ``ttft_shift_ms``),
    20 tokens at ~10 ms x ``slow``; the first ``fail_first`` requests end with ``outcome``."""
    rng = random.Random(seed)
    records = []
    t0 = 1_000_000_000_000
    for i in range(n):
        due = t0 + i * 50_000_000
        sent = due + int(schedule_lag_ms * 1e6)
        queue = rng.lognormvariate(math.log(40), 0.5) * slow
        prefill = 50.0 * slow
        first = 10.0 * slow
        server_ttft = queue + prefill + transfer_ms + first
        ttft = server_ttft + 1.0 + ttft_shift_ms
        gaps = [rng.lognormvariate(math.log(10), 0.2) * slow for _ in range(19)]
        offsets = [int(ttft * 1000)]
        for g in gaps:
            offsets.append(offsets[-1] + int(g * 1000))
        failed = i < fail_first
        written = sent + 500_000
        records.append(
            RequestRecord(
                run_id="r",
                trace_index=i,
                request_id=f"req-{i}",
                x_request_id=f"x-{i}",
                workload=workloads[i % len(workloads)],
                api="chat",
                input_tokens=100,
                output_tokens=20,
                due_ns=due,
                sent_ns=sent,
                request_written_ns=written,
                first_byte_ns=None if failed else sent + offsets[0] * 1000,
                first_token_ns=None if failed else sent + offsets[0] * 1000,
                end_ns=sent + (5_000_000 if failed else offsets[-1] * 1000 + 1000),
                chunk_offsets_us=[] if failed else offsets,
                prompt_tokens=None if failed else 100,
                completion_tokens=None if failed else 20,
                outcome=outcome if failed else "ok",
                http_status=None if failed else 200,
                server_queue_ms=None if failed else queue,
                server_prefill_ms=None if failed else prefill,
                server_transfer_ms=None if failed else transfer_ms,
                server_first_token_ms=None if failed else first,
                server_ttft_ms=None if failed else server_ttft + ttft_shift_ms,
            )
        )
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_batches([records_to_batch(records)]), path / "requests.parquet")
    write_run_json(
        path,
        {
            "run_id": "r",
            "trace": {"path": "trace.parquet"},
            "health": {
                "schedule_lag_ms": {"p99_ms": schedule_lag_ms},
                "loop_lag_ms": {"p99_ms": 0.5},
                "cpu_utilisation": 0.1,
                "client_bound": False,
            },
        },
    )
    return path


def test_ttft_shift_recovered_with_component(tmp_path: Path) -> None:
    a = make_run(tmp_path / "mono", seed=1)
    b = make_run(tmp_path / "disagg", seed=2, transfer_ms=9.0, ttft_shift_ms=3.0)
    c = compare_runs([a, b], CompareOptions(labels=("mono", "disagg"), percentiles=(50.0, 99.0)))
    assert c.same_trace
    p50 = next(d for d in c.metrics if d.metric == "ttft_ms" and d.percentile == 50.0)
    assert p50.workload == "all"
    # The same seed-free shift of 12 ms (9 transfer + 3 elsewhere) at every request.
    diff = p50.difference.absolute
    assert diff.low <= 12.0 <= diff.high
    transfer = next(x for x in c.components if x.term == "transfer" and x.percentile == 50.0)
    assert transfer.difference.absolute.estimate == pytest.approx(9.0)
    assert transfer.attributed_ms == pytest.approx(9.0, abs=0.5)
    line = next(v for v in c.verdicts if "p50 TTFT" in v)
    assert line.startswith("disagg raises p50 TTFT by")
    assert "of which transfer 9" in line


def test_tpot_scaling_recovered(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", seed=3)
    b = make_run(tmp_path / "b", seed=4, slow=0.62)
    c = compare_runs([a, b], CompareOptions(metrics=("tpot_ms", "itl_ms"), components=False))
    tpot = next(d for d in c.metrics if d.metric == "tpot_ms" and d.percentile == 99.0)
    rel = tpot.difference.relative
    assert rel is not None
    assert rel.low <= -0.38 <= rel.high
    line = next(v for v in c.verdicts if "p99 TPOT" in v)
    assert "lowers p99 TPOT by" in line
    assert "%" in line
    assert "| metric | stat |" in comparison_markdown(c)


def test_no_difference_is_reported_as_such(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", seed=5)
    b = make_run(tmp_path / "b", seed=6)
    c = compare_runs([a, b], CompareOptions(metrics=("e2e_ms",), components=False))
    assert any("no significant change" in v for v in c.verdicts)


def test_different_traces_refused_unless_allowed(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", n=300)
    b = make_run(tmp_path / "b", n=200)
    assert trace_identity(a).fingerprint != trace_identity(b).fingerprint
    with pytest.raises(DifferentTracesError, match="allow-different-traces"):
        compare_runs([a, b])
    result = CliRunner().invoke(cli, ["compare", str(a), str(b)])
    assert result.exit_code == 2
    assert "different traces" in result.output
    c = compare_runs([a, b], CompareOptions(allow_different_traces=True, components=False))
    assert not c.same_trace
    assert c.notes


def test_three_runs_and_cli(tmp_path: Path) -> None:
    runs = [make_run(tmp_path / name, seed=i) for i, name in enumerate(("a", "b", "c"))]
    c = compare_runs(runs, CompareOptions(components=False, metrics=("ttft_ms",)))
    assert {d.label for d in c.metrics} == {"b", "c"}
    md = tmp_path / "cmp.md"
    result = CliRunner().invoke(
        cli, ["compare", *map(str, runs), "--metrics", "ttft_ms", "--markdown", str(md)]
    )
    assert result.exit_code == 0, result.output
    assert "TTFT" in result.output
    assert md.read_text().startswith("## ")
