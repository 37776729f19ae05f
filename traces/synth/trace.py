"""Seeded synthetic workload traces: arrivals x request classes x shared prefixes x sessions.

``synthesize(config)`` returns a trace table (schema v1) and its provenance; the same
config gives byte-identical Parquet (no timestamps, one ``random.Random`` stream per
aspect, seeded by strings so that adding an option does not reshuffle the others).

Request classes (``--mix``): ``text`` (chat), ``long_context`` (32k..1M token documents,
short answers) and ``image`` (a short question about 1..N images), defined in
``traces.synth.classes`` and re-exported here (``__all__``). Every prompt token is
covered by ``prefix_blocks`` ids of ``block_size`` tokens each (the last block may be
partial): ids of a shared system prompt or document come first, chosen among
``PrefixSpec.groups`` with Zipf popularity, then the request's own fresh ids, so replay
reproduces real prefix-cache hits. Imports pyarrow and ``traces`` modules only.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import pyarrow as pa

from traces import schema as s
from traces.io import write_trace
from traces.prompts.image_tokens import canonical_family, image_tokens
from traces.synth.agents import AgentSpec, agent_sessions
from traces.synth.arrivals import ArrivalSpec, arrival_times
from traces.synth.classes import (
    COMMON_RESOLUTIONS,
    ClassShare,
    ClassValue,
    Resolution,
    WorkloadClass,
    class_value,
    image_class,
    long_context_class,
    parse_class_values,
    parse_mix,
    text_class,
)
from traces.synth.sessions import SessionSpec

GENERATOR: Final = "llm-loadgen traces.synth.trace 1"
DEFAULT_BLOCK_SIZE: Final = 512
DEFAULT_IMAGE_MODEL: Final = "qwen2.5-vl"
ApiChoice = Literal["chat", "completions", "responses", "embeddings", "mixed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixSpec:
    """Shared prefixes: ``groups`` system prompts or documents of ``tokens`` tokens each
    (rounded up to whole blocks), group of rank r chosen with probability ∝ r^-``zipf_s``,
    by a ``fraction`` of requests (the others carry no shared prefix)."""

    groups: int
    tokens: int
    zipf_s: float = 1.1
    fraction: float = 1.0

    def __post_init__(self) -> None:
        if self.groups < 1 or self.tokens < 1 or self.zipf_s < 0 or not 0 <= self.fraction <= 1:
            raise ValueError("prefixes need groups >= 1, tokens >= 1, zipf_s >= 0, 0<=fraction<=1")


@dataclass(frozen=True, slots=True, kw_only=True)
class SynthConfig:
    """Everything that determines a synthetic trace; equal configs give equal files.

    ``requests`` and/or ``duration_s`` bound the trace (at least one). In session mode the
    arrival process starts sessions at ``rate / turns_mean``, so requests still arrive at
    about ``rate`` per second. With ``agent`` (``traces.synth.agents``) the arrival process
    starts agent sessions at ``rate`` per second, every row is workload ``agent`` over chat,
    and ``agent.sessions`` may bound the trace instead; ``mix``, ``prefix`` and ``sessions``
    do not apply.
    """

    requests: int | None = None
    duration_s: float | None = None
    arrival: ArrivalSpec = dataclasses.field(default_factory=ArrivalSpec)
    classes: tuple[WorkloadClass, ...] = (text_class(),)
    mix: tuple[ClassShare, ...] = (ClassShare(name="text", weight=1.0),)
    api: ApiChoice = "chat"
    prefix: PrefixSpec | None = None
    sessions: SessionSpec | None = None
    agent: AgentSpec | None = None
    slo_ttft_ms: tuple[ClassValue, ...] = ()
    slo_tpot_ms: tuple[ClassValue, ...] = ()
    block_size: int = DEFAULT_BLOCK_SIZE
    image_model: str = DEFAULT_IMAGE_MODEL
    seed: int = 0

    def __post_init__(self) -> None:
        agents = self.agent is not None and self.agent.sessions is not None
        if self.requests is None and self.duration_s is None and not agents:
            raise ValueError("give a number of requests, a duration or both")
        if self.agent is not None and (self.sessions is not None or self.prefix is not None):
            raise ValueError("agent sessions bring their own turns and prefixes")
        if self.requests is not None and self.requests < 1:
            raise ValueError("requests must be at least 1")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError("duration must be positive")
        if self.block_size < 1:
            raise ValueError("block_size must be at least 1")
        canonical_family(self.image_model)  # raises ValidationError naming the known ones
        names = {c.name for c in self.classes}
        if not self.mix or any(share.weight < 0 for share in self.mix):
            raise ValueError("the mix needs at least one class and non-negative weights")
        if sum(share.weight for share in self.mix) <= 0:
            raise ValueError("the mix weights sum to zero")
        unknown = [share.name for share in self.mix if share.name not in names]
        if unknown:
            raise ValueError(f"mix names unknown class(es): {', '.join(unknown)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SynthResult:
    """A synthesized trace table (schema v1) and the provenance written with it."""

    table: pa.Table
    provenance: Mapping[str, Any]


@dataclass(slots=True, kw_only=True)
class _Draft:
    """A request being built (mutable scratch, never leaves this module)."""

    arrival_s: float
    workload: str
    api: str
    input_tokens: int
    output_tokens: int
    blocks: list[int]
    images: list[tuple[int, int]] | None = None
    image_tokens: int | None = None
    session: int | None = None
    turn: int | None = None
    session_label: str | None = None
    parent_key: tuple[str, int] | None = None
    """Agent turns: (session, turn) of the turn this one continues or branches from."""
    branch: str | None = None
    think_s: float | None = None
    tools: str | None = None
    """Agent turns: the session's tool definitions (JSON text)."""


