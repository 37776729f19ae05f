"""Service-level objectives: parse them (TOML file or command-line rules) and check a run.

An SLO file (docs/gates.md)::

    [goodput]                 # what makes a request "good" (a request's own trace SLOs win)
    ttft_ms = 500
    tpot_ms = 50
    ttft_from = "due"         # or "sent"

    [validity]                # when the numbers may be trusted at all (else exit 3)
    allow_client_bound = false
    allow_unfaithful = false
    min_tail_samples = 1      # percentile p needs ceil(N / (1 - p/100)) ok requests
    min_requests = 0          # every checked class needs at least this many ok requests
    max_schedule_lag_ms = 5.0

    [[slo]]
    metric = "ttft_ms"        # see METRICS
    percentile = 99           # or stat = "mean" | "max"
    max = 200                 # or min = ..., exactly one of them
    workload = "text"         # optional: one class; default the whole run

The same objectives on the command line: ``[WORKLOAD:]METRIC[.STAT]OP VALUE`` with STAT
``pNN``, ``mean`` or ``max`` and OP ``<=`` or ``>=`` (``<``/``>`` read the same), e.g.
``ttft_ms.p99<=200``, ``text:tpot_ms.p50<=30ms``, ``goodput>=95%``,
``error_rate<=0.01``, ``cache_hit_ratio>=0.8``, ``cache_fidelity>=90%``. Unknown keys,
metrics and statistics are rejected by name.

``scale_slos`` puts the objectives on a simulator's slower clock. Checking them against
an ``Analysis`` is ``analyzers.slo.evaluate``. Must not import loadgen, httpx or polars.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from analyzers import exprs as e
from analyzers.errors import SLOError
from analyzers.goodput import SLOTargets

Op = Literal["<=", ">="]
Stat = Literal["percentile", "mean", "max", "value"]

LATENCY_METRICS: Final = (
    e.TTFT_MS,
    e.TTFT_FROM_DUE_MS,
    e.TTFB_MS,
    e.TPOT_MS,
    e.ITL_MS,
    e.E2E_MS,
    e.SCHEDULE_LAG_MS,
)
"""Per-request (ITL: per-token) metrics, in ms, checked at a percentile, mean or max."""
RUN_METRICS: Final = {
    "goodput": ("fraction", "share of requests that were ok and met their SLOs"),
    "goodput_rate": ("req/s", "good requests per second"),
    "error_rate": ("fraction", "share of requests that did not end ok"),
    "requests_per_s": ("req/s", "ok requests per second"),
    "output_tokens_per_s": ("tokens/s", "content tokens received per second"),
    "total_tokens_per_s": ("tokens/s", "output plus prompt tokens per second"),
    "items_per_s": ("items/s", "embeddings returned per second (/v1/embeddings)"),
    "input_tokens_per_s": ("tokens/s", "prompt tokens of ok requests per second"),
    "cache_hit_ratio": ("fraction", "reported cached / prompt tokens, token-weighted"),
    "cache_fidelity": ("fraction", "reported / expected cached tokens (the trace's prefixes)"),
}
"""One value per class; checked as they are (no statistic)."""
CACHE_METRICS: Final = ("cache_hit_ratio", "cache_fidelity")
"""The prefix cache's token-weighted hit ratio and its fidelity to the trace's prefixes
(``analyzers.cache``); no data when the server reports no cached tokens."""
METRICS: Final = (*LATENCY_METRICS, *RUN_METRICS)
_FRACTIONS: Final = ("goodput", "error_rate", "cache_hit_ratio")
_UNSCALED: Final = (*_FRACTIONS, "cache_fidelity")
"""Ratios a simulator's slower clock leaves alone (``cache_fidelity`` may exceed 1)."""

