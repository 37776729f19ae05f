"""``run.json`` as a typed value: what was run, against what, with which versions, and how
it went.

``RunInfo`` and the values it holds are frozen, slotted, keyword-only dataclasses; the
replay builds one and writes it (``traces.io.write_run_info``), every reader gets one back
(``traces.io.read_run_info``), and no dict of it crosses a package boundary. The JSON keys
are the field names, except that ``prompts`` holds the strategy's fields and
``calibration`` side by side (``PromptsInfo``). Sections a run has not reached yet
(``result``, ``health``) and scraping that was never configured (``server_metrics``) are
absent rather than null.

Versions (``schema_version``, ``RUN_INFO_VERSION``): version 1 was the untyped dict of
earlier builds, whose keys changed from build to build; version 2 has the same layout
under this contract; version 3 adds the optional ``incomplete`` section (a run recovered
after a crash, ``loadgen recover``); version 4 adds the optional ``deployment`` section
(what the preflight learnt of the endpoint's deployment, ``traces.deployment``) and
``health.stamp_delay_ms``, ``health.backpressure`` and ``incomplete.exact`` (optional,
false when absent: a lost count inferred from the schedule); version 5 adds the session
options (``config.sessions``, ``max_sessions``, ``history``, ``start_offset_s``,
``warmup_s``), the window of a time-bounded run (``result.not_sent``, ``warmup_end_ns``,
``dispatch_end_ns``, ``skipped``) and the optional ``health.stalls`` (event-loop stalls
over 20 ms and their causes); version 6 adds ``health.workers[].node`` and ``host`` (the
Ray node that ran a shard, absent for a shard of the driver's host) and the optional
``health.prepare_ahead`` (bodies built off the loop). A new optional key needs
a new version: a build that reads its own version strictly would refuse the key by name.
Reading a document of

- this version: every key must be known (an unknown one is an error naming it), every
  field without a default present and of its type;
- an older version or none: unknown keys are ignored and the rest read as above, so a run
  directory of an earlier build is read when it holds what this one needs, and otherwise
  refused with the key it lacks;
- a newer version: refused (``NewerRunInfoError``, exit 2), since its meaning may differ.

Holds no secrets: the replay records its options through ``RunConfig``, which has no API
key (only whether one was set) and whose header values are redacted where their names look
like credentials. Imports only ``traces``.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from types import NoneType, UnionType
from typing import Any, Final

from traces.deployment import DeploymentInfo
from traces.errors import NewerRunInfoError, RunInfoError
from traces.health import (
    OMIT_NONE,
    Backpressure,
    GeneratorHealth,
    LagSummary,
    PrepareAhead,
    Stall,
    StallLog,
    WorkerHealth,
)
from traces.prompts.maker import PromptStrategy
from traces.runconfig import (
    Capabilities,
    ClockAnchor,
    Endpoint,
    GeneratorInfo,
    PromptCalibration,
    PromptsInfo,
    RunConfig,
    RunLoad,
    TraceRef,
)

RUN_INFO_VERSION: Final = 6
"""The ``schema_version`` this build writes and the newest it reads."""
VERSION_KEY: Final = "schema_version"

COMPLETE_STATUSES: Final = ("completed", "duration")
"""Statuses of a run that ended as asked: the whole schedule, or up to ``--duration``.
Any other (``running``, ``interrupted``, ``failed``, ``incomplete``) is an incomplete run:
the analysing commands warn about it and ``gate`` refuses it (exit 3)."""
INCOMPLETE: Final = "incomplete"
"""The status ``loadgen recover`` gives a run whose process died (``Incomplete`` says why)."""

_OMIT_NONE: Final = OMIT_NONE

__all__ = [
    "COMPLETE_STATUSES",
    "INCOMPLETE",
    "RUN_INFO_VERSION",
    "VERSION_KEY",
    "Backpressure",
    "Capabilities",
    "ClockAnchor",
    "Endpoint",
    "GeneratorHealth",
    "GeneratorInfo",
    "Incomplete",
    "LagSummary",
    "PrepareAhead",
    "PromptCalibration",
    "PromptsInfo",
    "RunConfig",
    "RunInfo",
    "RunLoad",
    "RunResult",
    "ScrapeReport",
    "Stall",
    "StallLog",
    "TraceRef",
    "WorkerHealth",
]
"""The health values (``traces.health``) and the run's setup (``traces.runconfig``) are
re-exported: ``RunInfo.health`` and the sections before ``result`` hold them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """How the replay ended: requests dispatched, rows written, the replay's first and
    last epoch ns and its duration in seconds, and rows by ``outcome``."""

    dispatched: int
    rows: int
    start_ns: int
    end_ns: int
    duration_s: float
    by_outcome: Mapping[str, int]
    not_sent: int | None = field(default=None, metadata=_OMIT_NONE)
    """Requests of the schedule never sent (after ``--duration``, a stop, or a closed
    session's turns past the end); absent in run.json written before version 5."""
    warmup_end_ns: int | None = field(default=None, metadata=_OMIT_NONE)
    """With ``--warmup-time``: requests due before it are flagged ``warmup``."""
    dispatch_end_ns: int | None = field(default=None, metadata=_OMIT_NONE)
    """With ``--duration``: when dispatching ended; rows still in flight then are flagged
    ``drain``."""
    skipped: int | None = field(default=None, metadata=_OMIT_NONE)
    """With ``--start-offset``: the sessions' turns before the offset (never sent)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScrapeReport:
    """What scraping the server's Prometheus metrics did (``server_metrics``)."""

    url: str
    interval_s: float
    enabled: bool
    scrapes: int = 0
    samples: int = 0
    errors: int = 0
    last_error: str | None = field(default=None, metadata=_OMIT_NONE)
    file: str | None = field(default=None, metadata=_OMIT_NONE)
    reason: str | None = field(default=None, metadata=_OMIT_NONE)
    """Why scraping was off (only when ``enabled`` is False)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Incomplete:
    """Why a run is ``incomplete`` and what it lost, as ``loadgen recover`` found it.

    ``cause``: one line (``the replay process died (killed?) while running``, ``worker 1
    died``). ``scheduled``: requests of the schedule (``load.requests``); ``rows``: rows
    recovered from the journals; ``dispatched``: requests the run sent; ``lost``: requests
    sent whose rows were never written (in flight, or finished but not flushed, when the
    process died).

    ``exact``: both counts come from the replay's dispatch record (every request's trace
    index, written as it went to the wire: ``lost`` is the sent requests without a row;
    when the process died between a record and its write, one per process too many).
    False for a run without that record (an earlier build): ``dispatched`` is then inferred
    from the schedule (per shard, every request up to the last one recorded and every one
    due before the journal's last write), ``lost`` is ``dispatched - rows`` and a lower
    bound, and ``scheduled - rows`` the upper one."""

    cause: str
    scheduled: int
    rows: int
    dispatched: int
    lost: int
    exact: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfo:
    """One run directory's ``run.json``.

    ``status`` is ``running`` until the replay ends, then how it ended (``completed``,
    ``interrupted``, ``duration``, ``failed``), or ``incomplete`` once ``loadgen recover``
    has repaired a run whose process died (``incomplete`` then says why and what was
    lost). ``versions`` maps Python, the platform and the
    packages that shape the measurement to their versions.
    """

    run_id: str
    generator: GeneratorInfo
    config: RunConfig
    endpoint: Endpoint
    load: RunLoad
    trace: TraceRef
    prompts: PromptsInfo
    clock: ClockAnchor
    versions: Mapping[str, str]
    status: str
    result: RunResult | None = field(default=None, metadata=_OMIT_NONE)
    health: GeneratorHealth | None = field(default=None, metadata=_OMIT_NONE)
    server_metrics: ScrapeReport | None = field(default=None, metadata=_OMIT_NONE)
    incomplete: Incomplete | None = field(default=None, metadata=_OMIT_NONE)
    deployment: DeploymentInfo | None = field(default=None, metadata=_OMIT_NONE)
    """What the preflight learnt of the endpoint's deployment (None: no preflight, or a
    run.json older than version 4)."""

    @property
    def complete(self) -> bool:
        """Whether the run ended as asked (``COMPLETE_STATUSES``)."""
        return self.status in COMPLETE_STATUSES

    def status_problem(self) -> str | None:
        """One line on why the run is not complete (None when it is)."""
        if self.complete:
            return None
        if self.incomplete is not None:
            i = self.incomplete
            return (
                f"run {self.run_id} is {self.status}: {i.cause}; {i.rows} rows of "
                f"{i.scheduled} scheduled, {'' if i.exact else 'at least '}{i.lost} requests "
                "sent and not recorded"
            )
        if self.status == "running":
            return (
                f"run {self.run_id} is still running or its process died "
                "(run `loadgen recover` on it if it died)"
            )
        return f"run {self.run_id} is {self.status}, not complete"

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``run.json``, stamped with this build's ``schema_version``."""
        body = _encode(self)
        assert isinstance(body, dict)
        return {VERSION_KEY: RUN_INFO_VERSION, **body}

    @classmethod
    def from_json(cls, doc: object, *, where: str = "run.json") -> RunInfo:
        """Read a ``run.json`` object under the version rules of the module docstring.

        Raises ``NewerRunInfoError`` for a newer ``schema_version`` and ``RunInfoError``
        naming the key for anything else it cannot read; ``where`` starts the message.
        """
        if not isinstance(doc, Mapping):
            raise RunInfoError(f"{where}: expected a JSON object, got {_kind(doc)}")
        version = doc.get(VERSION_KEY)
        if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
            raise RunInfoError(f"{where}: {VERSION_KEY} must be an integer, got {version!r}")
        if version is not None and version > RUN_INFO_VERSION:
            raise NewerRunInfoError(
                f"{where}: written by a newer llm-loadgen ({VERSION_KEY} {version}; this "
                f"version reads up to {RUN_INFO_VERSION}): upgrade llm-loadgen to read it"
            )
        strict = version == RUN_INFO_VERSION
        body = {k: v for k, v in doc.items() if k != VERSION_KEY}
        try:
            value = _Decoder(strict=strict).value(RunInfo, body, "")
        except RunInfoError as exc:
            if strict:
                raise RunInfoError(f"{where}: {exc}") from None
            got = f"{VERSION_KEY} {version}" if version is not None else f"no {VERSION_KEY}"
            raise RunInfoError(f"{where} ({got}) cannot be read: {exc}") from None
        assert isinstance(value, RunInfo)
        return value


