"""Agentic sessions for synthetic traces: tool preambles, context growing by tool results,
sub-agents forking or spawning off a turn.

An agent session is a chat whose system prompt carries tool definitions. Each turn
re-sends the whole context so far plus what came back since: turn 1 is the preamble (a
system prompt and ``tools`` tool definitions, one of ``toolsets`` shared across sessions,
chosen with Zipf popularity) and a task; turn k adds turn k-1's reply (a tool call) and the
tool's result. The context therefore grows by a tool result per turn and the share of it
already seen (the prefix a cache can reuse) rises with depth. A session ends after its
drawn number of turns, or before the turn whose prompt would exceed ``context_max``.

Branching: after a turn, with probability ``fork_prob``, a session starts a geometric
number of sub-agents (mean ``branches_mean``). A sub-agent either *forks* (continues the
parent's history up to that turn, sharing its prefix, as KV-aware routers expect) or, with
probability ``spawn_fraction``, *spawns* (starts afresh from the same preamble with a task
of its own). Sub-agents run 2..``child_turns_max`` turns and do not branch again. A
sub-agent's session id is its parent's plus ``.N`` (``s0000003.2``); ``AgentTurn.parent``
names the parent session and ``fork_turn`` the turn it branched after.

Times: sessions start at the given times; each later turn follows the one before by an
exponential think time of mean ``think_mean_s`` (the reply's generation plus the tool's
run when a trace is replayed open-loop), and a sub-agent's first turn follows its branching
turn by one think time. Every prompt token is covered by prefix block ids
(``block_size`` tokens each), so replay can hit the prefix cache as a real agent would.

Tool definitions: each toolset is also a list of OpenAI function tools (``tools`` of them,
at most ``len(TOOL_CATALOG)``, drawn from ``TOOL_CATALOG`` by a generator seeded with the
seed and the toolset's index), and every turn carries its session's as ``AgentTurn.tools``
(the trace's ``tools`` column, sent as the chat body's ``tools``). The preamble's tokens
stand for the definitions in the prompt; the JSON itself is short (a few dozen tokens a
tool), and a server counts it on top.

Deterministic: each top-level session draws from its own ``random.Random`` seeded by the
seed and its index, so a session does not change when others are added. Imports nothing of
the project but ``traces.synth.lengths``.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from traces.synth.lengths import LengthDist, LogNormal

BlockIds = Callable[[int], list[int]]
"""Returns ``n`` fresh, never used prefix block ids."""

TOOL_CATALOG: tuple[tuple[str, str, str], ...] = (
    ("read_file", "Read a file of the workspace.", "path"),
    ("write_file", "Write text to a file of the workspace.", "path"),
    ("list_dir", "List the entries of a directory.", "path"),
    ("search_code", "Search the code base for a pattern.", "pattern"),
    ("run_shell", "Run a shell command and return its output.", "command"),
    ("run_tests", "Run the test suite, or one test file.", "target"),
    ("git_diff", "Show the working tree's changes.", "path"),
    ("web_search", "Search the web.", "query"),
    ("fetch_url", "Fetch a web page as text.", "url"),
    ("sql_query", "Run a read-only SQL query.", "query"),
    ("python", "Run a Python snippet and return what it prints.", "code"),
    ("calculator", "Evaluate an arithmetic expression.", "expression"),
    ("get_weather", "Current weather for a city.", "city"),
    ("send_email", "Send an e-mail.", "to"),
    ("create_ticket", "Open an issue in the tracker.", "title"),
    ("lookup_docs", "Look up an API in the documentation.", "symbol"),
)
"""The synthesizer's tools: name, description and the one string parameter each takes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSpec:
    """How agent sessions unfold (see the module docstring).

    ``sessions``: top-level sessions to start (None: as many as the trace's request count
    or duration allows). Token counts are in tokens, times in seconds.
    """

    sessions: int | None = None
    turns_min: int = 10
    turns_max: int = 40
    context_max: int = 131_072
    toolsets: int = 4
    tools: int = 12
    tool_tokens: int = 250
    system_tokens: int = 600
    zipf_s: float = 1.1
    task: LengthDist = field(default_factory=lambda: LogNormal(mean=600.0, sigma=0.6))
    tool_result: LengthDist = field(default_factory=lambda: LogNormal(mean=3000.0, sigma=1.0))
    reply: LengthDist = field(default_factory=lambda: LogNormal(mean=250.0, sigma=0.5))
    think_mean_s: float = 2.0
    fork_prob: float = 0.03
    branches_mean: float = 2.0
    spawn_fraction: float = 0.5
    child_turns_max: int = 8

    def __post_init__(self) -> None:
        if self.sessions is not None and self.sessions < 1:
            raise ValueError("agent sessions must be at least 1")
        if not 1 <= self.turns_min <= self.turns_max:
            raise ValueError("agent turns need 1 <= turns_min <= turns_max")
        if self.toolsets < 1 or self.tools < 0 or self.tool_tokens < 1 or self.system_tokens < 1:
            raise ValueError("agents need toolsets >= 1, tools >= 0 and positive token counts")
        if self.context_max <= self.preamble_tokens:
            raise ValueError(
                f"context_max {self.context_max} leaves no room after the "
                f"{self.preamble_tokens}-token tool preamble"
            )
        if self.zipf_s < 0 or self.think_mean_s < 0:
            raise ValueError("agents need zipf_s >= 0 and think_mean_s >= 0")
        if not 0 <= self.fork_prob <= 1 or not 0 <= self.spawn_fraction <= 1:
            raise ValueError("fork_prob and spawn_fraction are probabilities (0..1)")
        if self.branches_mean < 1 or self.child_turns_max < 2:
            raise ValueError("agents need branches_mean >= 1 and child_turns_max >= 2")

    @property
    def preamble_tokens(self) -> int:
        """Tokens of the system prompt with its tool definitions (before block rounding)."""
        return self.system_tokens + self.tools * self.tool_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentTurn:
    """One request of an agent session before it becomes a trace row."""

    session: str
    parent: str | None
    fork_turn: int | None
    turn: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    blocks: tuple[int, ...]
    branch: str | None = None
    """A sub-agent's first turn: ``fork`` or ``spawn``; None otherwise."""
    think_s: float = 0.0
    """The think time drawn before this turn (0 for a top-level session's first)."""
    tools: str | None = None
    """The session's tool definitions (JSON text, ``toolset_tools``); None with no tools."""


