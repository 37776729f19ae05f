"""The deployment description (``deployment.toml``) and what a run learnt of its endpoint's.

One file names what serves the requests: the model and GPU, GPUs per replica (tensor x
pipeline parallel), replicas, the topology (a monolith, or prefill and decode pools joined
by a KV link), the scheduler's shape and the efficiencies (or a calibration profile), and
for the simulator its time scale. ``loadgen sim``, ``plan`` and ``decompose`` read it; the
flags they had remain as overrides. Layout (every key optional; docs/deployment.md)::

    name, engine, model, gpu, gpus, tensor_parallel, pipeline_parallel, replicas,
    max_model_len, time_scale, topology ("monolith" | "disagg")
    [scheduler]   max_batched_tokens, max_num_seqs, block_size, prefix_caching,
                  kv_capacity_tokens
    [efficiency]  prefill, decode, step_overhead_us, memory_fraction, profile
    [prefill] / [decode]   instances, gpus          (topology = "disagg" only)
    [kv_link]     gbps, latency_us                   (topology = "disagg" only)
    [admission]   ttft_ms, margin_ms   (admission control: refuse on arrival what cannot
                  meet the TTFT budget, estimate + margin)

A key left out is *not said*: ``None`` in the value, and each reader says what it assumed
in its place. Unknown keys and bad values are one-line ``DeploymentError``s (exit 2) naming
the key and the file.

``DeploymentInfo`` is what the replay's preflight learnt of the endpoint's deployment, for
``run.json``: each fact a key of this layout (dotted, ``scheduler.block_size``) with its
value and where it was read (``simulator card``, ``vLLM /metrics cache_config_info``,
``llama.cpp /props``, ``/v1/models max_model_len``), and each source that told nothing
with why. ``DeploymentInfo.spec()`` reads the facts back through the same validation.

Imports only ``traces``: the replay, the simulator and the analyzers all read it.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from traces.errors import DeploymentError

TOPOLOGIES: Final = ("monolith", "disagg")
_TOPOLOGY_ALIASES: Final = {"disaggregated": "disagg", "pd": "disagg"}
ENGINES: Final = ("vllm", "sglang", "llama.cpp", "trt-llm", "sim", "other")
_DISAGG_SECTIONS: Final = ("prefill", "decode", "kv_link")

Scalar = str | int | float | bool


@dataclass(frozen=True, slots=True, kw_only=True)
class _Key:
    kind: type
    check: Callable[[Scalar], bool]
    why: str


def _positive_int(v: Scalar) -> bool:
    return isinstance(v, int) and v >= 1


def _positive(v: Scalar) -> bool:
    return isinstance(v, int | float) and math.isfinite(v) and v > 0


def _non_negative(v: Scalar) -> bool:
    return isinstance(v, int | float) and math.isfinite(v) and v >= 0


def _fraction(v: Scalar) -> bool:
    return isinstance(v, int | float) and 0 < v <= 1


def _non_empty(v: Scalar) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _anything(v: Scalar) -> bool:
    return True


_INT = _Key(kind=int, check=_positive_int, why="an integer >= 1")
_POS = _Key(kind=float, check=_positive, why="a number > 0")
_NONNEG = _Key(kind=float, check=_non_negative, why="a number >= 0")
_FRACTION = _Key(kind=float, check=_fraction, why="a number in (0, 1]")
_TEXT = _Key(kind=str, check=_non_empty, why="a non-empty string")
_BOOL = _Key(kind=bool, check=_anything, why="true or false")

KEYS: Final[Mapping[str, _Key]] = {
    "name": _TEXT,
    "engine": _Key(kind=str, check=lambda v: v in ENGINES, why="one of " + "|".join(ENGINES)),
    "model": _TEXT,
    "gpu": _TEXT,
    "gpus": _INT,
    "tensor_parallel": _INT,
    "pipeline_parallel": _INT,
    "replicas": _INT,
    "max_model_len": _INT,
    "time_scale": _POS,
    "topology": _Key(
        kind=str,
        check=lambda v: v in TOPOLOGIES or v in _TOPOLOGY_ALIASES,
        why='"monolith" or "disagg"',
    ),
    "scheduler.max_batched_tokens": _INT,
    "scheduler.max_num_seqs": _INT,
    "scheduler.block_size": _INT,
    "scheduler.prefix_caching": _BOOL,
    "scheduler.kv_capacity_tokens": _INT,
    "efficiency.prefill": _FRACTION,
    "efficiency.decode": _FRACTION,
    "efficiency.step_overhead_us": _NONNEG,
    "efficiency.memory_fraction": _FRACTION,
    "efficiency.profile": _TEXT,
    "prefill.instances": _INT,
    "prefill.gpus": _INT,
    "decode.instances": _INT,
    "decode.gpus": _INT,
    "kv_link.gbps": _POS,
    "kv_link.latency_us": _NONNEG,
    "admission.ttft_ms": _POS,
    "admission.margin_ms": _NONNEG,
}
"""Every key of the layout, dotted, with its type and range."""
SECTIONS: Final = tuple(sorted({k.split(".")[0] for k in KEYS if "." in k}))


@dataclass(frozen=True, slots=True, kw_only=True)
class Scheduler:
    """The engine's batching: token budget per step (chunked prefill; vLLM
    ``--max-num-batched-tokens``), most sequences per batch, KV block size, prefix caching,
    and KV capacity per instance in tokens (vLLM: GPU blocks x block size)."""

    max_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    block_size: int | None = None
    prefix_caching: bool | None = None
    kv_capacity_tokens: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Efficiency:
    """Achieved fraction of peak FLOP/s (``prefill``) and of HBM bandwidth (``decode``), a
    fixed cost per step, the share of HBM the engine claims, or ``profile``: a budget file
    (``loadgen plan --out``) whose ``[deployment]`` efficiencies fill those not given."""

    prefill: float | None = None
    decode: float | None = None
    step_overhead_us: float | None = None
    memory_fraction: float | None = None
    profile: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    """A disaggregated pool: ``instances`` of ``gpus`` GPUs each."""

    instances: int | None = None
    gpus: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class KvLink:
    """The link each prefill instance ships KV caches over: Gbit/s and setup latency."""

    gbps: float | None = None
    latency_us: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """Admission control: a request whose estimated time to first token (its queue and its
    prompt) plus ``margin_ms`` (the network and response write the client sees besides;
    10 ms when not said) exceeds ``ttft_ms`` is refused on arrival (the simulator answers
    429 with why)."""

    ttft_ms: float | None = None
    margin_ms: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentSpec:
    """One deployment description; ``None`` everywhere it says nothing.

    ``gpus`` is GPUs per replica; when only ``tensor_parallel``/``pipeline_parallel`` are
    given it is their product (``gpus_per_replica``). ``topology`` is ``monolith`` (then
    ``replicas``) or ``disagg`` (then ``prefill``, ``decode`` and ``kv_link``).
    ``time_scale``: the simulator's wall seconds per model second. ``where``: the file or
    source it was read from, for messages.
    """

    name: str | None = None
    engine: str | None = None
    model: str | None = None
    gpu: str | None = None
    gpus: int | None = None
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    replicas: int | None = None
    max_model_len: int | None = None
    time_scale: float | None = None
    topology: str | None = None
    scheduler: Scheduler = Scheduler()
    efficiency: Efficiency = Efficiency()
    prefill: Pool = Pool()
    decode: Pool = Pool()
    kv_link: KvLink = KvLink()
    admission: Admission = Admission()
    where: str = ""

    @property
    def gpus_per_replica(self) -> int | None:
        """``gpus``, else tensor x pipeline parallel where either is given, else None."""
        if self.gpus is not None:
            return self.gpus
        if self.tensor_parallel is None and self.pipeline_parallel is None:
            return None
        return (self.tensor_parallel or 1) * (self.pipeline_parallel or 1)

    @property
    def disaggregated(self) -> bool:
        """Whether prefill and decode run on separate pools."""
        return self.topology == "disagg"

    def flat(self) -> dict[str, Scalar]:
        """The keys it says, dotted (``scheduler.block_size``), as in ``KEYS``."""
        out: dict[str, Scalar] = {}
        for key in KEYS:
            section, _, name = key.rpartition(".")
            holder: object = getattr(self, section) if section else self
            value = getattr(holder, name)
            if value is not None:
                out[key] = value
        return out

    def nested(self) -> dict[str, object]:
        """The keys it says as the TOML document's tables (for JSON, e.g. a model card)."""
        return nest(self.flat())