AGENT_WORKLOAD: Final = "agent"


class _Builder:
    """Samples requests; owns the block-id counter and the request random stream."""

    def __init__(self, config: SynthConfig) -> None:
        self.config = config
        self.bs = config.block_size
        self.rng = random.Random(f"llm-loadgen/{config.seed}/requests")
        by_name = {c.name: c for c in config.classes}
        self.classes = [by_name[sh.name] for sh in config.mix]
        self.class_cum = list(itertools.accumulate(sh.weight for sh in config.mix))
        self.next_block = 0
        self.groups: list[list[int]] = []
        self.group_cum: list[float] = []
        if config.prefix is not None:
            per_group = math.ceil(config.prefix.tokens / self.bs)
            for _ in range(config.prefix.groups):
                self.groups.append(self._fresh(per_group))
            weights = (r**-config.prefix.zipf_s for r in range(1, config.prefix.groups + 1))
            self.group_cum = list(itertools.accumulate(weights))

    def _fresh(self, n: int) -> list[int]:
        ids = list(range(self.next_block, self.next_block + n))
        self.next_block += n
        return ids

    def _pick(self, cum: list[float]) -> int:
        return min(bisect.bisect_right(cum, self.rng.random() * cum[-1]), len(cum) - 1)

    def _extend(self, blocks: list[int], tokens: int) -> list[int]:
        """``blocks`` plus fresh ids so that they cover ``tokens`` tokens."""
        need = math.ceil(tokens / self.bs) - len(blocks)
        return blocks + self._fresh(need) if need > 0 else list(blocks)

    def _api(self) -> str:
        if self.config.api == "mixed":
            return s.API_CHAT if self.rng.random() < 0.5 else s.API_COMPLETIONS
        return self.config.api

    def _images(self, cls: WorkloadClass) -> tuple[list[tuple[int, int]], int]:
        cum = list(itertools.accumulate(r.weight for r in cls.resolutions))
        images: list[tuple[int, int]] = []
        for _ in range(self.rng.randint(1, cls.images_max)):
            res = cls.resolutions[self._pick(cum)]
            images.append((res.width, res.height))
        total = sum(image_tokens(self.config.image_model, w, h) for w, h in images)
        return images, total

    def first(self, arrival_s: float) -> tuple[_Draft, WorkloadClass]:
        """A fresh request (or a session's first turn) arriving at ``arrival_s``."""
        cls = self.classes[self._pick(self.class_cum)]
        api = self._api()
        prefix: list[int] = []
        prefix_spec = self.config.prefix
        if prefix_spec is not None and self.rng.random() < prefix_spec.fraction:
            prefix = self.groups[self._pick(self.group_cum)]
        own = cls.input.sample(self.rng)
        tokens = len(prefix) * self.bs + own
        draft = _Draft(
            arrival_s=arrival_s,
            workload=cls.name,
            api=api,
            input_tokens=tokens,
            output_tokens=cls.output.sample(self.rng),
            blocks=self._extend(prefix, tokens),
        )
        if cls.images_max > 0:
            draft.images, draft.image_tokens = self._images(cls)
        return draft, cls

    def follow(self, prev: _Draft, cls: WorkloadClass, arrival_s: float) -> _Draft:
        """The next turn of ``prev``'s session: its whole context plus a new message."""
        message = (cls.followup or cls.input).sample(self.rng)
        tokens = prev.input_tokens + prev.output_tokens + message
        return _Draft(
            arrival_s=arrival_s,
            workload=cls.name,
            api=prev.api,
            input_tokens=tokens,
            output_tokens=cls.output.sample(self.rng),
            blocks=self._extend(prev.blocks, tokens),
            session=prev.session,
            turn=(prev.turn or 1) + 1,
        )


