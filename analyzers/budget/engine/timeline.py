"""The budget at the run's own load: replay its arrivals through the engine's batching policy.

The batch-1 budget (``prefill_time_s``) says what a prompt costs alone. Under load a
chunked-prefill engine spreads a prompt over steps it shares with other sequences, each
step lasting as long as the whole batch, and a disaggregated decode instance samples the
first token in a step shared with every sequence it is decoding. ``replay_schedule`` puts
the requests of a run, at their arrival times, through the same iteration-level scheduler
the engine simulator runs (:mod:`analyzers.budget.engine.scheduler`, vLLM's policy: token budget
per step, running sequences first, FCFS admission, KV blocks reserved for a sequence's
life) with every step timed by the budget's roofline (``step_time_s``), in virtual time.
Each request's predicted phases come out: queue, prefill, KV transfer, first token.

Topologies: ``replicas`` mixed instances behind a router (monolith), or ``replicas``
prefill instances and ``decode_instances`` decode instances with one KV link per prefill
instance, transfers queueing on it (disaggregated). Image encoding is not modelled here
(a run records image token counts, not pixel sizes).

Pure Python: must not import ``loadgen``, httpx or polars.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from analyzers.budget.engine.scheduler import (
    Role,
    Scheduler,
    SchedulerLimits,
    SeqSpec,
)
from analyzers.budget.engine.step import StepClock
from analyzers.budget.kv import kv_capacity_tokens, kv_transfer_time_s
from analyzers.budget.specs import Deployment, LinkSpec, ModelSpec
from analyzers.errors import BudgetError, CapacityError

RouterPolicy = Literal["round-robin", "least-loaded"]
UNCHUNKED_BUDGET = 1 << 30
"""The step token budget of an engine without chunked prefill: a whole prompt per step."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Arrival:
    """One request as the server saw it: when (model seconds) and how much work."""

    key: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise BudgetError(
                f"request {self.key}: prompt and output need at least one token, got "
                f"{self.prompt_tokens} and {self.output_tokens}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineShape:
    """Instances and batching limits the replay assumes (``decode_instances`` > 0 and a
    ``link``: disaggregated, ``replicas`` being the prefill instances)."""

    model: ModelSpec
    deployment: Deployment
    replicas: int = 1
    decode_instances: int = 0
    link: LinkSpec | None = None
    max_num_seqs: int = 256
    block_size: int = 16
    router: RouterPolicy = "least-loaded"

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.decode_instances < 0 or self.max_num_seqs < 1:
            raise BudgetError(
                f"engine shape: need replicas >= 1, decode_instances >= 0, max_num_seqs >= 1; "
                f"got {self.replicas}, {self.decode_instances}, {self.max_num_seqs}"
            )
        if self.decode_instances and self.link is None:
            raise BudgetError("engine shape: a disaggregated engine needs a KV link")

    @property
    def disaggregated(self) -> bool:
        """Prefill and decode on separate instances."""
        return self.decode_instances > 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictedPhases:
    """One request's predicted server phases, model seconds (see ``loadgen sim``'s truth)."""

    queue_s: float
    prefill_s: float
    transfer_s: float
    first_token_s: float
    instance: str
    decode_wait_s: float = 0.0
    """Disaggregated: from the KV's arrival to the decode instance's first step with the
    request (``first_token_s`` is then that step); 0 for a monolith."""
    second_token_s: float | None = None
    """From the first token to the second (the next step's length), when asked for and the
    request has one."""


class VirtualInstance:
    """One instance of the virtual-time loop: a named scheduler, the sequences that arrived
    for it and not yet joined (``pending``), and when its next step can start."""

    __slots__ = ("busy_until", "floor", "kick", "name", "pending", "scheduler")

    def __init__(self, name: str, scheduler: Scheduler) -> None:
        self.name = name
        self.scheduler = scheduler
        self.pending: list[tuple[float, SeqSpec]] = []
        self.busy_until: float | None = None
        self.floor = 0.0
        self.kick: float | None = None

    def load(self) -> int:
        """Sequences held or about to be (the least-loaded router's key)."""
        sched = self.scheduler
        return len(self.pending) + sched.num_running + sched.num_waiting

    def next_start(self) -> float | None:
        """When this instance starts its next step, as far as is known now."""
        if self.busy_until is not None:
            return self.busy_until
        times = [t for t, _ in self.pending]
        if self.kick is not None and self.scheduler.has_work():
            times.append(self.kick)
        return max(self.floor, min(times)) if times else None


class VirtualTrack:
    """One request's times in the virtual-time loop (model seconds; None: not reached)."""

    __slots__ = (
        "arrival",
        "back",
        "cached",
        "decode_start",
        "first_step",
        "front",
        "prefill_end",
        "sample",
        "second",
        "times",
        "transfer_end",
    )

    def __init__(self, arrival: float) -> None:
        self.arrival = arrival
        self.front = ""
        self.back: str | None = None
        self.first_step: float | None = None
        self.cached = 0
        self.prefill_end: float | None = None
        self.transfer_end: float | None = None
        self.decode_start: float | None = None
        self.sample: float | None = None
        self.second: float | None = None
        self.times: list[float] = []
        """Every sampled token's time (only when the cluster records tokens)."""

    def phases(self) -> PredictedPhases | None:
        """Queue, prefill, transfer, decode wait and first token, once the first token is
        sampled."""
        if self.first_step is None or self.prefill_end is None or self.sample is None:
            return None
        ready = self.transfer_end if self.transfer_end is not None else self.prefill_end
        decode = self.decode_start if self.decode_start is not None else ready
        return PredictedPhases(
            queue_s=self.first_step - self.arrival,
            prefill_s=self.prefill_end - self.first_step,
            transfer_s=ready - self.prefill_end,
            decode_wait_s=decode - ready,
            first_token_s=self.sample - decode,
            instance=self.front,
            second_token_s=None if self.second is None else self.second - self.sample,
        )


FinishCallback = Callable[[int, float], None]
"""Told ``(key, t)`` when request ``key`` sampled its last token at ``t`` (closed loops)."""
AdmitCallback = Callable[[SeqSpec, "VirtualInstance", float], str | None]
"""Asked on each arrival, with the front instance the router picked for it (as it is then)
and the time: why to refuse the request (admission control,
:mod:`analyzers.budget.engine.admission`), or None."""


class VirtualCluster:
    """The virtual-time event loop over every instance (mirrors ``loadgen.sim.instance``
    and ``loadgen.sim.topology``): arrivals and KV deliveries are events, each instance
    steps at the earliest start known, and the earliest thing always happens first.

    ``front``: the mixed (monolith) or prefill instances; ``back``: the decode instances
    (disaggregated; then ``transfer_s(prompt_tokens)`` times one KV transfer on the prefill
    instance's own link, transfers queueing on it). Each pool has its own router turn.
    ``record_tokens``: keep every sampled token's time, not only the first. ``admit``:
    asked on each arrival whether the instance the router picked refuses it (``refused``
    keeps the reasons); a refused request has used its router turn, as behind a real
    round-robin balancer whose backend answers 429."""

    def __init__(
        self,
        front: Sequence[VirtualInstance],
        back: Sequence[VirtualInstance] = (),
        *,
        router: RouterPolicy = "least-loaded",
        transfer_s: Callable[[int], float] | None = None,
        record_tokens: bool = False,
        on_finish: FinishCallback | None = None,
        second_token: bool = False,
        admit: AdmitCallback | None = None,
    ) -> None:
        if not front:
            raise BudgetError("a virtual cluster needs at least one instance")
        if back and transfer_s is None:
            raise BudgetError("a disaggregated virtual cluster needs a KV transfer time")
        self.front = list(front)
        self.back = list(back)
        self.router = router
        self.transfer_s = transfer_s
        self.record_tokens = record_tokens
        self.on_finish = on_finish
        self.second_token = second_token
        self.admit = admit
        self.refused: dict[int, str] = {}
        """Requests refused by ``admit`` on arrival, with the reason."""
        self.tracks: dict[int, VirtualTrack] = {}
        self.specs: dict[int, SeqSpec] = {}
        self.events: list[tuple[float, int, int, str]] = []
        self.order = itertools.count()
        self.front_turn = itertools.count()
        self.back_turn = itertools.count()
        self.link_free: dict[str, float] = {}
        self.front_of: dict[int, VirtualInstance] = {}
        self.waiting_first = 0
        self.waiting_second = 0
        """Requests still without their second token (counted with ``second_token`` only)."""
        self.rejected: set[int] = set()
        self.steps = 0

    def arrive(self, spec: SeqSpec, at_s: float) -> None:
        """Request ``spec.seq_id`` reaches the cluster at ``at_s`` (not before the present)."""
        key = spec.seq_id
        if key in self.specs:
            raise BudgetError(f"request key {key} appears twice in the schedule replay")
        self.specs[key] = spec
        self.tracks[key] = VirtualTrack(at_s)
        self.waiting_first += 1
        if self.second_token and spec.max_tokens > 1:
            self.waiting_second += 1
        heapq.heappush(self.events, (at_s, next(self.order), key, "arrive"))

    def _choose(self, pool: list[VirtualInstance], turn: Iterator[int]) -> VirtualInstance:
        if len(pool) == 1:
            return pool[0]
        if self.router == "round-robin":
            return pool[next(turn) % len(pool)]
        return min(pool, key=VirtualInstance.load)

    def _event(self) -> None:
        t, _, key, kind = heapq.heappop(self.events)
        spec = self.specs[key]
        if kind == "arrive":
            inst = self._choose(self.front, self.front_turn)
            if self.admit is not None:
                why = self.admit(spec, inst, t)
                if why is not None:
                    self.refused[key] = why
                    self.waiting_first -= 1
                    if self.second_token and spec.max_tokens > 1:
                        self.waiting_second -= 1
                    return
            self.tracks[key].front = inst.name
            self.front_of[key] = inst
            inst.pending.append((t, spec))
            return
        # "deliver": the KV cache arrived; the prefill instance frees its blocks.
        front = self.front_of[key]
        front.scheduler.release(key)
        front.kick = t if front.kick is None else min(front.kick, t)
        back = self._choose(self.back, self.back_turn)
        self.tracks[key].back = back.name
        back.pending.append(
            (t, SeqSpec(seq_id=key, prompt_tokens=spec.prompt_tokens, max_tokens=spec.max_tokens))
        )

    def _step(self, inst: VirtualInstance, start: float) -> None:
        inst.kick = None
        keep: list[tuple[float, SeqSpec]] = []
        for t, spec in inst.pending:
            if t > start:
                keep.append((t, spec))
                continue
            try:
                inst.scheduler.add(spec)
            except CapacityError:
                self.waiting_first -= 1  # never fits: no phases
                if self.second_token and spec.max_tokens > 1:
                    self.waiting_second -= 1
                self.rejected.add(spec.seq_id)
        inst.pending = keep
        result = inst.scheduler.step()
        if result is None:  # idle, or blocked on KV memory until a release
            inst.busy_until = None
            inst.floor = start
            return
        end = start + result.duration_s
        inst.busy_until = inst.floor = end
        role = inst.scheduler.role
        tracks = self.tracks
        if role != "decode":
            for adm in result.admitted:
                track = tracks[adm.seq_id]
                if track.first_step is None:
                    track.first_step = start
                    track.cached = adm.cached_tokens
            for key in result.prefilled:
                tracks[key].prefill_end = end
                if role == "prefill":
                    self._handoff(inst, key, end)
        else:
            for adm in result.admitted:
                track = tracks[adm.seq_id]
                if track.decode_start is None:
                    track.decode_start = start
        if self.record_tokens and not self.second_token:  # the offline engine's hot path
            for key in result.sampled:
                track = tracks[key]
                times = track.times
                if not times:  # its first token (times has every one)
                    track.sample = end
                    self.waiting_first -= 1
                times.append(end)
        else:
            record = self.record_tokens
            for key in result.sampled:
                track = tracks[key]
                if track.sample is None:
                    track.sample = end
                    self.waiting_first -= 1
                elif track.second is None and self.second_token:
                    track.second = end
                    self.waiting_second -= 1
                if record:
                    track.times.append(end)
        if self.on_finish is not None:
            for key in result.finished:
                self.on_finish(key, end)

    def _handoff(self, inst: VirtualInstance, key: int, ready: float) -> None:
        assert self.transfer_s is not None
        begin = max(ready, self.link_free.get(inst.name, 0.0))
        done = begin + self.transfer_s(self.specs[key].prompt_tokens)
        self.link_free[inst.name] = done
        self.tracks[key].transfer_end = done
        heapq.heappush(self.events, (done, next(self.order), key, "deliver"))

    def run(self, *, max_steps: int, first_tokens_only: bool = False) -> None:
        """Step until nothing is left to do (or, with ``first_tokens_only``, until every
        request has its first token, and its second with ``second_token``). Raises
        ``BudgetError`` past ``max_steps`` steps."""
        instances = [*self.front, *self.back]
        events = self.events
        while not first_tokens_only or self.waiting_first > 0 or self.waiting_second > 0:
            best: VirtualInstance | None = None
            best_start = 0.0
            for inst in instances:
                start = inst.next_start()
                if start is not None and (best is None or start < best_start):
                    best, best_start = inst, start
            if events and (best is None or events[0][0] <= best_start):
                self._event()
                continue
            if best is None:
                break  # done, or blocked for good (a request that never fits)
            self._step(best, best_start)
            self.steps += 1
            if self.steps > max_steps:
                raise BudgetError(
                    f"the schedule replay stopped after {max_steps:,} steps "
                    f"({self.waiting_first:,} requests still without a first token)"
                )


def _replay_instance(shape: EngineShape, name: str, role: Role, longest: int) -> VirtualInstance:
    model, deploy = shape.model, shape.deployment
    chunk = deploy.chunk_tokens or max(UNCHUNKED_BUDGET, longest)
    blocks = kv_capacity_tokens(model, deploy) // shape.block_size
    if blocks < 1:
        raise BudgetError(f"{model.name}: no memory left for the KV cache in the replay")
    limits = SchedulerLimits(
        num_blocks=blocks,
        block_size=shape.block_size,
        max_num_seqs=shape.max_num_seqs,
        max_batched_tokens=chunk,
        prefix_cache=False,  # cached tokens come from each request's reported usage
    )

    return VirtualInstance(name, Scheduler(StepClock(model, deploy), limits, role=role))


def replay_schedule(
    arrivals: Sequence[Arrival],
    shape: EngineShape,
    *,
    max_steps: int = 1_000_000,
    second_token: bool = False,
) -> dict[int, PredictedPhases]:
    """Each request's predicted phases under the load of all of them (by ``Arrival.key``).

    Requests that can never fit the KV cache get no entry. Stops once every request has
    its first token (later decode steps change no phase), or with ``second_token`` its
    second too (``PredictedPhases.second_token_s``). Raises ``BudgetError`` past
    ``max_steps`` steps."""
    if not arrivals:
        return {}
    longest = max(a.prompt_tokens for a in arrivals)
    role: Role = "prefill" if shape.disaggregated else "mixed"
    front = [_replay_instance(shape, f"{role}{i}", role, longest) for i in range(shape.replicas)]
    back = [
        _replay_instance(shape, f"decode{i}", "decode", longest)
        for i in range(shape.decode_instances)
    ]
    link = shape.link
    model = shape.model

    def transfer(prompt_tokens: int) -> float:
        assert link is not None
        return kv_transfer_time_s(model, prompt_tokens, link)

    cluster = VirtualCluster(
        front,
        back,
        router=shape.router,
        transfer_s=transfer if shape.disaggregated else None,
        second_token=second_token,
    )
    for a in arrivals:
        spec = SeqSpec(
            seq_id=a.key,
            prompt_tokens=a.prompt_tokens,
            max_tokens=a.output_tokens,
            cached_tokens=min(a.cached_tokens, a.prompt_tokens - 1),
        )
        cluster.arrive(spec, a.arrival_s)
    cluster.run(max_steps=max_steps, first_tokens_only=True)
    out: dict[int, PredictedPhases] = {}
    for key, track in cluster.tracks.items():
        phases = track.phases()
        if phases is not None:
            out[key] = phases
    return out