def nest(flat: Mapping[str, object]) -> dict[str, object]:
    """Dotted keys (``scheduler.block_size``) as the TOML document's tables."""
    out: dict[str, object] = {}
    for key, value in flat.items():
        section, _, name = key.rpartition(".")
        if section:
            table = out.setdefault(section, {})
            assert isinstance(table, dict)
            table[name] = value
        else:
            out[key] = value
    return out


def _describe(raw: object) -> str:
    shown = repr(raw)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _typed(kind: type, raw: Scalar) -> bool:
    """Whether ``raw`` is of the key's TOML type (an integer is a number; a boolean is
    neither)."""
    if kind is bool or isinstance(raw, bool):
        return kind is bool and isinstance(raw, bool)
    if kind is str:
        return isinstance(raw, str)
    return isinstance(raw, int) if kind is int else isinstance(raw, int | float)


def _value(key: str, raw: object, where: str) -> Scalar:
    spec = KEYS[key]
    if not (isinstance(raw, str | int | float | bool) and _typed(spec.kind, raw)) or not (
        spec.check(raw)
    ):
        raise DeploymentError(f"{where}: key {key!r} must be {spec.why}, got {_describe(raw)}")
    return float(raw) if spec.kind is float else raw


def parse_deployment(doc: Mapping[str, object], *, where: str) -> DeploymentSpec:
    """A deployment from a TOML-shaped mapping (tables for the sections); every unknown
    key, bad value or contradiction is a ``DeploymentError`` naming the key and ``where``."""
    flat: dict[str, Scalar] = {}
    for top, raw in doc.items():
        if top in SECTIONS:
            if not isinstance(raw, Mapping):
                raise DeploymentError(f"{where}: [{top}] must be a table, got {_describe(raw)}")
            for name, item in raw.items():
                key = f"{top}.{name}"
                if key not in KEYS:
                    known = ", ".join(k.split(".")[1] for k in KEYS if k.startswith(top + "."))
                    raise DeploymentError(
                        f"{where}: unknown key {key!r} (known in [{top}]: {known})"
                    )
                flat[key] = _value(key, item, where)
        elif top in KEYS:
            flat[top] = _value(top, raw, where)
        else:
            known = ", ".join([k for k in KEYS if "." not in k] + [f"[{s}]" for s in SECTIONS])
            raise DeploymentError(f"{where}: unknown key {top!r} (known: {known})")
    return _build(flat, where)


