"""Agent sessions: tool preambles, context growing by tool results, reuse rising with depth,
sub-agents that fork or spawn, determinism; and ``loadgen trace synth --kind agent``."""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from loadgen.cli.root import cli
from traces import schema as s
from traces.synth.agents import TOOL_CATALOG, AgentSpec, AgentTurn, agent_sessions
from traces.synth.trace import SynthConfig, synthesize
from traces.validate import validate_trace

BS = 512


def _turns(spec: AgentSpec, n: int, seed: int = 0) -> list[AgentTurn]:
    counter = itertools.count()

    def fresh(k: int) -> list[int]:
        return [next(counter) for _ in range(k)]

    return agent_sessions(spec, [float(i) for i in range(n)], block_size=BS, fresh=fresh, seed=seed)


def test_context_grows_by_a_tool_result_per_turn_up_to_the_cap() -> None:
    spec = AgentSpec(turns_min=10, turns_max=40, context_max=131_072, fork_prob=0.0)
    turns = _turns(spec, 60)
    by_session: dict[str, list[AgentTurn]] = defaultdict(list)
    for t in turns:
        by_session[t.session].append(t)
    assert len(by_session) == 60
    preamble_blocks = math.ceil(spec.preamble_tokens / BS)
    preambles = set()
    capped = 0
    for session in by_session.values():
        assert [t.turn for t in session] == list(range(1, len(session) + 1))
        assert len(session) <= 40
        preambles.add(session[0].blocks[:preamble_blocks])
        for prev, cur in itertools.pairwise(session):
            # the whole previous prompt and reply come back, plus a tool result
            assert cur.input_tokens > prev.input_tokens + prev.output_tokens
            assert cur.blocks[: len(prev.blocks)] == prev.blocks
            assert cur.arrival_s >= prev.arrival_s
        for t in session:
            assert t.input_tokens <= spec.context_max
            assert len(t.blocks) == math.ceil(t.input_tokens / BS)
        if len(session) < 10:
            capped += 1  # ended before turns_min only because the next turn would not fit
            last = session[-1]
            assert last.input_tokens + last.output_tokens > spec.context_max * 0.5
    assert len(preambles) <= spec.toolsets  # sessions share the toolsets' preambles
    assert max(t.input_tokens for t in turns) > 100_000  # grows toward the 128k cap


def _ideal_reuse_by_depth(rows: list[dict[str, Any]]) -> dict[int, float]:
    """Token-weighted share of each turn depth's blocks already sent by an earlier request."""
    seen: set[int] = set()
    hit: dict[int, int] = defaultdict(int)
    total: dict[int, int] = defaultdict(int)
    for r in sorted(rows, key=lambda r: r[s.ARRIVAL_S]):
        blocks = r[s.PREFIX_BLOCKS]
        hit[r[s.TURN]] += sum(b in seen for b in blocks)
        total[r[s.TURN]] += len(blocks)
        seen.update(blocks)
    return {d: hit[d] / total[d] for d in total}


def test_prefix_reuse_rises_with_depth_and_the_trace_is_deterministic() -> None:
    config = SynthConfig(agent=AgentSpec(sessions=80, fork_prob=0.0), seed=4)
    table = synthesize(config).table
    rows = table.to_pylist()
    assert {r[s.WORKLOAD] for r in rows} == {"agent"}
    assert {r[s.API] for r in rows} == {s.API_CHAT}
    reuse = _ideal_reuse_by_depth(rows)
    assert reuse[2] < reuse[5] < reuse[10] < reuse[20]
    assert reuse[20] > 0.9
    assert reuse[1] > 0.5  # the shared tool preamble dominates a first turn
    assert synthesize(config).table.equals(table)
    # a session does not change when more sessions are added
    more = synthesize(SynthConfig(agent=AgentSpec(sessions=90, fork_prob=0.0), seed=4)).table
    first = [r for r in more.to_pylist() if r[s.SESSION_ID] == "s0000007"]
    assert [r[s.INPUT_TOKENS] for r in first] == [
        r[s.INPUT_TOKENS] for r in rows if r[s.SESSION_ID] == "s0000007"
    ]


