"""Seeded token-length distributions for synthetic prompts and outputs.

Each distribution is a frozen value with a ``sample(rng)`` method returning a positive
integer number of tokens. ``LogNormal`` is parameterised by its *mean* in tokens and its
spread ``sigma`` (the standard deviation of the log), which is how people describe
lengths ("about 1000 tokens, heavy-tailed"). Imports pyarrow only, for empirical lengths
read from a trace file.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from traces.errors import TraceFileError

MAX_TOKENS: Final = 4_194_304
"""Upper clamp of every sampled length (4M tokens; the int32 column holds far more)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogNormal:
    """Lognormal lengths with expected value ``mean`` tokens and log-space spread ``sigma``.

    ``mu = ln(mean) - sigma²/2`` so that E[X] = mean; sigma 0 gives ``mean`` every time.
    Samples are rounded and clamped to [``low``, ``high``].
    """

    mean: float
    sigma: float
    low: int = 1
    high: int = MAX_TOKENS

    def __post_init__(self) -> None:
        if self.mean <= 0 or self.sigma < 0 or not 1 <= self.low <= self.high:
            raise ValueError("lognormal needs mean > 0, sigma >= 0 and 1 <= low <= high")

    def sample(self, rng: random.Random) -> int:
        mu = math.log(self.mean) - self.sigma * self.sigma / 2.0
        value = rng.lognormvariate(mu, self.sigma) if self.sigma > 0 else self.mean
        return min(self.high, max(self.low, round(value)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Fixed:
    """Always ``value`` tokens."""

    value: int

    def __post_init__(self) -> None:
        if self.value < 1:
            raise ValueError("a fixed length must be at least 1")

    def sample(self, rng: random.Random) -> int:
        return self.value


@dataclass(frozen=True, slots=True, kw_only=True)
class LogUniform:
    """Lengths uniform in log space between ``low`` and ``high`` tokens (inclusive): as many
    32k-64k prompts as 512k-1M ones."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError("log-uniform needs 1 <= low <= high")

    def sample(self, rng: random.Random) -> int:
        value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return min(self.high, max(self.low, round(value)))


@dataclass(frozen=True, slots=True, kw_only=True)
class UniformInt:
    """Integers uniform in [``low``, ``high``]."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError("uniform needs 1 <= low <= high")

    def sample(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)


@dataclass(frozen=True, slots=True, kw_only=True)
class Empirical:
    """Lengths drawn uniformly from observed ``values`` (bootstrap resampling)."""

    values: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.values or min(self.values) < 1:
            raise ValueError("empirical lengths need at least one value, all positive")

    def sample(self, rng: random.Random) -> int:
        return self.values[rng.randrange(len(self.values))]


LengthDist = LogNormal | Fixed | LogUniform | UniformInt | Empirical


def empirical_from_text(text: str) -> Empirical:
    """An ``Empirical`` from a comma-separated list of positive integers, e.g. ``"128,512"``."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise ValueError(f"not a comma-separated list of integers: {text!r}") from exc
    return Empirical(values=values)


def empirical_from_file(path: Path, column: str) -> Empirical:
    """An ``Empirical`` from one integer column of a Parquet trace file (nulls and
    non-positive values are skipped)."""
    try:
        table = pq.read_table(path, columns=[column])
    except (OSError, pa.ArrowInvalid, KeyError) as exc:
        raise TraceFileError(f"{path}: cannot read column {column!r}: {exc}") from exc
    values = tuple(v for v in table.column(column).to_pylist() if isinstance(v, int) and v > 0)
    if not values:
        raise TraceFileError(f"{path}: column {column!r} has no positive lengths")
    return Empirical(values=values)
