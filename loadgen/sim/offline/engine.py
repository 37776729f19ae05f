"""The offline what-if engine: a trace through the simulator's physics in virtual time.

``loadgen simulate`` runs the scheduler and the physics of the HTTP simulator's
:class:`~loadgen.sim.topology.PhysicsEngine` (the same :class:`EngineConfig`, the same
instance setup, router policy, KV link and prefix-cache keys) without HTTP, sockets,
sleeping or timers: the virtual-time event loop of
:mod:`analyzers.budget.engine.timeline` (:class:`VirtualCluster`) steps every instance
and records when each token is sampled. What comes out is one
:class:`~traces.records.RequestRecord` per request, shaped like the replay's rows against
the HTTP simulator: ``due``/``sent``/``written``/``headers`` at the arrival, one content
chunk per token at the end of the step that sampled it, the simulator's ground truth in
the ``server_*`` columns. Every stamp is ``SIM_EPOCH_NS`` plus model time, so the same
inputs give the same rows.

Load: open loop (trace timestamps times a factor) or closed loop (``concurrency``
requests in flight, the next one sent when one finishes). Prompts are counted as the
replay renders them for the simulator: ``input_tokens`` of text plus each image's tokens by
the model's vision rule (as the HTTP simulator counts them), and equal
``prefix_blocks`` ids of the trace become equal prefix-cache keys, block by block, as the
rendered text does. Sessions are replayed like the replay does, at their timestamps.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from analyzers.budget.engine.admission import AdmissionPolicy, estimate_ttft, refusal
from analyzers.budget.engine.scheduler import Role, Scheduler, SeqSpec
from analyzers.budget.engine.timeline import (
    FinishCallback,
    VirtualCluster,
    VirtualInstance,
    VirtualTrack,
)
from analyzers.errors import CapacityError
from loadgen.errors import ConfigError
from loadgen.sim.config import EngineConfig
from loadgen.sim.context import context_refusal
from loadgen.sim.physics import ImageSize, Physics, link_spec, transfer_s
from loadgen.sim.topology import instance_setup
from traces import schema as s
from traces.records import RequestRecord, TraceRequest, int_bounds

SIM_EPOCH_NS = 1_704_067_200_000_000_000
"""Where virtual time 0 sits on the run's epoch-ns axis (2024-01-01T00:00:00Z): a fixed
origin, so that a rerun writes the same stamps."""
MAX_STEPS = 50_000_000
"""Upper bound on engine steps of one simulation (a guard, far above any trace's need)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OfflineLoad:
    """How the trace is offered: open loop at ``arrival_s x time_factor`` (from the first
    arrival), or closed loop with ``concurrency`` requests in flight."""

    time_factor: float = 1.0
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if not self.time_factor >= 0:
            raise ConfigError(f"time factor must be >= 0, got {self.time_factor}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError(f"--concurrency must be >= 1, got {self.concurrency}")

    @property
    def mode(self) -> str:
        """``open`` or ``closed``, as ``run.json`` names it."""
        return "open" if self.concurrency is None else "closed"


@dataclass(frozen=True, slots=True, kw_only=True)
class OfflineResult:
    """The rows of a simulation (trace order), the engine steps it took, and the first
    and last stamps (epoch ns)."""

    records: tuple[RequestRecord, ...]
    steps: int
    start_ns: int
    end_ns: int


class PrefixKeys:
    """Prefix-cache keys of trace prompts: equal ``prefix_blocks`` prefixes give equal keys.

    The replay renders block id ``b`` of a trace (``trace_block`` tokens) as the same text
    wherever it appears, and the simulator keys each full ``kv_block``-token block by its
    own tokens and everything before it. Here the content of a KV block is the trace
    block ids it covers and its offset in them; a key is a small integer given to each
    distinct (parent key, content) pair, so two prompts share key ``i`` exactly when the
    rendered texts share their first ``i + 1`` blocks. Tokens past the trace's blocks
    (and prompts without them) are unique to their request."""

    def __init__(self, *, trace_block: int, kv_block: int) -> None:
        if trace_block < 1 or kv_block < 1:
            raise ConfigError("block sizes must be >= 1")
        self._trace_block = trace_block
        self._kv_block = kv_block
        self._next = 1
        self._memo: dict[tuple[int, object], int] = {}
        self._runs: dict[tuple[int, int], int] = {}

    def keys(self, blocks: Sequence[int] | None, prompt_tokens: int) -> tuple[int, ...]:
        """The keys of the full KV blocks of a prompt of ``prompt_tokens`` tokens."""
        full = prompt_tokens // self._kv_block
        out: list[int] = []
        if blocks:
            if self._trace_block % self._kv_block == 0:
                self._aligned(blocks, full, out)
            else:
                self._general(blocks, full, out)
        if len(out) < full:
            first = self._take(full - len(out))
            out.extend(range(first, first + full - len(out)))
        return tuple(out)

    def _take(self, n: int) -> int:
        """The first of ``n`` fresh consecutive keys."""
        first = self._next
        self._next += n
        return first

    def _aligned(self, blocks: Sequence[int], full: int, out: list[int]) -> None:
        per = self._trace_block // self._kv_block
        node = 0
        runs = self._runs
        for block in blocks:
            if len(out) >= full:
                break
            # A run of ``per`` keys: node + 1 .. node + per; the trace block's node is first.
            first = runs.get((node, block))
            if first is None:
                first = runs[(node, block)] = self._take(per + 1)
            node = first
            out.extend(range(first + 1, first + 1 + per))
        del out[full:]

    def _general(self, blocks: Sequence[int], full: int, out: list[int]) -> None:
        tb, kb = self._trace_block, self._kv_block
        parent = 0
        memo = self._memo
        for i in range(full):
            first, last = (i * kb) // tb, ((i + 1) * kb - 1) // tb
            if last >= len(blocks):
                return
            content = (tuple(blocks[first : last + 1]), (i * kb) % tb)
            key = memo.get((parent, content))
            if key is None:
                key = memo[(parent, content)] = self._take(1)
            out.append(key)
            parent = key


class _Cluster:
    """The simulator's instances (named as it names them) in a virtual-time cluster."""

    def __init__(self, spec: EngineConfig, on_finish: FinishCallback | None) -> None:
        self.spec = spec
        if spec.topology == "monolith":
            self.front = self._pool("r", spec.replicas, spec.gpus, "mixed")
            self.back: list[VirtualInstance] = []
        else:
            self.front = self._pool("p", spec.prefill_instances, spec.prefill_gpus, "prefill")
            self.back = self._pool("d", spec.decode_instances, spec.decode_gpus, "decode")
        physics = self.physics
        link = link_spec(gbps=spec.link_gbps, latency_us=spec.link_latency_us)

        def transfer(prompt_tokens: int) -> float:
            return transfer_s(physics, prompt_tokens, link)

        policy = (
            None
            if spec.admission_ttft_ms is None
            else AdmissionPolicy(
                ttft_budget_s=spec.admission_ttft_ms / 1e3,
                margin_s=spec.admission_margin_ms / 1e3,
            )
        )

        def admit(seq: SeqSpec, inst: VirtualInstance, now_s: float) -> str | None:
            # As the HTTP simulator's PhysicsEngine.admission_refusal: the estimate on the
            # front instance the router picked, the one that would serve the request.
            assert policy is not None
            extra = transfer(seq.prompt_tokens) if self.back else 0.0
            estimate = estimate_ttft(
                inst.scheduler,
                [p for _, p in inst.pending],
                seq,
                physics.step_s,
                # the step in progress ends before this one can join
                extra_s=extra + max(0.0, (inst.busy_until or now_s) - now_s),
            )
            return refusal(policy, estimate, where=inst.name)

        self.cluster = VirtualCluster(
            self.front,
            self.back,
            router="round-robin" if spec.router == "round-robin" else "least-loaded",
            transfer_s=transfer if self.back else None,
            record_tokens=True,
            on_finish=on_finish,
            admit=admit if policy is not None else None,
        )

    def _pool(self, prefix: str, count: int, gpus: int, role: Role) -> list[VirtualInstance]:
        physics, limits = instance_setup(self.spec, gpus)
        if prefix in ("r", "p"):
            self.physics: Physics = physics
        return [
            VirtualInstance(f"{prefix}{i}", Scheduler(physics.clock, limits, role=role))
            for i in range(count)
        ]

    def never_fits(self, spec: SeqSpec) -> str | None:
        """Why ``spec`` can never be served (the HTTP simulator answers 400), or None."""
        try:
            self.front[0].scheduler.check(spec)
            if self.back:
                self.back[0].scheduler.check(spec)
        except CapacityError as exc:
            return str(exc)
        return None


def simulate(
    requests: Sequence[TraceRequest],
    engine: EngineConfig,
    load: OfflineLoad,
    *,
    run_id: str,
    trace_block: int = 512,
) -> OfflineResult:
    """Every request of ``requests`` through ``engine`` in virtual time (see module doc).

    Raises ``ConfigError`` for an engine the catalog cannot build, and ``BudgetError`` if
    the simulation runs past ``MAX_STEPS`` steps."""
    keys = PrefixKeys(trace_block=trace_block, kv_block=engine.kv_block_size)
    order = list(requests)
    pending = iter(order)
    due: dict[int, float] = {}
    refused: dict[int, str] = {}
    too_long_ids: set[int] = set()

    def send(at_s: float) -> None:
        """Closed loop: send the next request of the trace at ``at_s`` (refusals return at
        once, so the next one goes too)."""
        for req in pending:
            due[req.index] = at_s
            why = admit(req, at_s)
            if why is None:
                return
            refused[req.index] = why

    def on_finish(_key: int, at_s: float) -> None:
        send(at_s)

    sim = _Cluster(engine, on_finish if load.concurrency is not None else None)
    physics = sim.physics
    max_model_len = engine.max_model_len or physics.model.max_context
    prompts: dict[int, int] = {}

    def admit(req: TraceRequest, at_s: float) -> str | None:
        # As the HTTP simulator counts what the replay sends: the text's tokens, plus each
        # image's by the model's vision rule (0 for a text-only model, its default).
        images = [ImageSize(width=im.width, height=im.height) for im in req.images or ()]
        prompt = req.input_tokens + sum(physics.image_tokens(im, fallback=0) for im in images)
        prompts[req.index] = prompt
        too_long = context_refusal(
            prompt_tokens=prompt, max_tokens=req.output_tokens, max_model_len=max_model_len
        )
        if too_long is not None:
            too_long_ids.add(req.index)
            return too_long
        spec = SeqSpec(
            seq_id=req.index,
            prompt_tokens=max(1, prompt),
            max_tokens=req.output_tokens,
            # Image tokens have no text to hash: such prompts are not prefix-cached.
            block_hashes=() if images else keys.keys(req.prefix_blocks, prompt),
            encoder_s=physics.encoder_s(images),
        )
        why = sim.never_fits(spec)
        if why is None:
            sim.cluster.arrive(spec, at_s)
        return why

    if load.concurrency is None:
        origin = order[0].arrival_s if order else 0.0
        for req in order:
            at_s = (req.arrival_s - origin) * load.time_factor
            due[req.index] = at_s
            why = admit(req, at_s)
            if why is not None:
                refused[req.index] = why
    else:
        for _ in range(load.concurrency):
            send(0.0)
    sim.cluster.run(max_steps=MAX_STEPS)
    tracks = sim.cluster.tracks
    rejected = sim.cluster.refused
    # Every step's end in ns of model time, once: a token's time is its step's end, shared
    # by the whole batch, so this is rounded per step instead of per token.
    ends = set().union(*(track.times for track in tracks.values()))
    stamps = {t: round(t * 1e9) for t in ends}
    records = tuple(
        _record(
            req,
            run_id,
            due[req.index],
            tracks.get(req.index),
            refused.get(req.index),
            prompts[req.index],
            stamps,
            too_long=req.index in too_long_ids,
            rejected=rejected.get(req.index),
        )
        for req in order
        if req.index in due
    )
    return OfflineResult(
        records=records,
        steps=sim.cluster.steps,
        start_ns=min((r.due_ns for r in records), default=SIM_EPOCH_NS),
        end_ns=max((r.end_ns or r.due_ns for r in records), default=SIM_EPOCH_NS),
    )


def _ns(t_s: float) -> int:
    return SIM_EPOCH_NS + round(t_s * 1e9)


def _record(
    req: TraceRequest,
    run_id: str,
    due_s: float,
    track: VirtualTrack | None,
    refused: str | None,
    prompt_tokens: int,
    stamps: Mapping[float, int],
    *,
    too_long: bool = False,
    rejected: str | None = None,
) -> RequestRecord:
    """``req``'s row; ``stamps``: ``round(t * 1e9)`` of every time in ``track.times``."""
    sent = _ns(due_s)
    if rejected is not None:  # admission control: 429 on arrival, as the HTTP simulator
        refused, status, outcome = rejected, 429, s.OUTCOME_REJECTED
    else:
        status = 400
        outcome = s.OUTCOME_CONTEXT_EXCEEDED if too_long else s.OUTCOME_HTTP_ERROR
    refusal = RequestRecord(
        run_id=run_id,
        trace_index=req.index,
        request_id=req.request_id,
        x_request_id=f"{run_id}-{req.index}",
        workload=req.workload,
        api=req.api,
        input_tokens=req.input_tokens,
        output_tokens=req.output_tokens,
        n_images=len(req.images or ()),
        image_tokens=req.image_tokens,
        session_id=req.session_id,
        slo_ttft_ms=req.slo_ttft_ms,
        slo_tpot_ms=req.slo_tpot_ms,
        due_ns=sent,
        sent_ns=sent,
        request_written_ns=sent,
        headers_ns=sent,
        end_ns=sent,
        outcome=outcome,
        http_status=status,
        error=f"HTTP {status}: {refused or 'the simulated engine could not serve it'}",
    )
    if track is None or not track.times or track.first_step is None:
        return refusal
    origin = SIM_EPOCH_NS - sent
    offsets = [(origin + stamps[t]) // 1000 for t in track.times]
    if offsets[-1] > _OFFSET_MAX:  # as the replay's client: the chunks the column holds
        return _cut_stream(refusal, sent, offsets, prompt_tokens)
    first, last = _ns(track.times[0]), _ns(track.times[-1])
    prefill_end = track.prefill_end if track.prefill_end is not None else track.first_step
    ready = track.transfer_end if track.transfer_end is not None else prefill_end
    decode = track.decode_start if track.decode_start is not None else ready
    sample = track.times[0]
    return replace(
        refusal,
        first_byte_ns=first,
        first_token_ns=first,
        end_ns=last,
        chunk_offsets_us=offsets,
        chunk_tokens=[1] * len(offsets),
        prompt_tokens=prompt_tokens,
        completion_tokens=len(offsets),
        cached_tokens=track.cached,
        outcome=s.OUTCOME_OK,
        http_status=200,
        error=None,
        finish_reason="length",
        server_queue_ms=(track.first_step - track.arrival) * 1e3,
        server_prefill_ms=(prefill_end - track.first_step) * 1e3,
        server_transfer_ms=(ready - prefill_end) * 1e3,
        server_decode_wait_ms=(decode - ready) * 1e3,
        server_first_token_ms=(sample - decode) * 1e3,
        server_ttft_ms=(sample - track.arrival) * 1e3,
        server_decode_ms=(last - first) / 1e6,
        server_instance=track.back if track.back is not None else track.front,
    )


_OFFSET_TYPE = s.RUN_SCHEMA.field(s.CHUNK_OFFSETS_US).type.value_type
_OFFSET_MAX = int_bounds(_OFFSET_TYPE)[1]


def _cut_stream(
    row: RequestRecord, sent: int, offsets: list[int], prompt_tokens: int
) -> RequestRecord:
    """A stream longer than the run table's offsets hold (``int32`` µs: about 35 minutes
    after the send), recorded as the replay's client records one (``loadgen.fit``): the
    chunks that fit, and the request a ``protocol_error`` naming the chunk that did not."""
    kept = bisect_right(offsets, _OFFSET_MAX)
    first = sent + offsets[0] * 1000 if kept else None
    return replace(
        row,
        first_byte_ns=first,
        first_token_ns=first,
        end_ns=sent + offsets[-1] * 1000,
        chunk_offsets_us=offsets[:kept],
        chunk_tokens=[1] * kept,
        prompt_tokens=prompt_tokens,
        completion_tokens=len(offsets),
        outcome=s.OUTCOME_PROTOCOL_ERROR,
        http_status=200,
        error=(
            f"{s.CHUNK_OFFSETS_US}: chunk {kept} arrived {offsets[kept] / 1e6:.0f} s after the "
            f"send, beyond the column's {_OFFSET_TYPE} µs"
        ),
    )