def test_sub_agents_fork_the_history_or_spawn_from_the_preamble() -> None:
    spec = AgentSpec(fork_prob=0.3, branches_mean=2.0, spawn_fraction=0.5, context_max=262_144)
    turns = _turns(spec, 40, seed=2)
    by_session: dict[str, list[AgentTurn]] = defaultdict(list)
    for t in turns:
        by_session[t.session].append(t)
    children = [v for k, v in by_session.items() if "." in k]
    assert len(children) > 20
    preamble_blocks = math.ceil(spec.preamble_tokens / BS)
    forks = spawns = 0
    for child in children:
        first = child[0]
        assert first.parent is not None
        assert first.session.startswith(first.parent + ".")
        assert 1 <= len(child) <= spec.child_turns_max
        parent_turn = next(t for t in by_session[first.parent] if t.turn == first.fork_turn)
        assert first.arrival_s >= parent_turn.arrival_s
        if first.blocks[: len(parent_turn.blocks)] == parent_turn.blocks:
            forks += 1  # continues the parent's history, sharing its prefix
            assert first.input_tokens > parent_turn.input_tokens + parent_turn.output_tokens
        else:
            spawns += 1  # a fresh start from the same tool preamble
            assert first.blocks[:preamble_blocks] == parent_turn.blocks[:preamble_blocks]
            assert first.input_tokens < spec.preamble_tokens + BS + 20_000
        assert "." not in first.parent  # sub-agents do not branch again
    assert forks > 5
    assert spawns > 5


def test_bad_agent_spec_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="no room after the 3600-token tool preamble"):
        AgentSpec(context_max=2000)
    with pytest.raises(ValueError, match="turns_min <= turns_max"):
        AgentSpec(turns_min=5, turns_max=4)


def test_cli_kind_agent(tmp_path: Path) -> None:
    out = tmp_path / "a.parquet"
    args = ["trace", "synth", "--kind", "agent", "--agents", "30", "--rate", "0.5"]
    args += ["--turns-min", "10", "--turns-max", "20", "--fork-prob", "0.1", "--seed", "1"]
    result = CliRunner().invoke(cli, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "in 30 agent sessions and" in result.output
    rows = pq.read_table(out).to_pylist()
    top = {r[s.SESSION_ID] for r in rows if "." not in r[s.SESSION_ID]}
    assert len(top) == 30
    again = tmp_path / "b.parquet"
    assert CliRunner().invoke(cli, [*args, "-o", str(again)]).exit_code == 0
    assert out.read_bytes() == again.read_bytes()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kind", "agent", "--agents", "3", "--mix", "text=1"], "--mix does not apply"),
        (["--requests", "3", "--agents", "3"], "--agents needs --kind agent"),
        (["--kind", "agent"], "or --agents N"),
        (["--kind", "agent", "--agents", "2", "--turns-min", "9", "--turns-max", "3"], "exceed"),
    ],
)
def test_cli_kind_agent_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["trace", "synth", *args, "-o", str(tmp_path / "x.parquet")])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_each_session_carries_its_toolset_as_tools_deterministically() -> None:
    config = SynthConfig(agent=AgentSpec(sessions=30, fork_prob=0.2, tools=5), seed=9)
    table = synthesize(config).table
    validate_trace(table, "agents")
    assert synthesize(config).table.column(s.TOOLS).equals(table.column(s.TOOLS))
    rows = table.to_pylist()
    by_session: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        by_session[r[s.SESSION_ID].split(".")[0]].add(r[s.TOOLS])  # sub-agents: the parent's
    assert all(len(v) == 1 for v in by_session.values())
    toolsets = {t for v in by_session.values() for t in v}
    assert 1 < len(toolsets) <= config.agent.toolsets  # type: ignore[union-attr]
    for text in toolsets:
        names = [t["function"]["name"] for t in json.loads(text)]
        assert len(names) == len(set(names)) == 5
        assert set(names) <= {name for name, _, _ in TOOL_CATALOG}
    other = synthesize(SynthConfig(agent=AgentSpec(sessions=30, tools=5), seed=10)).table
    assert set(other.column(s.TOOLS).to_pylist()) != toolsets
    bare = synthesize(SynthConfig(agent=AgentSpec(sessions=3, tools=0), seed=9)).table
    assert bare.column(s.TOOLS).null_count == bare.num_rows
