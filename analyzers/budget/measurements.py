"""Measured step times to calibrate against: the Splitwise CSV and a simple CSV.

Both become ``Observation``s: one measured step (a prefill of ``batch`` prompts of
``new_tokens``, or a decode step of ``batch`` sequences over ``cached_tokens``) on a named
GPU type, median over repeats. Formats:

- Splitwise (``data/perf_model.csv`` of Mutinifni/splitwise-sim): columns ``model,
  hardware, tensor_parallel, prompt_size, batch_size, token_size, prompt_time,
  token_time`` (ms). Each row gives a prefill (``prompt_time``) and a decode step
  (``token_time``, per output token) whose context is the prompt plus half the output.
- Simple: ``model,gpu,tp,tokens,batch,ms`` and optional ``phase`` (``prefill``, the
  default, or ``decode``: ``tokens`` is then the context per sequence) and ``engine``.

A run directory of the tool's own is read by ``analyzers.calibration_points`` (Polars,
outside this package), which builds the same observations.

Standard library only (``csv``); a malformed file is a ``BudgetError`` naming the line.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from analyzers.errors import BudgetError

Phase = Literal["prefill", "decode"]

_SPLITWISE = ("model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "prompt_time")
_SIMPLE = ("model", "gpu", "tp", "tokens", "batch", "ms")


ObservationKey = tuple[str, str, str, str, int, int, int, int, int]
"""What identifies a measured point: phase, model, GPU, engine, tensor parallelism, new and
cached tokens, batch and sequences decoding beside it (``Observation.key``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """One measured step: ``seconds`` for ``batch`` sequences of ``new_tokens`` over
    ``cached_tokens`` each, on ``gpu`` (and ``engine``) at ``tensor_parallel``; a prefill
    step may carry ``decoding`` other sequences' decode tokens (a mixed step)."""

    phase: Phase
    model: str
    gpu: str
    engine: str = ""
    tensor_parallel: int
    new_tokens: int
    cached_tokens: int = 0
    batch: int = 1
    prompt_tokens: int
    seconds: float
    repeats: int = 1
    decoding: int = 0

    def __post_init__(self) -> None:
        if min(self.tensor_parallel, self.new_tokens, self.batch, self.repeats) < 1:
            raise BudgetError(f"measurement {self.model}/{self.gpu}: counts must be >= 1")
        if self.decoding < 0 or (self.decoding and self.phase != "prefill"):
            raise BudgetError(
                f"measurement {self.model}/{self.gpu}: only a prefill step has sequences "
                "decoding beside it, never fewer than 0"
            )
        if not self.seconds > 0:
            raise BudgetError(f"measurement {self.model}/{self.gpu}: time must be positive")

    @property
    def key(self) -> ObservationKey:
        """What identifies the point (all but the time and the repeats)."""
        return (
            self.phase,
            self.model,
            self.gpu,
            self.engine,
            self.tensor_parallel,
            self.new_tokens,
            self.cached_tokens,
            self.batch,
            self.decoding,
        )


def _int(row: Mapping[str, str], key: str, where: str) -> int:
    try:
        return int(float(row[key]))
    except (KeyError, TypeError, ValueError):
        raise BudgetError(f"{where}: {key} must be a number, got {row.get(key)!r}") from None


def _float(row: Mapping[str, str], key: str, where: str) -> float:
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError):
        raise BudgetError(f"{where}: {key} must be a number, got {row.get(key)!r}") from None


def median_observations(observations: Iterable[Observation]) -> list[Observation]:
    """One observation per ``key``: the median time of its repeats, repeats summed."""
    groups: dict[ObservationKey, list[Observation]] = {}
    for o in observations:
        groups.setdefault(o.key, []).append(o)
    out = []
    for group in groups.values():
        first = group[0]
        out.append(
            Observation(
                phase=first.phase,
                model=first.model,
                gpu=first.gpu,
                engine=first.engine,
                tensor_parallel=first.tensor_parallel,
                new_tokens=first.new_tokens,
                cached_tokens=first.cached_tokens,
                batch=first.batch,
                prompt_tokens=first.prompt_tokens,
                seconds=statistics.median(o.seconds for o in group),
                repeats=sum(o.repeats for o in group),
                decoding=first.decoding,
            )
        )
    return out


def _splitwise_rows(rows: Iterable[dict[str, str]], where: str) -> Iterable[Observation]:
    for line, row in enumerate(rows, start=2):
        at = f"{where}:{line}"
        common = {
            "model": row["model"].strip(),
            "gpu": row["hardware"].strip(),
            "engine": (row.get("engine") or "").strip(),
            "tensor_parallel": _int(row, "tensor_parallel", at),
            "batch": _int(row, "batch_size", at),
        }
        prompt = _int(row, "prompt_size", at)
        yield Observation(
            phase="prefill",
            new_tokens=prompt,
            prompt_tokens=prompt,
            seconds=_float(row, "prompt_time", at) / 1e3,
            **common,  # type: ignore[arg-type]
        )
        if row.get("token_time"):
            output = _int(row, "token_size", at) if row.get("token_size") else 1
            yield Observation(
                phase="decode",
                new_tokens=1,
                cached_tokens=prompt + output // 2,
                prompt_tokens=prompt,
                seconds=_float(row, "token_time", at) / 1e3,
                **common,  # type: ignore[arg-type]
            )


def _simple_rows(rows: Iterable[dict[str, str]], where: str) -> Iterable[Observation]:
    for line, row in enumerate(rows, start=2):
        at = f"{where}:{line}"
        phase = (row.get("phase") or "prefill").strip()
        if phase not in ("prefill", "decode"):
            raise BudgetError(f"{at}: phase must be prefill or decode, got {phase!r}")
        tokens = _int(row, "tokens", at)
        decode = phase == "decode"
        yield Observation(
            phase="decode" if decode else "prefill",
            model=row["model"].strip(),
            gpu=row["gpu"].strip(),
            engine=(row.get("engine") or "").strip(),
            tensor_parallel=_int(row, "tp", at),
            new_tokens=1 if decode else tokens,
            cached_tokens=tokens if decode else 0,
            batch=_int(row, "batch", at),
            prompt_tokens=tokens,
            seconds=_float(row, "ms", at) / 1e3,
        )


def measurements_from_csv(text: str, where: str) -> list[Observation]:
    """The observations of a Splitwise or simple CSV (told apart by the header)."""
    reader = csv.DictReader(text.splitlines())
    header = set(reader.fieldnames or ())
    if header.issuperset(_SPLITWISE):
        observations = list(_splitwise_rows(reader, where))
    elif header.issuperset(_SIMPLE):
        observations = list(_simple_rows(reader, where))
    else:
        raise BudgetError(
            f"{where}: not a measurement table; need the Splitwise columns "
            f"({', '.join(_SPLITWISE)}) or {', '.join(_SIMPLE)}"
        )
    if not observations:
        raise BudgetError(f"{where}: no measurements")
    return median_observations(observations)


def load_measurements(path: Path) -> list[Observation]:
    """Read ``path`` (a CSV file) into median observations."""
    if path.is_dir():
        raise BudgetError(
            f"{path}: a run directory is read by analyzers.calibration_points, not here"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BudgetError(f"{path}: cannot read measurements ({exc.strerror})") from None
    return measurements_from_csv(text, str(path))
