"""The generator's honesty about itself, end to end: a stalled event loop is caught by the
stamp delay (and the run flagged client-bound), an idle one is not; a ``--max-inflight``
cap's hold is told apart from the client's own lateness (``backpressure``, not
client-bound).

The replay engine runs over the fast transport in this process against the simulator in
its own process on ``127.0.0.1:0``, so the server keeps writing while this loop is
stalled, as a real server would: the bytes wait in the socket, and the stamps are late.
The stall is a CPU hog in the replay's own event loop (a busy loop that never yields).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from click.testing import CliRunner

from analyzers.analysis import AnalysisOptions
from analyzers.metrics import analyze
from analyzers.validity import CapHold, assess_validity
from loadgen.cli.root import cli
from loadgen.client import StreamingClient
from loadgen.clock import Clock
from loadgen.live import LiveStats
from loadgen.prepare.preparer import Preparer
from loadgen.replay import LoadShape, Replayer, ReplayResult
from loadgen.run.health import (
    CLIENT_BOUND_LOOP_LAG_MS,
    CLIENT_BOUND_STAMP_DELAY_MS,
    CLIENT_BOUND_STAMP_STALL_MS,
    backpressure_of,
    backpressure_warning,
    client_bound_warnings,
)
from loadgen.run.options import SessionOptions
from loadgen.run.session import make_transport, run_session
from loadgen.sim.launch import SimProcess
from traces.io import read_run_info, write_trace
from traces.prompts.maker import PromptMaker
from traces.records import RunRow, TraceRequest
from traces.runinfo import Capabilities

pytestmark = pytest.mark.serial  # times a real server or process: run alone

SimFactory = Callable[..., SimProcess]

STALL_S = 0.4


def _hog(seconds: float) -> None:
    """Keep the event loop's thread busy for ``seconds`` without yielding."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def _replay(
    base_url: str,
    *,
    n: int,
    gap_s: float,
    stall_s: float = 0.0,
    max_inflight: int | None = None,
) -> tuple[ReplayResult, list[RunRow]]:
    clock = Clock()
    requests = [
        TraceRequest(
            index=i, request_id=f"q{i}", arrival_s=i * gap_s, input_tokens=4, output_tokens=8
        )
        for i in range(n)
    ]
    records: list[RunRow] = []
    transport = make_transport("fast", clock.now_ns, max_connections=n)
    async with httpx.AsyncClient(transport=transport, timeout=10.0) as http:
        client = StreamingClient(
            http, base_url=base_url, now_ns=clock.now_ns, run_id="t", transport=transport
        )
        preparer = Preparer(
            prompts=PromptMaker(), model="sim-model", run_id="t", capabilities=Capabilities()
        )
        replayer = Replayer(
            requests=requests,
            shape=LoadShape(max_inflight=max_inflight),
            client=client,
            preparer=preparer,
            sink=records.append,
            stats=LiveStats(clock.now_ns),
            clock=clock,
        )

        async def stall() -> None:
            await asyncio.sleep(0.2)  # streams are in flight: their chunks will wait
            _hog(stall_s)

        hog = asyncio.create_task(stall()) if stall_s else None
        result = await replayer.run()
        if hog is not None:
            await hog
    assert [r.outcome for r in records] == ["ok"] * n, [r.error for r in records]
    return result, records