_TOP_KEYS: Final = ("slo", "goodput", "validity")
_SLO_KEYS: Final = ("metric", "percentile", "stat", "max", "min", "workload", "name")
_GOODPUT_KEYS: Final = ("ttft_ms", "tpot_ms", "ttft_from")
_VALIDITY_KEYS: Final = (
    "allow_client_bound",
    "allow_unfaithful",
    "min_tail_samples",
    "min_requests",
    "max_schedule_lag_ms",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Objective:
    """One objective: ``stat(metric) op threshold`` over ``workload`` (None: the run).

    ``percentile`` is set when ``stat == "percentile"``. ``source`` says where it came from
    (``file.toml [[slo]] #2`` or ``--slo 'ttft_ms.p99<=200'``).
    """

    metric: str
    stat: Stat
    percentile: float | None
    op: Op
    threshold: float
    workload: str | None = None
    name: str | None = None
    source: str = ""

    @property
    def unit(self) -> str:
        """The unit of the metric (ms for latencies)."""
        return RUN_METRICS[self.metric][0] if self.metric in RUN_METRICS else "ms"

    @property
    def label(self) -> str:
        """A short, unique-enough display name: ``text:ttft_ms.p99 <= 200``."""
        if self.name:
            return self.name
        where = f"{self.workload}:" if self.workload else ""
        stat = {"mean": ".mean", "max": ".max"}.get(self.stat, "")
        if self.percentile is not None:
            stat = f".p{self.percentile:g}"
        return f"{where}{self.metric}{stat} {self.op} {format_value(self.threshold, self.unit)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidityRequirements:
    """When a run is fit to be judged at all (a miss is exit 3, not an SLO breach)."""

    allow_client_bound: bool = False
    allow_unfaithful: bool = False
    min_tail_samples: float = 1.0
    min_requests: int = 0
    max_schedule_lag_ms: float = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SLOSet:
    """Objectives, the goodput targets and the validity requirements of one gate."""

    objectives: tuple[Objective, ...] = ()
    goodput: SLOTargets = field(default_factory=SLOTargets)
    validity: ValidityRequirements = field(default_factory=ValidityRequirements)
    sources: tuple[str, ...] = ()

    def merged(self, other: SLOSet) -> SLOSet:
        """This set with ``other``'s objectives appended; ``other``'s goodput targets and
        validity win where ``other`` came from a file (CLI rules carry only objectives)."""
        return SLOSet(
            objectives=(*self.objectives, *other.objectives),
            goodput=other.goodput if other.goodput != SLOTargets() else self.goodput,
            validity=(
                other.validity if other.validity != ValidityRequirements() else self.validity
            ),
            sources=(*self.sources, *other.sources),
        )

    @property
    def percentiles(self) -> tuple[float, ...]:
        """Every percentile an objective needs, sorted (for ``AnalysisOptions``)."""
        found = {o.percentile for o in self.objectives if o.percentile is not None}
        return tuple(sorted(found))


def format_value(value: float, unit: str) -> str:
    """A value with its unit, compactly (``200 ms``, ``95%``, ``12.5 req/s``).

    The SLO notation, kept here and not in ``reports.fmt``: objective labels and the
    evaluator's reasons are written with it inside the analyzers (which may not import
    reports), and ``reports.gate`` prints observed values and margins with it, so that they
    read like the thresholds they are checked against.
    """
    if unit == "fraction":
        return f"{value:.2%}".replace(".00%", "%")
    text = f"{value:.4g}" if abs(value) < 1e6 else f"{value:.3e}"
    return f"{text} {unit}"


# ----------------------------------------------------------------- parsing


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SLOError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(float(value)):
        raise SLOError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _reject_unknown(table: Mapping[str, Any], known: Sequence[str], where: str) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise SLOError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})")


def _check_metric(metric: object, where: str) -> str:
    if not isinstance(metric, str) or metric not in METRICS:
        raise SLOError(f"{where}: unknown metric {metric!r} (known: {', '.join(METRICS)})")
    return metric


def _check_percentile(value: object, where: str) -> float:
    p = _number(value, f"{where}: percentile")
    if not 0 < p < 100:
        raise SLOError(f"{where}: percentile must lie strictly between 0 and 100, got {p:g}")
    return p