def _scaled(spec: ArrivalSpec, factor: float) -> ArrivalSpec:
    """The same arrival profile with every rate multiplied by ``factor``."""
    return dataclasses.replace(
        spec,
        rate=spec.rate * factor,
        rate_from=spec.rate_from * factor,
        rate_to=spec.rate_to * factor,
        steps=tuple(dataclasses.replace(st, rate=st.rate * factor) for st in spec.steps),
    )


def _plain_requests(config: SynthConfig, builder: _Builder) -> list[_Draft]:
    rng = random.Random(f"llm-loadgen/{config.seed}/arrivals")
    times = arrival_times(config.arrival, rng, count=config.requests, duration_s=config.duration_s)
    return [builder.first(t)[0] for t in times]


def _session_requests(config: SynthConfig, spec: SessionSpec, builder: _Builder) -> list[_Draft]:
    # Sessions start at rate/turns_mean so that requests arrive at about `rate`. With a
    # request count N, N sessions always suffice: the N session starts are N arrivals, so
    # any later session starts after the N-th earliest arrival.
    rng = random.Random(f"llm-loadgen/{config.seed}/arrivals")
    starts = arrival_times(
        _scaled(config.arrival, 1.0 / spec.turns_mean),
        rng,
        count=config.requests,
        duration_s=config.duration_s,
    )
    think_rng = random.Random(f"llm-loadgen/{config.seed}/sessions")
    drafts: list[_Draft] = []
    for index, start in enumerate(starts):
        draft, cls = builder.first(start)
        draft.session, draft.turn = index, 1
        drafts.append(draft)
        for _ in range(spec.turns(think_rng) - 1):
            arrival = draft.arrival_s + spec.think(think_rng)
            if config.duration_s is not None and arrival > config.duration_s:
                break
            draft = builder.follow(draft, cls, arrival)
            drafts.append(draft)
    drafts.sort(key=lambda d: d.arrival_s)  # stable: ties keep generation order
    if config.requests is not None:
        del drafts[config.requests :]
    return drafts