# ------------------------------------------------------------------ JSON conversion
def _encode(value: object) -> object:
    """A value as JSON-ready Python: dataclasses as objects, tuples as lists."""
    if isinstance(value, PromptsInfo):
        strategy = _encode(value.strategy)
        assert isinstance(strategy, dict)
        return {**strategy, "calibration": _encode(value.calibration)}
    if is_dataclass(value) and not isinstance(value, type):
        out: dict[str, object] = {}
        for f in fields(value):
            item = getattr(value, f.name)
            if item is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = _encode(item)
        return out
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _kind(raw: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(raw), "null" if raw is None else "a number"
    )


def _key(parent: str, name: str | int) -> str:
    if isinstance(name, int):
        return f"{parent}[{name}]"
    return f"{parent}.{name}" if parent else name


class _Decoder:
    """Decodes JSON into the annotated types above; errors name the key (``health.workers[0]
    .rows``). ``strict``: unknown keys are errors rather than ignored."""

    def __init__(self, *, strict: bool) -> None:
        self.strict = strict

    def value(self, tp: Any, raw: object, key: str) -> object:
        origin = typing.get_origin(tp)
        if origin in (UnionType, typing.Union):
            options = [a for a in typing.get_args(tp) if a is not NoneType]
            if raw is None:
                return None
            (inner,) = options  # only ``X | None`` is used here
            return self.value(inner, raw, key)
        if tp is PromptsInfo:
            return self._prompts(raw, key)
        if isinstance(tp, type) and is_dataclass(tp):
            return self._object(tp, raw, key)
        if origin is tuple:
            item_type, _ = typing.get_args(tp)
            if not isinstance(raw, list):
                raise self._wrong(key, "an array", raw)
            return tuple(self.value(item_type, v, _key(key, i)) for i, v in enumerate(raw))
        if origin is Mapping:
            _, item_type = typing.get_args(tp)
            if not isinstance(raw, dict):
                raise self._wrong(key, "an object", raw)
            return {str(k): self.value(item_type, v, _key(key, str(k))) for k, v in raw.items()}
        return self._scalar(tp, raw, key)

    def _scalar(self, tp: Any, raw: object, key: str) -> object:
        if tp is object:  # open-ended provenance, kept as found
            return raw
        if tp is bool:
            if isinstance(raw, bool):
                return raw
            raise self._wrong(key, "true or false", raw)
        if tp is int:
            if isinstance(raw, int) and not isinstance(raw, bool):
                return raw
            raise self._wrong(key, "an integer", raw)
        if tp is float:
            if isinstance(raw, int | float) and not isinstance(raw, bool):
                return float(raw)
            raise self._wrong(key, "a number", raw)
        if tp is str:
            if isinstance(raw, str):
                return raw
            raise self._wrong(key, "a string", raw)
        raise TypeError(f"run.json: no decoder for {tp!r} at {key!r}")  # a bug here

    def _object(self, cls: type, raw: object, key: str) -> object:
        if not isinstance(raw, dict):
            raise self._wrong(key, "an object", raw)
        hints = _hints(cls)
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(k for k in raw if k not in known)
        if unknown and self.strict:
            raise RunInfoError(
                f"unknown key(s) {', '.join(repr(_key(key, k)) for k in unknown)} "
                f"(known there: {', '.join(known)})"
            )
        values: dict[str, object] = {}
        for name, f in known.items():
            if name in raw:
                values[name] = self.value(hints[name], raw[name], _key(key, name))
            elif f.default is MISSING and f.default_factory is MISSING:
                raise RunInfoError(f"missing key {_key(key, name)!r}")
        return cls(**values)

    def _prompts(self, raw: object, key: str) -> PromptsInfo:
        if not isinstance(raw, dict):
            raise self._wrong(key, "an object", raw)
        rest = {k: v for k, v in raw.items() if k != "calibration"}
        strategy = self.value(PromptStrategy, rest, key)
        calibration = self.value(
            PromptCalibration | None, raw.get("calibration"), _key(key, "calibration")
        )
        assert isinstance(strategy, PromptStrategy)
        assert calibration is None or isinstance(calibration, PromptCalibration)
        return PromptsInfo(strategy=strategy, calibration=calibration)

    @staticmethod
    def _wrong(key: str, expected: str, raw: object) -> RunInfoError:
        shown = repr(raw) if len(repr(raw)) <= 40 else repr(raw)[:37] + "..."
        return RunInfoError(f"{key!r} must be {expected}, got {_kind(raw)} ({shown})")