def make_objective(
    *,
    metric: str,
    stat: str | None,
    percentile: float | None,
    op: Op,
    threshold: float,
    workload: str | None,
    name: str | None,
    source: str,
) -> Objective:
    """Validate one objective's parts (the file and the rule parser both end here)."""
    metric = _check_metric(metric, source)
    if metric in RUN_METRICS:
        if stat is not None or percentile is not None:
            raise SLOError(f"{source}: {metric} takes no percentile or stat")
        kind: Stat = "value"
    elif percentile is not None:
        if stat not in (None, "percentile"):
            raise SLOError(f"{source}: give either percentile or stat, not both")
        percentile = _check_percentile(percentile, source)
        kind = "percentile"
    elif stat in ("mean", "max"):
        kind = "mean" if stat == "mean" else "max"
    elif stat is None:
        raise SLOError(f"{source}: {metric} needs a percentile (or stat = 'mean' or 'max')")
    else:
        raise SLOError(f"{source}: unknown stat {stat!r} (known: percentile, mean, max)")
    if metric in _FRACTIONS and not 0 <= threshold <= 1:
        raise SLOError(f"{source}: {metric} is a fraction in [0, 1], got {threshold:g}")
    if threshold < 0:
        raise SLOError(f"{source}: threshold must not be negative, got {threshold:g}")
    return Objective(
        metric=metric,
        stat=kind,
        percentile=percentile,
        op=op,
        threshold=threshold,
        workload=workload,
        name=name,
        source=source,
    )


def _objective_from_table(table: Mapping[str, Any], where: str) -> Objective:
    _reject_unknown(table, _SLO_KEYS, where)
    if "metric" not in table:
        raise SLOError(f"{where}: missing key 'metric'")
    if ("max" in table) == ("min" in table):
        raise SLOError(f"{where}: give exactly one of 'max' or 'min'")
    op: Op = "<=" if "max" in table else ">="
    threshold = _number(table["max" if op == "<=" else "min"], f"{where}: {op}")
    workload = table.get("workload")
    name = table.get("name")
    stat = table.get("stat")
    for key, value in (("workload", workload), ("name", name), ("stat", stat)):
        if value is not None and not isinstance(value, str):
            raise SLOError(f"{where}: {key} must be a string, got {value!r}")
    percentile = table.get("percentile")
    return make_objective(
        metric=str(table["metric"]),
        stat=stat,
        percentile=_number(percentile, f"{where}: percentile") if percentile is not None else None,
        op=op,
        threshold=threshold,
        workload=workload,
        name=name,
        source=where,
    )


def _goodput_from_table(table: Mapping[str, Any], where: str) -> SLOTargets:
    _reject_unknown(table, _GOODPUT_KEYS, where)
    basis = table.get("ttft_from", "due")
    if basis not in ("due", "sent"):
        raise SLOError(f"{where}: ttft_from must be 'due' or 'sent', got {basis!r}")
    ttft = table.get("ttft_ms")
    tpot = table.get("tpot_ms")
    return SLOTargets(
        ttft_ms=_number(ttft, f"{where}: ttft_ms") if ttft is not None else None,
        tpot_ms=_number(tpot, f"{where}: tpot_ms") if tpot is not None else None,
        ttft_basis="due" if basis == "due" else "sent",
    )


def _validity_from_table(table: Mapping[str, Any], where: str) -> ValidityRequirements:
    _reject_unknown(table, _VALIDITY_KEYS, where)
    defaults = ValidityRequirements()
    flags = {}
    for key in ("allow_client_bound", "allow_unfaithful"):
        value = table.get(key, getattr(defaults, key))
        if not isinstance(value, bool):
            raise SLOError(f"{where}: {key} must be true or false, got {value!r}")
        flags[key] = value
    tail = _number(table.get("min_tail_samples", defaults.min_tail_samples), where)
    least = _number(table.get("min_requests", defaults.min_requests), where)
    lag = _number(table.get("max_schedule_lag_ms", defaults.max_schedule_lag_ms), where)
    if tail < 0 or least < 0 or lag < 0:
        raise SLOError(f"{where}: values must not be negative")
    return ValidityRequirements(
        allow_client_bound=flags["allow_client_bound"],
        allow_unfaithful=flags["allow_unfaithful"],
        min_tail_samples=tail,
        min_requests=int(least),
        max_schedule_lag_ms=lag,
    )