@dataclass(slots=True, kw_only=True)
class _State:
    """The growing context of one session (scratch)."""

    session: str
    parent: str | None
    fork_turn: int | None
    turn: int
    arrival_s: float
    tokens: int
    blocks: list[int]
    branch: str | None = None
    think_s: float = 0.0
    tools: str | None = None


class _Sampler:
    """Draws one top-level session and its sub-agents."""

    def __init__(
        self, spec: AgentSpec, rng: random.Random, fresh: BlockIds, block_size: int
    ) -> None:
        self.spec = spec
        self.rng = rng
        self.fresh = fresh
        self.bs = block_size

    def think(self) -> float:
        mean = self.spec.think_mean_s
        return self.rng.expovariate(1.0 / mean) if mean > 0 else 0.0

    def geometric(self, mean: float) -> int:
        if mean <= 1:
            return 1
        p = 1.0 / mean
        return 1 + math.floor(math.log(1.0 - self.rng.random()) / math.log(1.0 - p))

    def cover(self, blocks: list[int], tokens: int) -> list[int]:
        need = math.ceil(tokens / self.bs) - len(blocks)
        return blocks + self.fresh(need) if need > 0 else list(blocks)

    def run(
        self, state: _State, turns: int, horizon_s: float | None, branch: bool, preamble: list[int]
    ) -> list[AgentTurn]:
        """Emit ``state``'s turns (the first is ``state`` itself) and its sub-agents'."""
        spec = self.spec
        out: list[AgentTurn] = []
        children = 0
        while True:
            if horizon_s is not None and state.arrival_s > horizon_s:
                break
            reply = spec.reply.sample(self.rng)
            out.append(
                AgentTurn(
                    session=state.session,
                    parent=state.parent,
                    fork_turn=state.fork_turn,
                    turn=state.turn,
                    arrival_s=state.arrival_s,
                    input_tokens=state.tokens,
                    output_tokens=reply,
                    blocks=tuple(state.blocks),
                    branch=state.branch,
                    think_s=state.think_s,
                    tools=state.tools,
                )
            )
            last = state.turn >= turns
            if branch and not last and state.turn >= 2 and self.rng.random() < spec.fork_prob:
                for _ in range(self.geometric(spec.branches_mean)):
                    children += 1
                    out += self._child(state, reply, children, horizon_s, preamble)
            if last:
                break
            grown = state.tokens + reply + spec.tool_result.sample(self.rng)
            if grown > spec.context_max:
                break
            think = self.think()
            state = _State(
                session=state.session,
                parent=state.parent,
                fork_turn=state.fork_turn,
                turn=state.turn + 1,
                arrival_s=state.arrival_s + think,
                tokens=grown,
                blocks=self.cover(state.blocks, grown),
                think_s=think,
                tools=state.tools,
            )
        return out

    def _child(
        self, at: _State, reply: int, index: int, horizon_s: float | None, preamble: list[int]
    ) -> list[AgentTurn]:
        spec = self.spec
        task = spec.task.sample(self.rng)
        if self.rng.random() < spec.spawn_fraction:
            base_tokens, base_blocks = len(preamble) * self.bs, preamble  # spawn: preamble only
            branch = "spawn"
        else:
            base_tokens, base_blocks = at.tokens + reply, at.blocks  # fork: the whole history
            branch = "fork"
        tokens = base_tokens + task
        if tokens > spec.context_max:
            return []
        think = self.think()
        state = _State(
            session=f"{at.session}.{index}",
            parent=at.session,
            fork_turn=at.turn,
            turn=1,
            arrival_s=at.arrival_s + think,
            tokens=tokens,
            blocks=self.cover(base_blocks, tokens),
            branch=branch,
            think_s=think,
            tools=at.tools,
        )
        turns = self.rng.randint(2, spec.child_turns_max)
        return self.run(state, turns, horizon_s, branch=False, preamble=preamble)