def test_a_stalled_loop_is_client_bound_by_its_stamp_delay(sim: SimFactory) -> None:
    server = sim("--ttft-ms", "30", "--itl-ms", "20")
    result, records = asyncio.run(_replay(server.base_url, n=12, gap_s=0.04, stall_s=STALL_S))
    delay = result.stamp_delay
    assert delay is not None
    assert delay.samples > 0
    # The probe overlapped the stall: bytes waited for most of it (it samples every 10 ms).
    assert delay.max_ms >= STALL_S * 1000 * 0.6, delay
    # And so did the responses' own stamps: some token the simulator wrote during the
    # stall was stamped that much after its write (one CLOCK_MONOTONIC on this machine).
    late_ms = _worst_stamp_lag_ms(server, records)
    assert late_ms >= STALL_S * 1000 * 0.5, late_ms
    assert late_ms <= delay.max_ms + 100, (late_ms, delay)  # the probe saw it all
    warnings = client_bound_warnings(
        schedule_lag=result.schedule_lag,
        loop_lag=result.loop_lag,
        cpu_utilisation=0.0,
        stamp_delay=delay,
    )
    assert any("stamp delay" in w for w in warnings), warnings
    validity = assess_validity(
        schedule_lag_p99_ms=None,
        loop_lag_p99_ms=None,
        prompt_error_median=None,
        stamp_delay_p99_ms=delay.p99_ms,
        stamp_delay_max_ms=delay.max_ms,
        class_counts=[],
        percentiles=[],
    )
    assert validity.client_bound
    assert not validity.valid
    assert any("stamp" in r for r in validity.reasons), validity.reasons
    # The stall log has it, with where its time went (the loop's thread spun; on a host
    # too busy to give it a core, the host).
    assert result.stalls is not None
    worst = max(result.stalls.stalls, key=lambda st: st.duration_ms)
    assert worst.duration_ms >= STALL_S * 1000 * 0.6, result.stalls
    assert worst.duration_ms == result.stalls.worst_ms
    assert worst.cause in ("loop busy", "host"), worst


def _worst_stamp_lag_ms(server: SimProcess, records: list[RunRow]) -> float:
    """The longest a content chunk waited between the simulator's write and the replay's
    stamp, over every chunk of ``records`` (the simulator's own record of its writes)."""
    worst = 0
    # The run's stamps are CLOCK_MONOTONIC plus the wall clock's offset at its start; read
    # again now, the offset differs by the wall clock's slew since (microseconds).
    offset = time.time_ns() - time.perf_counter_ns()
    with httpx.Client(timeout=5.0) as http:
        for r in records:
            assert r.sent_ns is not None
            writes = http.get(f"{server.root_url}/debug/requests/{r.x_request_id}").json()
            stamps = [r.sent_ns + us * 1000 for us in r.chunk_offsets_us]
            for write_ns, stamp_ns in zip(writes["chunk_write_ns"], stamps, strict=False):
                worst = max(worst, stamp_ns - offset - write_ns)
    return worst / 1e6


def test_an_idle_loop_has_no_stamp_delay_to_speak_of(sim: SimFactory) -> None:
    server = sim("--ttft-ms", "30", "--itl-ms", "20")
    result, _ = asyncio.run(_replay(server.base_url, n=12, gap_s=0.04))
    delay = result.stamp_delay
    assert delay is not None
    assert delay.samples > 0
    assert delay.max_ms < CLIENT_BOUND_STAMP_STALL_MS, delay
    warnings = client_bound_warnings(
        schedule_lag=result.schedule_lag,
        loop_lag=result.loop_lag,
        cpu_utilisation=0.0,
        stamp_delay=delay,
    )
    # The probe and the loop-lag sampler watch the same loop: on a machine busy enough to
    # delay the one, the other sees it too; on a calm one, the stamps are not flagged.
    assert delay.p99_ms <= max(CLIENT_BOUND_STAMP_DELAY_MS, 2 * result.loop_lag.p99_ms), (
        delay,
        result.loop_lag,
    )
    if result.loop_lag.p99_ms <= CLIENT_BOUND_LOOP_LAG_MS:
        assert not any("stamp delay" in w for w in warnings), warnings