def parse_slo_document(doc: Mapping[str, Any], origin: str) -> SLOSet:
    """An ``SLOSet`` from a parsed TOML document (``origin`` names it in messages)."""
    _reject_unknown(doc, _TOP_KEYS, origin)
    slos = doc.get("slo", [])
    if not isinstance(slos, list) or not all(isinstance(t, dict) for t in slos):
        raise SLOError(f"{origin}: 'slo' must be an array of tables ([[slo]])")
    objectives = tuple(
        _objective_from_table(t, f"{origin} [[slo]] #{i + 1}") for i, t in enumerate(slos)
    )
    goodput = doc.get("goodput", {})
    validity = doc.get("validity", {})
    if not isinstance(goodput, dict) or not isinstance(validity, dict):
        raise SLOError(f"{origin}: [goodput] and [validity] must be tables")
    return SLOSet(
        objectives=objectives,
        goodput=_goodput_from_table(goodput, f"{origin} [goodput]"),
        validity=_validity_from_table(validity, f"{origin} [validity]"),
        sources=(origin,),
    )


def load_slo_file(path: Path) -> SLOSet:
    """Read and validate an SLO TOML file."""
    try:
        doc = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise SLOError(f"{path}: cannot read the SLO file ({exc.strerror})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SLOError(f"{path}: not valid TOML ({exc})") from exc
    return parse_slo_document(doc, str(path))


_RULE: Final = re.compile(
    r"^\s*(?:(?P<workload>[\w.-]+):)?(?P<metric>[a-z][a-z0-9_]*)(?:\.(?P<stat>p[0-9.]+|mean|max))?"
    r"\s*(?P<op><=|>=|<|>)\s*(?P<value>[0-9.eE+-]+)\s*(?P<unit>ms|%)?\s*$"
)


def parse_rule(text: str) -> Objective:
    """One objective from a command-line rule (``text:ttft_ms.p99<=200``)."""
    source = f"--slo {text!r}"
    match = _RULE.match(text)
    if match is None:
        raise SLOError(
            f"{source}: expected [WORKLOAD:]METRIC[.pNN|.mean|.max](<=|>=)VALUE, "
            "e.g. 'ttft_ms.p99<=200' or 'goodput>=0.95'"
        )
    try:
        value = float(match["value"])
    except ValueError:
        raise SLOError(f"{source}: {match['value']!r} is not a number") from None
    if match["unit"] == "%":
        value /= 100
    stat = match["stat"]
    percentile = None
    if stat is not None and stat.startswith("p"):
        try:
            percentile = float(stat[1:])
        except ValueError:
            raise SLOError(f"{source}: {stat!r} is not a percentile") from None
        stat = None
    op: Op = "<=" if match["op"] in ("<=", "<") else ">="
    return make_objective(
        metric=match["metric"],
        stat=stat,
        percentile=percentile,
        op=op,
        threshold=value,
        workload=match["workload"],
        name=None,
        source=source,
    )


def parse_rules(rules: Sequence[str]) -> SLOSet:
    """An ``SLOSet`` of command-line rules (default goodput targets and validity)."""
    return SLOSet(
        objectives=tuple(parse_rule(r) for r in rules),
        sources=tuple(f"--slo {r!r}" for r in rules),
    )


def scale_slos(slos: SLOSet, time_scale: float) -> SLOSet:
    """The same objectives on a clock running ``time_scale`` times slower (a simulator's
    ``--time-scale``: wall seconds per model second): latency thresholds and goodput
    targets are multiplied by it, per-second rates divided by it; fractions are kept."""
    if time_scale == 1:
        return slos

    def scaled(o: Objective) -> Objective:
        if o.metric in LATENCY_METRICS:
            factor = time_scale
        elif o.metric in _UNSCALED:
            factor = 1.0
        else:
            factor = 1 / time_scale
        return Objective(
            metric=o.metric,
            stat=o.stat,
            percentile=o.percentile,
            op=o.op,
            threshold=o.threshold * factor,
            workload=o.workload,
            name=o.name,
            source=o.source,
        )

    g = slos.goodput
    return SLOSet(
        objectives=tuple(scaled(o) for o in slos.objectives),
        goodput=SLOTargets(
            ttft_ms=g.ttft_ms * time_scale if g.ttft_ms is not None else None,
            tpot_ms=g.tpot_ms * time_scale if g.tpot_ms is not None else None,
            ttft_basis=g.ttft_basis,
        ),
        validity=slos.validity,
        sources=slos.sources,
    )
