"""Closed-loop sessions against the simulator: no turn goes before its parent's reply plus
think time (checked over every row), the live history carries the server's replies, the
session columns reach the run table, a cap on sessions holds, and a time-bounded run
entered mid-session marks what it did not send."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow.parquet as pq

from loadgen.run.session import SessionOptions, SessionResult, run_session
from loadgen.sim.launch import SimProcess
from tests.e2e.conftest import SimFactory
from traces import schema as s
from traces.io import read_run_info, write_trace
from traces.synth.agents import AgentSpec
from traces.synth.lengths import LogNormal
from traces.synth.trace import SynthConfig, synthesize

FACTOR = 0.02
"""Time scale of the replays: a 40 s trace in under a second, think times scaled alike."""


def _agents(path: Path, sessions: int) -> Path:
    """``sessions`` agent sessions of 10-40 turns with sub-agents, small tool results (the
    contexts stay under 8k tokens, so prompts are quick to build)."""
    spec = AgentSpec(
        sessions=sessions,
        turns_min=10,
        turns_max=40,
        context_max=8192,
        fork_prob=0.1,
        tool_result=LogNormal(mean=300.0, sigma=0.5),
        think_mean_s=1.0,
    )
    result = synthesize(SynthConfig(agent=spec, seed=7, block_size=64))
    write_trace(result.table, path, result.provenance)
    return path


def _replay(server: SimProcess, trace: Path, run_dir: Path, **options: object) -> SessionResult:
    opts = SessionOptions(
        trace_path=trace,
        run_dir=run_dir,
        base_url=server.base_url,
        time_scale=FACTOR,
        scrape_metrics=False,
        **options,  # type: ignore[arg-type]
    )
    return asyncio.run(run_session(opts, install_signal_handlers=False))


def test_closed_sessions_never_send_a_turn_before_its_parent_ended(
    sim: SimFactory, tmp_path: Path
) -> None:
    trace = _agents(tmp_path / "agents.parquet", 20)
    server = sim("--ttft-ms", "2", "--itl-ms", "0.05", "--tokens-per-chunk", "50")
    result = _replay(
        server, trace, tmp_path / "run", sessions="closed", max_sessions=8, history="live"
    )
    assert result.not_sent == 0
    think = {
        r[s.REQUEST_ID]: r[s.THINK_S] or 0.0
        for r in pq.read_table(trace, columns=[s.REQUEST_ID, s.THINK_S]).to_pylist()
    }
    rows = pq.read_table(tmp_path / "run" / s.REQUESTS_FILE).to_pylist()
    assert len(rows) == len(think)
    assert {r[s.OUTCOME] for r in rows} == {s.OUTCOME_OK}
    by_id = {r[s.REQUEST_ID]: r for r in rows}
    checked = 0
    for row in rows:
        if row[s.PARENT] is None:
            assert row[s.TURN] == 1
            continue
        parent = by_id[row[s.PARENT]]
        earliest = parent[s.END_NS] + round(think[row[s.REQUEST_ID]] * FACTOR * 1e9)
        assert row[s.DUE_NS] >= earliest, row[s.REQUEST_ID]
        assert row[s.SENT_NS] >= row[s.DUE_NS]
        # Live history: the parent's messages, the simulator's reply (one word a token,
        # output_tokens of them) and the turn's own part add up to the trace's prompt.
        assert row[s.PROMPT_TOKENS] == row[s.INPUT_TOKENS]
        assert row[s.CONTEXT_TOKENS] is not None
        assert row[s.CONTEXT_TOKENS] > 0
        checked += 1
    assert checked > 150  # every turn after a first one, forks and spawns included
    # At most 8 sessions in progress: from each session's first send to its last end.
    spans: dict[str, tuple[int, int]] = {}
    for row in rows:
        lo, hi = spans.get(row[s.SESSION_ID], (row[s.SENT_NS], row[s.END_NS]))
        spans[row[s.SESSION_ID]] = (min(lo, row[s.SENT_NS]), max(hi, row[s.END_NS]))
    events = sorted([(lo, 1) for lo, _ in spans.values()] + [(hi, -1) for _, hi in spans.values()])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak <= 8


def test_duration_from_an_offset_marks_drain_and_counts_what_was_not_sent(
    sim: SimFactory, tmp_path: Path
) -> None:
    trace = _agents(tmp_path / "agents.parquet", 6)
    server = sim("--ttft-ms", "50", "--itl-ms", "1")
    result = _replay(
        server,
        trace,
        tmp_path / "run",
        sessions="closed",
        start_offset_s=5.0,
        duration_s=0.3,
        warmup_s=0.1,
    )
    info = read_run_info(tmp_path / "run")
    assert info is not None
    assert info.result is not None
    assert info.status == "duration"
    assert info.result.skipped is not None
    assert info.result.skipped > 0
    assert info.result.not_sent == result.not_sent > 0
    assert info.result.dispatch_end_ns is not None
    assert info.result.warmup_end_ns is not None
    rows = pq.read_table(tmp_path / "run" / s.REQUESTS_FILE).to_pylist()
    total = pq.read_metadata(trace).num_rows
    assert len(rows) + info.result.not_sent + info.result.skipped == total
    for row in rows:
        assert row[s.DUE_NS] < info.result.dispatch_end_ns
        assert row[s.DRAIN] == (row[s.END_NS] > info.result.dispatch_end_ns)
        assert row[s.WARMUP] == (row[s.DUE_NS] < info.result.warmup_end_ns)
    assert any(row[s.DRAIN] for row in rows)
    assert any(row[s.WARMUP] for row in rows)
