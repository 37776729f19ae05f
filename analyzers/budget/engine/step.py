"""One forward step of the engine as a roofline: the slower of its compute and its HBM reads.

A step carries sequences, each adding ``new_tokens`` on top of ``cached_tokens`` already
in the KV cache: a prefill (chunk) is one sequence with many new tokens, a decode step is
many sequences with one new token each, and a chunked-prefill engine mixes both.
``step_cost`` returns every term so that the plan can show its arithmetic; the simulator
calls ``step_time_s``. Pure arithmetic: this module must not import ``loadgen``, httpx or
polars, and does no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from analyzers.budget.engine.terms import step_terms
from analyzers.budget.kv import kv_bytes, kv_bytes_per_token
from analyzers.budget.specs import Deployment, ModelSpec
from analyzers.budget.weights import weights_read_bytes
from analyzers.errors import BudgetError


@dataclass(frozen=True, slots=True, kw_only=True)
class SequenceWork:
    """One sequence's share of a step: ``new_tokens`` computed over ``cached_tokens``."""

    new_tokens: int
    cached_tokens: int = 0

    def __post_init__(self) -> None:
        if self.new_tokens < 0 or self.cached_tokens < 0:
            raise BudgetError(
                f"token counts must not be negative, got new={self.new_tokens}, "
                f"cached={self.cached_tokens}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCost:
    """The terms of one step; ``time_s = max(launch_s, max(compute_s, memory_s) +
    collective_s) + overhead_s``. ``collective_s`` (tensor-parallel all-reduces, pipeline
    hand-offs) and ``launch_s`` (the host's kernel launches) are 0 without a calibration
    profile, which leaves the plain roofline ``max(compute_s, memory_s) + overhead_s``."""

    linear_flops: float
    attention_flops: float
    weight_bytes: float
    kv_bytes: float
    compute_flops_per_s: float
    bandwidth_bytes_per_s: float
    overhead_s: float
    collective_s: float = 0.0
    launch_s: float = 0.0

    @property
    def flops(self) -> float:
        """All FLOPs of the step."""
        return self.linear_flops + self.attention_flops

    @property
    def bytes(self) -> float:
        """All HBM bytes of the step (weights read, KV read and written)."""
        return self.weight_bytes + self.kv_bytes

    @property
    def compute_s(self) -> float:
        """Seconds the maths takes at the achieved FLOP/s."""
        return self.flops / self.compute_flops_per_s

    @property
    def memory_s(self) -> float:
        """Seconds the HBM traffic takes at the achieved bandwidth."""
        return self.bytes / self.bandwidth_bytes_per_s

    @property
    def time_s(self) -> float:
        """The step's predicted duration in seconds."""
        gpu = max(self.compute_s, self.memory_s) + self.collective_s
        return max(self.launch_s, gpu) + self.overhead_s

    @property
    def compute_bound(self) -> bool:
        """True when the maths, not the memory traffic, sets the time."""
        return self.compute_s >= self.memory_s


def context_integral(new_tokens: int, cached_tokens: int, window: int | None = None) -> float:
    """Sum of the attended context over the new tokens, continuous form.

    Token ``x`` of ``n`` attends to ``min(c + x, W)`` positions; integrating over
    ``x in [0, n]``: ``n c + n^2 / 2`` with no window; with a window ``W``, the part
    beyond it attends to ``W`` each. For ``n = 1`` (decode) this is about ``c``.
    """
    n, c = float(new_tokens), float(cached_tokens)
    if window is None or c + n <= window:
        return n * c + n * n / 2
    if c >= window:
        return n * window
    m = window - c
    return m * c + m * m / 2 + (n - m) * window


def attention_flops(model: ModelSpec, new_tokens: int, cached_tokens: int = 0) -> float:
    """FLOPs of the attention scores and weighted values (not the projections).

    ``2 x layers x q_heads x (d_qk + d_v) x context_integral``; with no cache and
    ``d_qk = d_v = head_dim`` this is ``2 x layers x n^2 x (q_heads x head_dim)``, the
    causal ``QK^T + AV`` term of ref §6 (2 x 80 x 4000^2 x 8192 = 2.10e13 FLOP).
    Sliding-window models count their local layers over the window only.
    """
    per_context = 2 * model.q_heads * (model.attention_qk_dim + model.attention_v_dim)
    full = model.self_attention_layers
    local = 0
    if model.attention == "sliding":
        assert model.full_attention_layers is not None
        local, full = full - model.full_attention_layers, model.full_attention_layers
    total = full * context_integral(new_tokens, cached_tokens)
    if local:
        total += local * context_integral(new_tokens, cached_tokens, model.sliding_window)
    return per_context * total


def linear_flops(model: ModelSpec, tokens: int) -> float:
    """FLOPs of the weight matrices: ``2 x params_active x tokens`` (one multiply-add each)."""
    return 2 * model.params_active * tokens


def step_cost(model: ModelSpec, deploy: Deployment, work: Sequence[SequenceWork]) -> StepCost:
    """The roofline terms of one forward step over ``work``.

    compute = (2 N_active sum(new) + sum attention_flops) / (tp x peak(dtype) x eff_prefill)
    memory  = (weights_read(sum(new)) + sum kv_bytes(cached + new)) / (tp x HBM BW x eff_decode)
    time    = max(compute, memory) + step_overhead
    With a profile on ``deploy``, the efficiencies of its phase (prefill for a step that
    carries a prefill, else decode) replace the deployment's and the terms of
    ``analyzers.budget.engine.terms`` join: ``time = max(launch, max(compute, memory) +
    all-reduce) + step_overhead + profile overheads``.
    """
    tokens = sum(w.new_tokens for w in work)
    if model.attention == "sliding":
        attention = sum(attention_flops(model, w.new_tokens, w.cached_tokens) for w in work)
        kv = sum(kv_bytes(model, w.cached_tokens + w.new_tokens) for w in work)
    else:
        # The same sums in one pass (a step of a large batch is timed per step of the
        # engine simulator and of the decomposition's load replay): without a window,
        # attention is linear in each sequence's context integral and KV in its length.
        integral = 0.0
        held = 0
        for w in work:
            n, c = w.new_tokens, w.cached_tokens
            integral += float(n) * float(c) + float(n) * float(n) / 2
            held += c + n
        per_context = 2 * model.q_heads * (model.attention_qk_dim + model.attention_v_dim)
        attention = per_context * model.self_attention_layers * integral
        kv = held * kv_bytes_per_token(model)
    decoding = busy = 0
    if deploy.profile is not None:
        decoding = sum(1 for w in work if w.new_tokens == 1 and w.cached_tokens > 0)
        busy = sum(1 for w in work if w.new_tokens > 0)
    return _cost(model, deploy, tokens, attention, kv, decoding, busy)


def _cost(
    model: ModelSpec,
    deploy: Deployment,
    tokens: int,
    attention: float,
    kv: float,
    decoding: int,
    busy: int,
) -> StepCost:
    """The ``StepCost`` of a step of ``tokens`` new tokens, ``attention`` FLOPs and ``kv``
    bytes of KV, ``decoding`` of its ``busy`` sequences decoding (one new token)."""
    linear = linear_flops(model, tokens)
    weight = weights_read_bytes(model, tokens)
    compute_rate = deploy.compute_flops(model.weight_dtype)
    memory_rate = deploy.bandwidth_bytes_per_s()
    overhead = deploy.step_overhead_s
    collective = launch = 0.0
    profile = deploy.profile
    if profile is not None:
        terms = step_terms(
            model,
            deploy.hardware,
            tensor_parallel=deploy.tensor_parallel,
            pipeline_parallel=deploy.pipeline_parallel,
            flops=linear + attention,
            bytes_read=weight + kv,
            tokens=tokens,
            prefills=1 if decoding < busy else 0,
            decode_sequences=decoding,
        )
        phase = terms.phase(profile)
        compute_rate = (
            deploy.tensor_parallel
            * deploy.hardware.peak_flops(model.weight_dtype)
            * phase.compute_efficiency
        )
        memory_rate = (
            deploy.tensor_parallel
            * deploy.hardware.hbm_bandwidth_bytes_per_s
            * phase.memory_efficiency
        )
        collective = terms.collective_s(phase)
        launch = terms.launch_s(phase)
        overhead += terms.overhead_s(phase)
    return StepCost(
        linear_flops=linear,
        attention_flops=attention,
        weight_bytes=weight,
        kv_bytes=kv,
        compute_flops_per_s=compute_rate,
        bandwidth_bytes_per_s=memory_rate,
        overhead_s=overhead,
        collective_s=collective,
        launch_s=launch,
    )


def step_time_s(model: ModelSpec, deploy: Deployment, work: Sequence[SequenceWork]) -> float:
    """Seconds of one forward step over ``work`` (see ``step_cost``)."""
    return step_cost(model, deploy, work).time_s


EXACT_SUMS = 1 << 53
"""Below this, twice a step's context integral is exact in a float, whatever the order of
its terms: :meth:`StepClock.from_sums` then equals ``step_time_s`` bit for bit."""


class StepClock:
    """``step_time_s`` of one model on one deployment, callable on a step's work, with a
    fast path from a step's integer sums (no per-sequence objects).

    ``from_sums`` takes what ``step_cost`` sums over the work of a model without a sliding
    window (``sums`` is True): the new tokens, twice the context integral
    (``sum(n (2 c + n))``, an integer), the KV held after the step (``sum(c + n)``), the
    decoding and the busy sequences. Each term of the integral is a multiple of 1/2, so
    while twice the sum stays below ``EXACT_SUMS`` the float loop of ``step_cost`` adds
    them without rounding and ``from_sums`` returns the very same float."""

    __slots__ = ("_attention", "_fixed", "_kv", "_linear", "deploy", "model", "sums")

    def __init__(self, model: ModelSpec, deploy: Deployment) -> None:
        self.model = model
        self.deploy = deploy
        self.sums = model.attention != "sliding"
        per_context = 2 * model.q_heads * (model.attention_qk_dim + model.attention_v_dim)
        self._attention = per_context * model.self_attention_layers
        self._kv = kv_bytes_per_token(model)
        self._linear: dict[int, tuple[float, float]] = {}
        self._fixed: tuple[float, float, float] | None = None
        if deploy.profile is None:
            self._fixed = (
                deploy.compute_flops(model.weight_dtype),
                deploy.bandwidth_bytes_per_s(),
                deploy.step_overhead_s,
            )

    def __call__(self, work: Sequence[SequenceWork]) -> float:
        return step_time_s(self.model, self.deploy, work)

    def from_sums(
        self, tokens: int, twice_integral: int, held: int, decoding: int, busy: int
    ) -> float:
        """Seconds of a step with these sums (see the class doc; needs ``sums`` and
        ``twice_integral < EXACT_SUMS``)."""
        attention = self._attention * (twice_integral / 2)
        kv = held * self._kv
        fixed = self._fixed
        if fixed is None:
            return _cost(self.model, self.deploy, tokens, attention, kv, decoding, busy).time_s
        pair = self._linear.get(tokens)
        if pair is None:
            pair = (linear_flops(self.model, tokens), weights_read_bytes(self.model, tokens))
            if len(self._linear) < 1 << 16:  # one entry per batch size seen: bounded
                self._linear[tokens] = pair
        compute_rate, memory_rate, overhead = fixed
        # StepCost.time_s with no profile (collective_s = launch_s = 0), term by term.
        compute_s = (pair[0] + attention) / compute_rate
        memory_s = (pair[1] + kv) / memory_rate
        return max(0.0, max(compute_s, memory_s) + 0.0) + overhead
