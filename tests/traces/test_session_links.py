"""The trace's session links: ``parent``, ``branch`` (fork, spawn) and ``think_s``;
validated, emitted by ``trace synth --kind agent`` and kept consistent by ``trace slice``."""

from __future__ import annotations

import pyarrow as pa
import pytest

from traces import schema as s
from traces.errors import ValidationError
from traces.io import conform_trace
from traces.synth.agents import AgentSpec
from traces.synth.trace import SynthConfig, synthesize
from traces.transform import Slice, slice_trace
from traces.validate import validate_trace


def _table(parents: list[str | None], branches: list[str | None]) -> pa.Table:
    return conform_trace(
        pa.table(
            {
                "request_id": ["a", "b", "c", "d"],
                "arrival_s": [0.0, 1.0, 2.0, 3.0],
                "input_tokens": [1, 2, 3, 4],
                "output_tokens": [1, 1, 1, 1],
                "session_id": ["s", "s", "t", "t"],
                "parent": pa.array(parents, pa.string()),
                "branch": pa.array(branches, pa.string()),
                "think_s": [None, 0.5, 0.0, 1.0],
            }
        ),
        "t",
    )


def test_links_to_earlier_rows_are_valid() -> None:
    validate_trace(_table([None, "a", "b", "c"], [None, None, "fork", None]), "t")


@pytest.mark.parametrize(
    ("parents", "branches", "message"),
    [
        (["a", "a", "b", "c"], [None] * 4, "row 0, column 'parent': parent 'a' is not"),
        ([None, "a", "d", "c"], [None, None, "fork", None], "row 2, column 'parent'"),
        ([None, "a", "zz", "c"], [None, None, "spawn", None], "not the request id of an earlier"),
        ([None, "a", "b", "c"], [None] * 4, "row 2, column 'parent': parent 'b' is of another"),
        ([None, "a", "b", "c"], [None, None, "merge", None], "unknown branch 'merge'"),
        ([None, "a", None, "c"], [None, None, "spawn", None], "a branching turn needs a parent"),
    ],
)
def test_bad_links_name_their_row(
    parents: list[str | None], branches: list[str | None], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        validate_trace(_table(parents, branches), "t")


def test_agent_synth_links_every_turn_to_its_parent() -> None:
    spec = AgentSpec(sessions=12, turns_min=3, turns_max=6, fork_prob=0.5, context_max=32_768)
    table = synthesize(SynthConfig(agent=spec, seed=4)).table
    validate_trace(conform_trace(table, "synth"), "synth")
    rows = table.to_pylist()
    index = {r[s.REQUEST_ID]: r for r in rows}
    kinds = {r[s.BRANCH] for r in rows}
    assert {s.BRANCH_FORK, s.BRANCH_SPAWN} <= kinds
    for r in rows:
        parent = index.get(r[s.PARENT]) if r[s.PARENT] is not None else None
        if r[s.TURN] == 1 and r[s.BRANCH] is None:
            assert parent is None
            assert r[s.THINK_S] is None
            continue
        assert parent is not None
        assert r[s.THINK_S] is not None
        assert r[s.ARRIVAL_S] == pytest.approx(parent[s.ARRIVAL_S] + r[s.THINK_S], abs=1e-3)
        shared = parent[s.PREFIX_BLOCKS]
        if r[s.BRANCH] == s.BRANCH_SPAWN:  # fresh from the shared preamble only
            assert r[s.PREFIX_BLOCKS][: len(shared)] != shared
        else:  # continues or forks: the parent's whole prompt is its prefix
            assert r[s.PREFIX_BLOCKS][: len(shared)] == shared
            assert r[s.SESSION_ID] == parent[s.SESSION_ID] or r[s.BRANCH] == s.BRANCH_FORK


def test_slice_drops_links_to_rows_it_cut() -> None:
    table = _table([None, "a", "b", "c"], [None, None, "fork", None])
    out = slice_trace(table, Slice(start_s=1.5))
    assert out.column(s.PARENT).to_pylist() == [None, "c"]
    assert out.column(s.BRANCH).to_pylist() == [None, None]
    validate_trace(out, "sliced")
