"""Goodput: ok and within every SLO that applies, per request or global."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzers.analysis import AnalysisOptions
from analyzers.frames import scan_run
from analyzers.goodput import SLOTargets, goodput
from analyzers.metrics import analyze
from traces import schema as s
from traces.records import RequestRecord, records_to_batch

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def rec(i: int, ttft_ms: float, tpot_ms: float, **kw: Any) -> RequestRecord:
    """An ok request due at ``i`` s with 3 one-token chunks: TTFT and TPOT as given."""
    due = T0 + i * 1_000 * MS
    first = int(ttft_ms * 1000)
    step = int(tpot_ms * 1000)
    base: dict[str, Any] = {
        "run_id": "r",
        "trace_index": i,
        "request_id": f"q{i}",
        "x_request_id": f"r-q{i}",
        "workload": "text",
        "api": "chat",
        "input_tokens": 10,
        "output_tokens": 3,
        "due_ns": due,
        "sent_ns": due,
        "first_token_ns": due + first * 1000,
        "end_ns": due + (first + 2 * step) * 1000,
        "chunk_offsets_us": [first, first + step, first + 2 * step],
        "chunk_tokens": [1, 1, 1],
        "completion_tokens": 3,
        "outcome": s.OUTCOME_OK,
    }
    base.update(kw)
    return RequestRecord(**base)


def write_run(path: Path, records: list[RequestRecord]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_batches([records_to_batch(records)]), path / s.REQUESTS_FILE)
    return path


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return write_run(
        tmp_path / "run",
        [
            rec(0, 50, 10),  # good under the global SLOs
            rec(1, 150, 10),  # TTFT miss (global 100 ms)
            rec(2, 50, 30),  # TPOT miss (global 20 ms)
            rec(3, 150, 10, slo_ttft_ms=200.0),  # its own, looser TTFT SLO: good
            rec(4, 50, 10, outcome=s.OUTCOME_TIMEOUT),  # failed: never good
        ],
    )


def test_global_and_per_request_slos(run: Path) -> None:
    (result,) = goodput(scan_run(run), SLOTargets(ttft_ms=100, tpot_ms=20))
    g = result.goodput
    assert g is not None
    assert (g.requests, g.good, g.ttft_misses, g.tpot_misses, g.failed) == (5, 2, 1, 1, 1)
    assert g.fraction == pytest.approx(0.4)
    duration_s = (4_000 + 50 + 20) / 1e3  # first send to the last end (request 4)
    assert g.rate_per_s == pytest.approx(2 / duration_s)


def test_no_slo_means_no_goodput(run: Path) -> None:
    (result,) = goodput(scan_run(run), SLOTargets())
    assert result.goodput is not None  # request 3 carries its own SLO
    assert result.goodput.slo_requests == 1
    assert result.goodput.good == 4  # every ok request meets what applies to it


def test_undefined_tpot_meets_any_tpot_slo(tmp_path: Path) -> None:
    single = rec(0, 50, 10, chunk_offsets_us=[50_000], chunk_tokens=[1], completion_tokens=1)
    (result,) = goodput(scan_run(write_run(tmp_path / "r", [single])), SLOTargets(tpot_ms=1))
    assert result.goodput is not None
    assert result.goodput.good == 1


def test_ttft_basis_due_counts_generator_lateness(tmp_path: Path) -> None:
    late = rec(0, 50, 10, sent_ns=T0 + 80 * MS, first_token_ns=T0 + 130 * MS)
    lf = scan_run(write_run(tmp_path / "r", [late]))
    (due,) = goodput(lf, SLOTargets(ttft_ms=100))
    (sent,) = goodput(lf, SLOTargets(ttft_ms=100, ttft_basis="sent"))
    assert due.goodput is not None
    assert due.goodput.good == 0
    assert sent.goodput is not None
    assert sent.goodput.good == 1


def test_analyze_reports_goodput_per_class(run: Path) -> None:
    a = analyze(run, AnalysisOptions(slo=SLOTargets(ttft_ms=100, tpot_ms=20)))
    assert a.overall.goodput is not None
    assert a.overall.goodput.good == 2
    assert [c.goodput.good for c in a.classes if c.goodput] == [2]