def _build(flat: Mapping[str, Scalar], where: str) -> DeploymentSpec:
    topology = flat.get("topology")
    if isinstance(topology, str):
        topology = _TOPOLOGY_ALIASES.get(topology, topology)
    pool_keys = sorted(k for k in flat if k.split(".")[0] in _DISAGG_SECTIONS)
    if pool_keys and topology != "disagg":
        raise DeploymentError(
            f'{where}: key {pool_keys[0]!r} needs topology = "disagg" '
            f"(got {'no topology' if topology is None else repr(topology)})"
        )
    if topology == "disagg" and "replicas" in flat:
        raise DeploymentError(
            f"{where}: key 'replicas' is for a monolith; a disaggregated deployment sizes "
            "[prefill] and [decode] instead"
        )
    gpus, tp, pp = flat.get("gpus"), flat.get("tensor_parallel"), flat.get("pipeline_parallel")
    if gpus is not None and (tp is not None or pp is not None):
        product = int(tp or 1) * int(pp or 1)
        if product != gpus:
            raise DeploymentError(
                f"{where}: key 'gpus' is {gpus} but tensor_parallel x pipeline_parallel is "
                f"{product}"
            )

    def section(name: str) -> dict[str, object]:
        prefix = name + "."
        return {k[len(prefix) :]: v for k, v in flat.items() if k.startswith(prefix)}

    top = {k: v for k, v in flat.items() if "." not in k and k != "topology"}
    return DeploymentSpec(
        **top,  # type: ignore[arg-type]
        topology=None if topology is None else str(topology),
        scheduler=Scheduler(**section("scheduler")),  # type: ignore[arg-type]
        efficiency=Efficiency(**section("efficiency")),  # type: ignore[arg-type]
        prefill=Pool(**section("prefill")),  # type: ignore[arg-type]
        decode=Pool(**section("decode")),  # type: ignore[arg-type]
        kv_link=KvLink(**section("kv_link")),  # type: ignore[arg-type]
        admission=Admission(**section("admission")),  # type: ignore[arg-type]
        where=where,
    )


def load_deployment(path: Path | str) -> DeploymentSpec:
    """Read a ``deployment.toml``; a relative ``efficiency.profile`` is resolved against
    the file's folder. A missing or malformed file is a ``DeploymentError`` (exit 2)."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DeploymentError(f"{p}: cannot read the deployment file ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise DeploymentError(f"{p}: not valid TOML ({exc})") from None
    spec = parse_deployment(doc, where=str(p))
    profile = spec.efficiency.profile
    if profile is not None and not Path(profile).is_absolute():
        from dataclasses import replace

        spec = replace(spec, efficiency=replace(spec.efficiency, profile=str(p.parent / profile)))
    return spec


# ------------------------------------------------------------------ what a run learnt


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentFact:
    """One thing the endpoint told of its deployment: a key of ``KEYS`` (dotted), its
    value, and where it was read."""

    key: str
    value: object
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentGap:
    """A source the preflight asked that told nothing, and why (``HTTP 404``, ...)."""

    source: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentInfo:
    """``run.json``'s ``deployment``: the facts the preflight found, and the sources that
    gave none. The first fact of a key wins."""

    facts: tuple[DeploymentFact, ...] = ()
    unavailable: tuple[DeploymentGap, ...] = ()

    @classmethod
    def of(cls, spec: DeploymentSpec, *, source: str) -> DeploymentInfo:
        """Every key ``spec`` says, from one source."""
        facts = tuple(DeploymentFact(key=k, value=v, source=source) for k, v in spec.flat().items())
        return cls(facts=facts)

    def sources(self) -> dict[str, str]:
        """Where each key said was read (the first fact of a key)."""
        out: dict[str, str] = {}
        for fact in self.facts:
            out.setdefault(fact.key, fact.source)
        return out

    def spec(self, *, where: str = "run.json deployment") -> DeploymentSpec:
        """The facts as a deployment, through the file's validation (keys this build does
        not know are an error naming them)."""
        flat: dict[str, object] = {}
        for fact in self.facts:
            flat.setdefault(fact.key, fact.value)
        for key in flat:
            if key not in KEYS:
                raise DeploymentError(f"{where}: unknown key {key!r}")
        return parse_deployment(nest(flat), where=where)
