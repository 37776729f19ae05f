"""The setup of a run as ``run.json`` records it: the program that wrote it, the replay's
options (``RunConfig``), the endpoint measured and what it accepts, how load was offered,
the trace replayed, how prompts were made and the run's clock.

Frozen, slotted, keyword-only dataclasses held by ``traces.runinfo.RunInfo`` (which
re-exports them, and whose docstring gives the JSON layout and version rules). Holds no
secrets: ``RunConfig`` has no API key (only whether one was set) and its header values are
redacted where their names look like credentials. Imports only ``traces``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from traces.prompts.maker import CalibrationSample, PromptStrategy

__all__ = [
    "Capabilities",
    "ClockAnchor",
    "Endpoint",
    "GeneratorInfo",
    "PromptCalibration",
    "PromptsInfo",
    "RunConfig",
    "RunLoad",
    "TraceRef",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class GeneratorInfo:
    """The program that wrote the run."""

    name: str
    version: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """The replay's options as recorded: paths as given, no API key (``api_key_set`` says
    whether one was used), credential-like header values ``<redacted>``.

    One field per option of ``loadgen.run.options.SessionOptions`` (a test pins the two
    together); see ``loadgen replay --help`` for their meaning and units.
    """

    trace_path: str
    run_dir: str
    base_url: str
    model: str | None
    concurrency: int | None
    time_scale: float | None
    rate: float | None
    max_rate: float | None
    max_inflight: int | None
    max_requests: int | None
    duration_s: float | None
    warmup_requests: int
    request_timeout_s: float
    grace_s: float
    headers: Mapping[str, str]
    api_key_set: bool
    preflight: bool
    prompt_seed: int
    overwrite: bool
    run_id: str | None
    transport: str
    workers: int
    ray: str | None
    tokenizer: str | None
    calibrate_prompts: bool
    template_tokens: int
    scrape_metrics: bool
    scrape_url: str | None
    scrape_interval_s: float
    max_event_bytes: int | None = None
    """None in a run.json written before the limit existed."""
    extra_body: Mapping[str, object] | None = None
    """``--extra-body``, as given (None: none, or a run.json from before it existed)."""
    stream: bool = True
    """False for a ``--no-stream`` run (True in a run.json from before it existed)."""
    http2: bool = False
    sessions: str = "open"
    """``open`` (every turn at its trace time) or ``closed`` (a turn waits for its parent's
    reply plus think time); ``open`` in a run.json written before the option existed."""
    max_sessions: int | None = None
    history: str = "trace"
    start_offset_s: float | None = None
    warmup_s: float | None = None
    api: str | None = None
    """The API every request was sent to (``--api``); None: each row's own ``api``."""
    embed_batch: int = 1
    """Inputs per embeddings request (``--embed-batch``)."""
    prepare_ahead_mib: int | None = None
    """``--prepare-ahead-mib``: the body preparer's look-ahead bound (0: off; None in a
    run.json from before it existed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """Optional request fields the endpoint accepts (found by the preflight probe)."""

    include_usage: bool = True
    continuous_usage: bool = True
    ignore_eos: bool = True
    min_tokens: bool = True

    def without_extras(self) -> Capabilities:
        """The same with the non-standard vLLM-style extras removed."""
        return Capabilities(
            include_usage=self.include_usage,
            continuous_usage=False,
            ignore_eos=False,
            min_tokens=False,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """What was measured: the base URL as given (readers showing it strip user info and
    query), the model requested, the models the endpoint listed, what it accepts."""

    base_url: str
    model: str
    served_models: tuple[str, ...]
    capabilities: Capabilities


@dataclass(frozen=True, slots=True, kw_only=True)
class RunLoad:
    """How load was offered: ``open`` (trace timestamps x ``time_factor``) or ``closed``
    (a concurrency); ``requests`` in the schedule; worker processes."""

    mode: str
    time_factor: float
    requests: int
    workers: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceRef:
    """The trace replayed: its path as given, its content hash (compare and gate refuse
    runs of different traces) and its file-level provenance, copied as found (the
    replay scrubs the run's secrets from its strings first).

    ``metadata`` is open-ended by design: each importer and synthesizer records its own
    options there (``source``, ``block_size``, ``seed``, ...).
    """

    path: str
    sha256: str
    metadata: Mapping[str, object]


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptCalibration:
    """The probes of ``--calibrate-prompts`` and the fit from them:
    prompt_tokens ≈ overhead_tokens + tokens_per_word x words."""

    samples: tuple[CalibrationSample, ...]
    tokens_per_word: float
    overhead_tokens: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptsInfo:
    """How prompts were materialised; in JSON the strategy's fields and ``calibration``
    sit side by side in one object."""

    strategy: PromptStrategy
    calibration: PromptCalibration | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockAnchor:
    """The run's one clock: every ``*_ns`` of the run table is ``anchor_wall_ns`` plus
    monotonic time since ``anchor_mono_ns``. ``source`` names the clock; ``assumption``
    what makes the stamps of several workers comparable."""

    anchor_wall_ns: int
    anchor_mono_ns: int
    source: str
    assumption: str