def preambles(spec: AgentSpec, fresh: BlockIds, block_size: int) -> list[list[int]]:
    """The block ids of each toolset's preamble (system prompt + tool definitions), rounded
    up to whole blocks so that sessions sharing a toolset share these blocks exactly."""
    per = math.ceil(spec.preamble_tokens / block_size)
    return [fresh(per) for _ in range(spec.toolsets)]


def toolset_tools(spec: AgentSpec, seed: int) -> list[str | None]:
    """Each toolset's tool definitions as JSON text: ``spec.tools`` function tools (at most
    the catalog's size) drawn from ``TOOL_CATALOG`` by a generator seeded with ``seed`` and
    the toolset's index; None for every toolset when ``spec.tools`` is 0."""
    out: list[str | None] = []
    for index in range(spec.toolsets):
        rng = random.Random(f"llm-loadgen/{seed}/toolset/{index}")
        picked = rng.sample(TOOL_CATALOG, min(spec.tools, len(TOOL_CATALOG)))
        tools = [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": text,
                    "parameters": {
                        "type": "object",
                        "properties": {param: {"type": "string"}},
                        "required": [param],
                    },
                },
            }
            for name, text, param in picked
        ]
        out.append(json.dumps(tools, separators=(",", ":")) if tools else None)
    return out


def agent_sessions(
    spec: AgentSpec,
    starts: Sequence[float],
    *,
    block_size: int,
    fresh: BlockIds,
    seed: int,
    horizon_s: float | None = None,
) -> list[AgentTurn]:
    """Every turn of one top-level session per start time (and of their sub-agents), in
    generation order; turns after ``horizon_s`` are dropped, with the rest of their
    session."""
    shared = preambles(spec, fresh, block_size)
    toolsets = toolset_tools(spec, seed)
    weights = itertools.accumulate(r**-spec.zipf_s for r in range(1, spec.toolsets + 1))
    cum = list(weights)
    out: list[AgentTurn] = []
    for index, start in enumerate(starts):
        rng = random.Random(f"llm-loadgen/{seed}/agent/{index}")
        sampler = _Sampler(spec, rng, fresh, block_size)
        pick = min(bisect.bisect_right(cum, rng.random() * cum[-1]), len(cum) - 1)
        preamble = shared[pick]
        tokens = len(preamble) * block_size + spec.task.sample(rng)
        if tokens > spec.context_max:
            tokens = spec.context_max
        state = _State(
            session=f"s{index:07d}",
            parent=None,
            fork_turn=None,
            turn=1,
            arrival_s=start,
            tokens=tokens,
            blocks=sampler.cover(list(preamble), tokens),
            tools=toolsets[pick],
        )
        turns = rng.randint(spec.turns_min, spec.turns_max)
        out += sampler.run(state, turns, horizon_s, branch=True, preamble=list(preamble))
    return out
