"""An agent trace with tool definitions replayed against the simulator: the replies that
are tool calls are recorded as such (``tool_call_chunks``, ``first_tool_call_ns``,
finish reason ``tool_calls``), timed as output, and the other replies are untouched;
``analyze`` reports their share."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from analyzers.metrics import analyze
from loadgen.run.session import SessionOptions, run_session
from tests.e2e.conftest import SimFactory
from traces import schema as s
from traces.io import write_trace
from traces.synth.agents import AgentSpec
from traces.synth.lengths import LogNormal
from traces.synth.trace import SynthConfig, synthesize


def replay_agents(
    sim: SimFactory,
    tmp_path: Path,
    *,
    sessions: int,
    turns: tuple[int, int],
    seed: int,
    extra_body: dict[str, object] | None = None,
) -> list[dict[str, Any]]:
    """A synthetic agent trace (tool definitions on every request) replayed against the
    simulator; its rows, one per request."""
    spec = AgentSpec(
        sessions=sessions,
        turns_min=turns[0],
        turns_max=turns[1],
        context_max=8192,
        fork_prob=0.0,
        tool_result=LogNormal(mean=200.0, sigma=0.5),
        reply=LogNormal(mean=60.0, sigma=0.3),
        think_mean_s=0.5,
    )
    result = synthesize(SynthConfig(agent=spec, seed=seed, block_size=64))
    trace = tmp_path / "agents.parquet"
    write_trace(result.table, trace, result.provenance)
    tools = {json.loads(t)[0]["type"] for t in result.table.column(s.TOOLS).to_pylist()}
    assert tools == {"function"}
    server = sim("--ttft-ms", "2", "--itl-ms", "0.05", "--tokens-per-chunk", "8")
    opts = SessionOptions(
        trace_path=trace,
        run_dir=tmp_path / "run",
        base_url=server.base_url,
        time_scale=0.02,
        scrape_metrics=False,
        extra_body=extra_body,
    )
    asyncio.run(run_session(opts, install_signal_handlers=False))
    rows: list[dict[str, Any]] = pq.read_table(tmp_path / "run" / s.REQUESTS_FILE).to_pylist()
    assert len(rows) == result.table.num_rows
    return rows


def test_tool_call_replies_are_counted_apart_from_content(sim: SimFactory, tmp_path: Path) -> None:
    rows = replay_agents(sim, tmp_path, sessions=6, turns=(4, 6), seed=11)
    assert {r[s.OUTCOME] for r in rows} == {s.OUTCOME_OK}
    calls = [r for r in rows if r[s.TOOL_CALL_CHUNKS]]
    content = [r for r in rows if r[s.TOOL_CALL_CHUNKS] == 0]
    assert calls
    assert content
    assert len(calls) + len(content) == len(rows)
    for r in calls:
        assert r[s.FINISH_REASON] == "tool_calls"
        assert r[s.TOOL_CALL_CHUNKS] == len(r[s.CHUNK_OFFSETS_US])  # every chunk a call's
        assert r[s.FIRST_TOOL_CALL_NS] == r[s.FIRST_TOKEN_NS]  # a tool call starts TTFT
    for r in content:
        assert r[s.FINISH_REASON] == "length"
        assert r[s.FIRST_TOOL_CALL_NS] is None
        assert r[s.FIRST_TOKEN_NS] is not None
    for r in rows:  # the token counts are the same either way
        assert r[s.COMPLETION_TOKENS] == r[s.OUTPUT_TOKENS]
        assert r[s.PROMPT_TOKENS] == r[s.INPUT_TOKENS]
    summary = analyze(tmp_path / "run").overall.tool_calls
    assert summary is not None
    assert (summary.requests, summary.calls) == (len(rows), len(calls))
    assert summary.tokens == sum(r[s.COMPLETION_TOKENS] for r in calls)


def test_a_forced_tool_choice_makes_every_reply_a_call(sim: SimFactory, tmp_path: Path) -> None:
    """``--extra-body '{"tool_choice": "required"}'`` on a trace with tools: the preflight's
    probe carries the trace's tools as the run's requests do (the simulator, as vLLM, refuses
    a ``tool_choice`` without ``tools`` with a 400, which stopped such a run before its
    first request), and every reply is a tool call."""
    choice: dict[str, object] = {"tool_choice": "required"}
    rows = replay_agents(sim, tmp_path, sessions=2, turns=(3, 3), seed=12, extra_body=choice)
    for r in rows:
        assert r[s.OUTCOME] == s.OUTCOME_OK, r[s.ERROR]
        assert r[s.FINISH_REASON] == "tool_calls"
        assert r[s.TOOL_CALL_CHUNKS] == len(r[s.CHUNK_OFFSETS_US]) > 0
