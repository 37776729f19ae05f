"""The physics-driven engine: instances arranged as a monolith or disaggregated, as one Engine.

``monolith``: ``replicas`` mixed instances (prefill and decode share every step) behind a
router. ``disagg``: a request is routed to a prefill instance; when its prompt is computed
its KV cache crosses that instance's link (``latency + kv_bytes / bandwidth``, one transfer
at a time per link, so transfers queue behind each other) and, once it has arrived, the
prefill instance frees its blocks and a decode instance chosen by the router admits it into
its decode batch at the next step boundary; that step samples the first token.

Ground truth per request (model time; wall durations divided by the time scale):
``queue`` = received until the start of its first prefill step (waiting for a batch slot,
the token budget or KV memory); ``prefill`` = from there to the end of the step that
finished its prompt, vision encoding included; ``transfer`` = prefill end until its KV
cache arrived (link queueing included); ``first_token`` = the rest, up to the write of the
first content chunk (in a monolith the prefill step samples it, so this is the write's own
delay; disaggregated it includes waiting for and running the first decode step).

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace

from analyzers.budget.engine.admission import AdmissionPolicy, estimate_ttft, refusal
from analyzers.budget.engine.scheduler import (
    Role,
    SchedulerLimits,
    SeqSpec,
    StepResult,
)
from analyzers.errors import CapacityError
from loadgen.errors import ConfigError, RequestError
from loadgen.sim.config import EngineConfig, SimConfig
from loadgen.sim.context import context_refusal
from loadgen.sim.deadline import DeadlineTimer, make_deadline_timer
from loadgen.sim.engine import Emission, EngineLoad, InstanceStats, Phases, Stall
from loadgen.sim.instance import Instance
from loadgen.sim.physics import HardwareChoice, Physics, link_spec, transfer_s
from loadgen.sim.prefix import block_hashes
from loadgen.sim.prompt import prompt_content
from loadgen.sim.request import SimRequest, prompt_param
from loadgen.sim.router import Router, RouterPolicy
from loadgen.sim.tokenizer import make_tokenizer


def instance_setup(spec: EngineConfig, gpus: int) -> tuple[Physics, SchedulerLimits]:
    """The physics and batch limits of one instance of ``gpus`` GPUs under ``spec``: shared
    by the real-time engine and the offline one (:mod:`loadgen.sim.offline.engine`)."""
    physics = Physics(
        HardwareChoice(
            model=spec.model,
            gpu=spec.gpu,
            gpus=gpus,
            prefill_efficiency=spec.efficiency_prefill,
            decode_efficiency=spec.efficiency_decode,
            step_overhead_s=spec.step_overhead_us / 1e6,
            memory_fraction=spec.memory_fraction,
            profile=spec.profile,
            catalog=spec.catalog,
        ),
        chunk_tokens=spec.max_batched_tokens,
    )
    capacity = spec.kv_capacity_tokens or physics.kv_capacity_tokens()
    blocks = capacity // spec.kv_block_size
    if blocks < 1:
        raise ConfigError(
            f"{spec.model} on {gpus} x {spec.gpu} leaves no memory for the KV cache; "
            "add GPUs or raise --memory-fraction"
        )
    limits = SchedulerLimits(
        num_blocks=blocks,
        block_size=spec.kv_block_size,
        max_num_seqs=spec.max_num_seqs,
        max_batched_tokens=spec.max_batched_tokens,
        prefix_cache=spec.prefix_cache,
        preempt=spec.preempt,
    )
    return physics, limits


class _Ticket:
    """One request's progress through the engine, and the waiter of its handler."""

    __slots__ = (
        "back",
        "cached",
        "closed",
        "decode_start_ns",
        "engine_ns",
        "first_step_ns",
        "front",
        "prefill_end_ns",
        "received_ns",
        "request",
        "seq_id",
        "times",
        "transfer_end_ns",
        "waiter",
    )

    def __init__(self, seq_id: int, request: SimRequest, received_ns: int, front: Instance):
        self.seq_id = seq_id
        self.request = request
        self.received_ns = received_ns
        self.engine_ns = received_ns
        """When the engine saw the request: after the front end (``frontend_ms``)."""
        self.front = front
        self.back: Instance | None = None
        self.first_step_ns: int | None = None
        self.prefill_end_ns: int | None = None
        self.transfer_end_ns: int | None = None
        self.decode_start_ns: int | None = None
        self.cached = 0
        self.times: list[int] = []
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False

    def push(self, due_ns: int) -> None:
        self.times.append(due_ns)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def token(self, k: int) -> int:
        """The due instant of output token ``k`` (0-based), once its step has ended."""
        while len(self.times) <= k:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        return self.times[k]

    def phases(self, scale: float) -> Phases:
        arrived = self.engine_ns  # the queue starts at the engine, as vLLM's does
        first_step = self.first_step_ns if self.first_step_ns is not None else arrived
        prefill_end = self.prefill_end_ns if self.prefill_end_ns is not None else first_step
        ready = self.transfer_end_ns if self.transfer_end_ns is not None else prefill_end
        decode = self.decode_start_ns if self.decode_start_ns is not None else ready
        disagg = self.back is not None
        return Phases(
            queue_ns=round((first_step - arrived) / scale),
            prefill_ns=round((prefill_end - first_step) / scale),
            transfer_ns=round((ready - prefill_end) / scale),
            decode_wait_ns=round((decode - ready) / scale),
            first_token_ns=round((self.times[0] - decode) / scale),
            cached_tokens=self.cached,
            instance=self.back.name if self.back is not None else self.front.name,
            prefill_instance=self.front.name if disagg else None,
        )