def _agent_requests(config: SynthConfig, spec: AgentSpec, builder: _Builder) -> list[_Draft]:
    # Sessions start at `rate`; with a request count N and no session count, N sessions
    # suffice (each has at least one turn), as in _session_requests.
    rng = random.Random(f"llm-loadgen/{config.seed}/arrivals")
    starts = arrival_times(
        config.arrival,
        rng,
        count=spec.sessions if spec.sessions is not None else config.requests,
        duration_s=config.duration_s,
    )
    turns = agent_sessions(
        spec,
        starts,
        block_size=config.block_size,
        fresh=builder._fresh,
        seed=config.seed,
        horizon_s=config.duration_s,
    )
    drafts = [
        _Draft(
            arrival_s=t.arrival_s,
            workload=AGENT_WORKLOAD,
            api=s.API_CHAT,
            input_tokens=t.input_tokens,
            output_tokens=t.output_tokens,
            blocks=list(t.blocks),
            turn=t.turn,
            session_label=t.session,
            parent_key=(
                (t.session, t.turn - 1)
                if t.turn > 1
                else (
                    (t.parent, t.fork_turn)
                    if t.parent is not None and t.fork_turn is not None
                    else None
                )
            ),
            branch=t.branch,
            think_s=t.think_s if t.turn > 1 or t.parent is not None else None,
            tools=t.tools,
        )
        for t in turns
    ]
    drafts.sort(key=lambda d: d.arrival_s)  # stable: ties keep generation order
    if config.requests is not None:
        del drafts[config.requests :]
    return drafts


def _dictionary(values: list[str], order: Sequence[str], index_type: pa.DataType) -> pa.Array:
    """A dictionary array with a fixed, config-derived dictionary (deterministic bytes)."""
    lookup = {name: i for i, name in enumerate(order)}
    indices = pa.array([lookup[v] for v in values], type=index_type)
    return pa.DictionaryArray.from_arrays(indices, pa.array(list(order), type=pa.string()))


def _api_order(api: str) -> tuple[str, ...]:
    """The ``api`` dictionary: chat and completions (the bytes of earlier traces), then the
    one other API asked for."""
    base = (s.API_CHAT, s.API_COMPLETIONS)
    return base if api in (*base, "mixed") else (*base, api)


def _table(config: SynthConfig, drafts: list[_Draft]) -> pa.Table:
    n = len(drafts)
    offsets = [0]
    flat: list[int] = []
    for d in drafts:
        flat.extend(d.blocks)
        offsets.append(len(flat))
    blocks = pa.ListArray.from_arrays(
        pa.array(offsets, type=pa.int32()), pa.array(flat, type=pa.int64())
    )
    images = pa.array(
        [
            None if d.images is None else [{"width": w, "height": h} for w, h in d.images]
            for d in drafts
        ],
        type=pa.list_(s.IMAGE_TYPE),
    )
    class_order = [AGENT_WORKLOAD] if config.agent else [c.name for c in config.classes]
    ttft = [class_value(config.slo_ttft_ms, d.workload) for d in drafts]
    tpot = [class_value(config.slo_tpot_ms, d.workload) for d in drafts]
    session_ids = [
        d.session_label or (None if d.session is None else f"s{d.session:07d}") for d in drafts
    ]
    parents = _parent_ids(drafts, session_ids)
    columns: dict[str, pa.Array] = {
        s.REQUEST_ID: pa.array([f"r{i:07d}" for i in range(n)], type=pa.string()),
        s.ARRIVAL_S: pa.array([d.arrival_s for d in drafts], type=pa.float64()),
        s.WORKLOAD: _dictionary([d.workload for d in drafts], class_order, pa.int32()),
        s.API: _dictionary([d.api for d in drafts], _api_order(config.api), pa.int8()),
        s.INPUT_TOKENS: pa.array([d.input_tokens for d in drafts], type=pa.int32()),
        s.OUTPUT_TOKENS: pa.array([d.output_tokens for d in drafts], type=pa.int32()),
        s.PREFIX_BLOCKS: blocks,
        s.IMAGES: images,
        s.IMAGE_TOKENS: pa.array([d.image_tokens for d in drafts], type=pa.int32()),
        s.SESSION_ID: pa.array(session_ids, type=pa.string()),
        s.TURN: pa.array([d.turn for d in drafts], type=pa.int32()),
        s.SLO_TTFT_MS: pa.array(ttft, type=pa.float32()),
        s.SLO_TPOT_MS: pa.array(tpot, type=pa.float32()),
        s.PARENT: pa.array(parents, type=pa.string()),
        s.BRANCH: _dictionary_or_null([d.branch for d in drafts], (s.BRANCH_FORK, s.BRANCH_SPAWN)),
        s.THINK_S: pa.array([d.think_s for d in drafts], type=pa.float32()),
    }
    if config.agent is not None:
        columns[s.TOOLS] = pa.array([d.tools for d in drafts], type=pa.string())
    return pa.table(columns)