def test_a_max_inflight_cap_is_backpressure_not_client_bound(sim: SimFactory) -> None:
    # Every request due at once, one slot, each holding it ~100 ms: the cap holds the
    # rest back for up to ~0.5 s, while the client itself sends each the moment it may.
    server = sim("--ttft-ms", "50", "--itl-ms", "5")
    n = 6
    result, records = asyncio.run(_replay(server.base_url, n=n, gap_s=0.0, max_inflight=1))
    assert result.held is not None
    assert result.dispatch_lag is not None
    assert result.held.samples == n - 1  # all but the first waited for the slot
    assert result.held.max_ms >= 50 * (n - 2), result.held
    rows_lag_p99 = max((r.sent_ns or 0) - r.due_ns for r in records) / 1e6
    # The rows' schedule lag holds the wait (to the histogram's 3 significant digits)...
    assert rows_lag_p99 >= result.held.max_ms * 0.99
    assert result.dispatch_lag.max_ms < result.held.max_ms / 4  # ...the client's own does not
    bp = backpressure_of(result, 1)
    assert bp is not None
    assert bp.held == n - 1
    note = backpressure_warning(bp)
    assert note is not None
    assert f"{n - 1} requests waited for --max-inflight 1" in note
    validity = assess_validity(
        schedule_lag_p99_ms=rows_lag_p99,
        loop_lag_p99_ms=None,
        prompt_error_median=None,
        cap=CapHold(
            max_inflight=1,
            held=bp.held,
            hold_p99_ms=bp.hold_ms.p99_ms,
            dispatch_lag_p99_ms=bp.dispatch_lag_ms.p99_ms,
        ),
        class_counts=[],
        percentiles=[],
    )
    assert validity.backpressure
    # The cap's wait is not the client's lateness: only the dispatch lag net of it can make
    # the run client-bound (a loaded machine may make even that late).
    assert validity.client_bound == (bp.dispatch_lag_ms.p99_ms > 5.0), validity.reasons
    for reason in validity.reasons:
        if reason.startswith("client-bound: schedule lag"):
            assert "beyond the --max-inflight wait" in reason, reason
    assert validity.valid  # a caveat: the measurement stands
    # Without the cap's record, the same lag reads as a client that could not keep up.
    blind = assess_validity(
        schedule_lag_p99_ms=rows_lag_p99,
        loop_lag_p99_ms=None,
        prompt_error_median=None,
        class_counts=[],
        percentiles=[],
    )
    assert blind.client_bound


def test_a_capped_run_records_its_backpressure_in_run_json(tmp_path: Path, sim: SimFactory) -> None:
    # The whole path: the session writes the hold to run.json, analyze reads it as a
    # caveat (not client-bound), and gate judges the SLOs (exit 0) with the warning.
    server = sim("--ttft-ms", "40", "--itl-ms", "5")
    n = 8
    trace = tmp_path / "t.parquet"
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [0.0] * n,
                "input_tokens": [16] * n,
                "output_tokens": [4] * n,
            }
        ),
        trace,
    )
    run_dir = tmp_path / "run"
    opts = SessionOptions(
        trace_path=trace, run_dir=run_dir, base_url=server.base_url, max_inflight=2
    )
    result = asyncio.run(run_session(opts, install_signal_handlers=False))
    info = read_run_info(run_dir)
    assert info is not None
    assert info.health is not None
    bp = info.health.backpressure
    assert bp is not None
    assert bp.max_inflight == 2
    assert bp.held >= n - 2 - 1  # all but the first two waited (one may find a slot freed)
    assert info.health.stamp_delay_ms is not None
    assert info.health.stamp_delay_ms.samples > 0
    assert [w for w in result.warnings if w.startswith("backpressure:")]
    a = analyze(run_dir, AnalysisOptions(percentiles=(50.0,)))
    assert a.validity.backpressure
    # The rows' lag is the hold (hundreds of ms); what is judged is the client's own
    # lateness beyond it, which a calm machine keeps under 5 ms (a busy one may not: then
    # the reason says so, and the run is client-bound for that, not for the cap).
    for reason in a.validity.reasons:
        if "schedule lag" in reason:
            assert "beyond the --max-inflight wait" in reason, reason
    # The cap alone leaves the run valid (a caveat). A loaded machine may still raise a
    # flag of its own (the client's lateness beyond the hold, or the simulator's slip:
    # seen with two busy processes beside the suite), and then gate withholds the verdict.
    gated = CliRunner().invoke(cli, ["gate", str(run_dir), "--slo", "ttft_ms.p50<=5000"])
    assert gated.exit_code == (0 if a.validity.valid else 3), gated.output
    assert "backpressure:" in gated.output