class PhysicsEngine:
    """An :class:`~loadgen.sim.engine.Engine` whose timing comes from the budget model."""

    def __init__(self, config: SimConfig, *, timer: DeadlineTimer | None = None) -> None:
        if config.engine is None:
            raise ConfigError("the physics engine needs an engine configuration (--model)")
        spec: EngineConfig = config.engine
        self._config = config
        self.spec = spec
        self._timer = timer if timer is not None else make_deadline_timer()
        self._tokenizer = make_tokenizer(spec.tokenizer)
        self._scale = spec.time_scale
        self._link = link_spec(gbps=spec.link_gbps, latency_us=spec.link_latency_us)
        policy: RouterPolicy = "round-robin" if spec.router == "round-robin" else "least-loaded"
        self._front_router = Router(policy)
        self._back_router = Router(policy)
        self.front: list[Instance] = []
        self.back: list[Instance] = []
        if spec.topology == "monolith":
            self.front = self._pool("r", spec.replicas, spec.gpus, "mixed")
        else:
            self.front = self._pool("p", spec.prefill_instances, spec.prefill_gpus, "prefill")
            self.back = self._pool("d", spec.decode_instances, spec.decode_gpus, "decode")
        self.max_model_len = spec.max_model_len or self.front[0].physics.model.max_context
        self.admission = (
            None
            if spec.admission_ttft_ms is None
            else AdmissionPolicy(
                ttft_budget_s=spec.admission_ttft_ms / 1e3,
                margin_s=spec.admission_margin_ms / 1e3,
            )
        )
        self._tickets: dict[int, _Ticket] = {}
        self._reserved: dict[int, tuple[SeqSpec, Instance]] = {}
        """Requests admission control let in that ``generate`` has not submitted yet (by
        ``id`` of the request), with the front instance the router picked for them: later
        estimates on that instance count them, so that a burst is not admitted on one
        stale view of its queue, and ``generate`` submits them there."""
        self._ids = itertools.count(1)
        self._link_free: dict[str, int] = {}
        self._group: asyncio.TaskGroup | None = None
        self._transfers: set[asyncio.Task[None]] = set()

    def _pool(self, prefix: str, count: int, gpus: int, role: Role) -> list[Instance]:
        physics, limits = instance_setup(self.spec, gpus)
        return [
            Instance(
                f"{prefix}{i}",
                role=role,
                physics=physics,
                limits=limits,
                time_scale=self.spec.time_scale,
                timer=self._timer,
                on_step=self._on_step,
                frontend_s=0.0 if role == "decode" else self._config.frontend_ms / 1e3,
                frontend_share=self._config.frontend_share,
            )
            for i in range(count)
        ]

    @property
    def instance(self) -> str:
        return self.spec.topology

    @property
    def time_scale(self) -> float:
        return self._scale

    @property
    def tokenizer_name(self) -> str:
        """The tokenizer's name, for /v1/models metadata."""
        return self._tokenizer.name

    def load(self) -> EngineLoad:
        stats = self.stats()
        return EngineLoad(
            running=sum(s.running for s in stats), waiting=sum(s.waiting for s in stats)
        )

    def stats(self) -> list[InstanceStats]:
        return [inst.stats() for inst in (*self.front, *self.back)]

    def prepare(self, request: SimRequest, body: Mapping[str, object]) -> SimRequest:
        content = prompt_content(body, api=request.api)
        tokens = [*self._tokenizer.tokenize(content.text), *content.token_ids]
        physics = self.front[0].physics
        fallback = self._config.image_tokens
        image_tokens = sum(
            physics.image_tokens(img, fallback=fallback) if img is not None else fallback
            for img in content.images
        )
        n = len(tokens) + image_tokens
        if n < 1:
            raise RequestError("the prompt is empty", param="prompt")
        too_long = context_refusal(
            prompt_tokens=n, max_tokens=request.max_tokens, max_model_len=self.max_model_len
        )
        if too_long is not None:
            raise RequestError(too_long, param=prompt_param(request.api))
        # Image tokens have no text to hash: such prompts are not prefix-cached.
        hashes = () if content.images else block_hashes(tokens, self.spec.kv_block_size)
        images = [img for img in content.images if img is not None]
        prepared = replace(
            request,
            prompt_tokens=n,
            block_hashes=hashes,
            encoder_s=physics.encoder_s(images),
        )
        seq = self._seq(prepared, 0)
        try:
            self.front[0].check(seq)
            if self.back:
                self.back[0].check(seq)
        except CapacityError as exc:
            raise RequestError(str(exc), param="max_tokens") from exc
        return prepared

    def admission_refusal(self, request: SimRequest) -> str | None:
        """Why admission control refuses ``request`` now (429), or None (admitted, or no
        policy): the estimate on the front instance the router picks, the one that will
        serve it (a refusal uses its router turn, as a real balancer's backend's 429)."""
        if self.admission is None:
            return None
        seq = self._seq(request, 0)
        link = 0.0
        if self.back:
            link = transfer_s(self.front[0].physics, request.prompt_tokens, self._link)
        promised = [where for _, where in self._reserved.values()]
        inst = self._front_router.choose(self.front, lambda i: promised.count(i))
        now = time.perf_counter_ns()
        reserved = [spec for spec, where in self._reserved.values() if where is inst]
        estimate = estimate_ttft(
            inst.scheduler,
            [*inst.pending_specs(), *reserved],
            seq,
            inst.physics.step_s,
            extra_s=link + inst.busy_remaining_s(now),
        )
        why = refusal(self.admission, estimate, where=inst.name)
        if why is None:
            self._reserved[id(request)] = (seq, inst)
        return why

    def admission_done(self, request: SimRequest) -> None:
        """Drop ``request``'s reservation if ``generate`` never took it (the client left
        before its response started)."""
        self._reserved.pop(id(request), None)

    @staticmethod
    def _seq(request: SimRequest, seq_id: int, *, decode: bool = False) -> SeqSpec:
        return SeqSpec(
            seq_id=seq_id,
            prompt_tokens=request.prompt_tokens,
            max_tokens=request.max_tokens,
            block_hashes=() if decode else request.block_hashes,
            encoder_s=0.0 if decode else request.encoder_s,
        )

    @asynccontextmanager
    async def _scope(self) -> AsyncIterator[None]:
        self._timer.open()
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                loops = [
                    group.create_task(inst.run(), name=f"sim-instance-{inst.name}")
                    for inst in (*self.front, *self.back)
                ]
                try:
                    yield
                finally:
                    self._group = None
                    for task in (*loops, *self._transfers):
                        task.cancel()
        finally:
            self._timer.close()

    def running(self) -> AbstractAsyncContextManager[None]:
        return self._scope()

    def _on_step(self, inst: Instance, result: StepResult, start_ns: int, end_ns: int) -> None:
        tickets = self._tickets
        if inst.role != "decode":
            for adm in result.admitted:
                ticket = tickets.get(adm.seq_id)
                if ticket is not None and ticket.first_step_ns is None:
                    ticket.first_step_ns = start_ns
                    ticket.cached = adm.cached_tokens
            for seq_id in result.prefilled:
                ticket = tickets.get(seq_id)
                if ticket is not None:
                    ticket.prefill_end_ns = end_ns
                    if inst.role == "prefill":
                        self._handoff(ticket, inst, end_ns)
        else:
            for adm in result.admitted:
                ticket = tickets.get(adm.seq_id)
                if ticket is not None and ticket.decode_start_ns is None:
                    ticket.decode_start_ns = start_ns
        for seq_id in result.sampled:
            ticket = tickets.get(seq_id)
            if ticket is not None:
                ticket.push(end_ns)

    def _handoff(self, ticket: _Ticket, prefill: Instance, ready_ns: int) -> None:
        start = max(ready_ns, self._link_free.get(prefill.name, 0))
        seconds = transfer_s(prefill.physics, ticket.request.prompt_tokens, self._link)
        done = start + round(seconds * self._scale * 1e9)
        self._link_free[prefill.name] = done
        ticket.transfer_end_ns = done
        if self._group is None:
            return
        task = self._group.create_task(self._deliver(ticket, prefill, done))
        self._transfers.add(task)
        task.add_done_callback(self._transfers.discard)

    async def _deliver(self, ticket: _Ticket, prefill: Instance, done_ns: int) -> None:
        await self._timer.sleep_until(done_ns)
        prefill.release(ticket.seq_id, at_ns=done_ns)
        if ticket.closed:
            return
        decode = self._back_router.choose(self.back)
        ticket.back = decode
        decode.submit(self._seq(ticket.request, ticket.seq_id, decode=True), arrival_ns=done_ns)

    async def generate(
        self, request: SimRequest, *, received_ns: int, stall: Stall | None = None
    ) -> AsyncGenerator[Emission, None]:
        pinned = self._reserved.pop(id(request), None)
        seq_id = next(self._ids)
        front = pinned[1] if pinned is not None else self._front_router.choose(self.front)
        ticket = _Ticket(seq_id, request, received_ns, front)
        self._tickets[seq_id] = ticket
        ticket.engine_ns = front.submit(self._seq(request, seq_id), arrival_ns=received_ns)
        per_chunk = self._config.tokens_per_chunk
        total = request.max_tokens
        try:
            emitted = index = 0
            phases: Phases | None = None
            while emitted < total:
                n = min(per_chunk, total - emitted)
                due = await ticket.token(emitted + n - 1)
                if phases is None:
                    phases = ticket.phases(self._scale)
                if stall is not None and index >= stall.from_chunk:
                    due += stall.stall_ns
                    await self._timer.sleep_until(due)
                yield Emission(
                    index=index,
                    first_token=emitted,
                    tokens=n,
                    due_ns=due,
                    last=emitted + n >= total,
                    phases=phases,
                )
                emitted += n
                index += 1
        finally:
            ticket.closed = True
            del self._tickets[seq_id]
            if len(ticket.times) < total:
                now = time.perf_counter_ns()
                (ticket.back or ticket.front).abort(seq_id, at_ns=now)
                if ticket.back is not None:
                    ticket.front.abort(seq_id, at_ns=now)