def _parent_ids(drafts: list[_Draft], session_ids: list[str | None]) -> list[str | None]:
    """Each row's ``parent`` request id: the session's previous turn, or for a sub-agent's
    first turn the turn it branched from (``_Draft.parent_key``); None when not a row."""
    at = {
        (sid, d.turn): i
        for i, (d, sid) in enumerate(zip(drafts, session_ids, strict=True))
        if sid is not None and d.turn is not None
    }
    out: list[str | None] = []
    for d, sid in zip(drafts, session_ids, strict=True):
        key = d.parent_key
        if key is None and sid is not None and d.turn is not None and d.turn > 1:
            key = (sid, d.turn - 1)
        row = at.get(key) if key is not None else None
        out.append(None if row is None else f"r{row:07d}")
    return out


def _dictionary_or_null(values: list[str | None], order: Sequence[str]) -> pa.Array:
    """A dictionary array over a fixed dictionary, nulls kept (deterministic bytes)."""
    lookup = {name: i for i, name in enumerate(order)}
    indices = pa.array([None if v is None else lookup[v] for v in values], type=pa.int8())
    return pa.DictionaryArray.from_arrays(indices, pa.array(list(order), type=pa.string()))


def _jsonable(value: Any) -> Any:
    """Config as JSON values; long empirical samples are summarised, not copied."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {"type": type(value).__name__}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name == "values" and isinstance(item, tuple) and len(item) > 32:
                out["n_values"] = len(item)
                out["mean"] = sum(item) / len(item)
            else:
                out[f.name] = _jsonable(item)
        return out
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    return value


def provenance(config: SynthConfig) -> dict[str, Any]:
    """File metadata for a synthesized trace: no timestamps, so files are reproducible."""
    return {
        "source": "synth",
        "generator": GENERATOR,
        "seed": config.seed,
        "block_size": config.block_size,
        "tokenizer": None,
        "image_model": config.image_model,
        "synth": _jsonable(config),
    }


def synthesize(config: SynthConfig) -> SynthResult:
    """Build the trace table for ``config`` (deterministic in ``config``)."""
    builder = _Builder(config)
    if config.agent is not None:
        drafts = _agent_requests(config, config.agent, builder)
    elif config.sessions is not None:
        drafts = _session_requests(config, config.sessions, builder)
    else:
        drafts = _plain_requests(config, builder)
    if not drafts:
        raise ValueError("no request arrives within the duration; raise the rate or duration")
    return SynthResult(table=_table(config, drafts), provenance=provenance(config))


def write_synth(config: SynthConfig, path: Path) -> SynthResult:
    """Synthesize and write a trace file (validated, atomically)."""
    result = synthesize(config)
    write_trace(result.table, path, result.provenance)
    return result


__all__ = [
    "AGENT_WORKLOAD",
    "COMMON_RESOLUTIONS",
    "AgentSpec",
    "ClassShare",
    "ClassValue",
    "PrefixSpec",
    "Resolution",
    "SynthConfig",
    "SynthResult",
    "WorkloadClass",
    "image_class",
    "long_context_class",
    "parse_class_values",
    "parse_mix",
    "synthesize",
    "text_class",
    "write_synth",
]
