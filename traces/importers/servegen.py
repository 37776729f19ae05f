"""ServeGen per-client statistics (Alibaba Bailian) -> sampled workload table.

Source format (reference/traces.md §1.8; alibaba/ServeGen ``data/<category>/<model>/``):

* ``chunk-<client>-trace.csv`` (no header): ``window_start_s,rate_rps,cv,pattern,shape,scale``
  per 600 s window; ``pattern`` is ``Gamma``, ``Weibull`` or empty (idle, rate 0).
* ``chunk-<client>-dataset.json``: ``{window_start_s: {field: "<python dict literal
  {value: probability}>"}}`` per 21,600 s window. Multimodal fields are ``text_tokens``,
  ``image_tokens`` (per image), ``image_count``, ``output_tokens`` (plus audio/video, not
  imported); language and reasoning clients have ``input_tokens`` and ``output_tokens``
  (``reason_ratio``, a pmf over fractions, is not imported and not parsed). Only the
  fields in ``USED_FIELDS`` are parsed.
* Idle windows: a trace row with rate 0 and an empty pattern yields no requests; a dataset
  window written as ``{}`` or with empty pmfs (``"{}"``) records no lengths. Should an
  arrival window with traffic fall in an idle dataset window, its lengths come from the
  nearest busy dataset window (earlier first).

The pmfs are Python literals, parsed with ``ast.literal_eval`` (never ``eval``).

Sampling, seeded by ``--seed`` and the client id, so an import is reproducible:

* arrivals: in each window, inter-arrival gaps are drawn from the window's distribution
  (``Gamma(shape, scale)`` or ``Weibull(shape, scale)``) and rescaled so their mean is
  ``1/rate``, as ServeGen's ``construct.py`` does; an empty pattern with a positive rate
  falls back to Poisson. Each window starts its own process at its start time.
* lengths: each request samples every field from the dataset window in force at its arrival
  (the last window starting at or before it), by inverse CDF.
* images: ``image_count`` images, each with its own ``image_tokens`` sample. Their sizes are
  synthesized as the exact Qwen2-VL grid for that token count: ``T = a*b`` with ``a <= b``
  the factor pair closest to square, image = ``28*b`` x ``28*a`` pixels, which Qwen2-VL's
  ``smart_resize`` maps back to exactly ``T`` tokens (1,222 -> 1316x728). ``image_tokens``
  holds the sampled total per request.
* ``input_tokens`` is the text part (``text_tokens`` or ``input_tokens``), at least 1;
  ``output_tokens`` at least 1. Rows with images are workload ``image``, others ``text``.

PATH is a ``chunk-<client>-trace.csv`` file (its dataset file must sit beside it) or a
directory of them, whose clients are merged by arrival, one 600 s window at a time.
"""

from __future__ import annotations

import ast
import bisect
import csv
import json
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from traces import schema as s
from traces.errors import TraceFileError
from traces.importers.base import LINE_COLUMN, Importer, ImportOptions
from traces.importers.errors import SourceError
from traces.importers.parse import check_source
from traces.importers.sink import TraceSink

USED_FIELDS = ("text_tokens", "input_tokens", "output_tokens", "image_count", "image_tokens")
"""Dataset fields the importer samples; any other field is ignored unparsed."""
TRACE_COLUMNS = ("window_start_s", "rate_rps", "cv", "pattern", "shape", "scale")
_TRACE_NAME = re.compile(r"^chunk-(?P<client>.+)-trace\.csv$")
QWEN_GRID_PX = 28
"""Qwen2-VL merges 2x2 patches of 14 px: one image token per 28x28 pixels."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pmf:
    """A discrete distribution: sorted values and their cumulative probabilities."""

    values: tuple[int, ...]
    cumulative: tuple[float, ...]

    def sample(self, rng: random.Random) -> int:
        """Inverse-CDF sample."""
        u = rng.random() * self.cumulative[-1]
        return self.values[min(bisect.bisect_right(self.cumulative, u), len(self.values) - 1)]

    def mean(self) -> float:
        """Expected value."""
        prev = 0.0
        total = 0.0
        for v, c in zip(self.values, self.cumulative, strict=True):
            total += v * (c - prev)
            prev = c
        return total / self.cumulative[-1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """One 600 s arrival window of a client."""

    start_s: float
    rate_rps: float
    pattern: str
    shape: float
    scale: float
    line: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Client:
    """One ServeGen client: arrival windows and length distributions per dataset window."""

    name: str
    windows: tuple[Window, ...]
    dataset_starts: tuple[float, ...]
    datasets: tuple[dict[str, Pmf], ...]
    window_s: float


def parse_pmf(text: Any, where: str, column: str) -> Pmf | None:
    """Parse a ``"{value: probability}"`` Python literal safely (``ast.literal_eval``).

    An empty dict (``"{}"``, how ServeGen writes a field of an idle window) gives None.
    """
    if not isinstance(text, str):
        raise SourceError(where, line=None, column=column, problem="expected a dict literal string")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise SourceError(
            where, line=None, column=column, problem=f"not a Python dict literal ({exc})"
        ) from exc
    if not isinstance(value, dict):
        raise SourceError(where, line=None, column=column, problem="expected a dict")
    if not value:
        return None
    items: list[tuple[int, float]] = []
    for k, p in value.items():
        ok_k = isinstance(k, int | float) and not isinstance(k, bool) and float(k).is_integer()
        ok_p = isinstance(p, int | float) and not isinstance(p, bool) and p >= 0
        if not (ok_k and ok_p):
            raise SourceError(
                where, line=None, column=column, problem=f"bad entry {k!r}: {p!r} in the pmf"
            )
        items.append((int(k), float(p)))
    items.sort()
    cumulative: list[float] = []
    acc = 0.0
    for _, p in items:
        acc += p
        cumulative.append(acc)
    if acc <= 0:
        raise SourceError(where, line=None, column=column, problem="probabilities sum to 0")
    return Pmf(values=tuple(v for v, _ in items), cumulative=tuple(cumulative))


def _read_windows(path: Path) -> tuple[Window, ...]:
    where = path.name
    out: list[Window] = []
    with path.open(encoding="utf-8", newline="") as fh:
        for line, row in enumerate(csv.reader(fh), start=1):
            if not row:
                continue
            if len(row) != len(TRACE_COLUMNS):
                raise SourceError(
                    where,
                    line=line,
                    column=None,
                    problem=f"expected {len(TRACE_COLUMNS)} fields ({','.join(TRACE_COLUMNS)}), "
                    f"got {len(row)}",
                )
            nums: dict[str, float] = {}
            for name, cell in zip(TRACE_COLUMNS, row, strict=True):
                if name == "pattern":
                    continue
                try:
                    nums[name] = float(cell)
                except ValueError:
                    raise SourceError(
                        where, line=line, column=name, problem=f"not a number: {cell!r}"
                    ) from None
                if not math.isfinite(nums[name]) or nums[name] < 0:
                    raise SourceError(
                        where, line=line, column=name, problem=f"must be finite and >= 0: {cell!r}"
                    )
            pattern = row[3].strip()
            if pattern not in ("", "Gamma", "Weibull"):
                raise SourceError(
                    where, line=line, column="pattern", problem=f"unknown pattern {pattern!r}"
                )
            if pattern and nums["rate_rps"] > 0 and (nums["shape"] <= 0 or nums["scale"] <= 0):
                raise SourceError(
                    where, line=line, column="shape", problem="shape and scale must be positive"
                )
            if out and nums["window_start_s"] <= out[-1].start_s:
                raise SourceError(
                    where, line=line, column="window_start_s", problem="windows are not increasing"
                )
            out.append(
                Window(
                    start_s=nums["window_start_s"],
                    rate_rps=nums["rate_rps"],
                    pattern=pattern,
                    shape=nums["shape"],
                    scale=nums["scale"],
                    line=line,
                )
            )
    if not out:
        raise SourceError(where, line=None, column=None, problem="no windows")
    return tuple(out)


def _read_datasets(path: Path) -> tuple[tuple[float, ...], tuple[dict[str, Pmf], ...]]:
    where = path.name
    check_source(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SourceError(
            where, line=exc.lineno, column=None, problem=f"invalid JSON ({exc.msg})"
        ) from exc
    if not isinstance(raw, dict) or not raw:
        raise SourceError(where, line=None, column=None, problem="expected {window_start_s: {...}}")
    entries: list[tuple[float, dict[str, Pmf]]] = []
    for key, fields in raw.items():
        try:
            start = float(key)
        except ValueError:
            raise SourceError(
                where, line=None, column=None, problem=f"window key {key!r} is not a number"
            ) from None
        if not isinstance(fields, dict):
            raise SourceError(
                where, line=None, column=None, problem=f"window {key!r}: expected an object"
            )
        # only the fields this importer samples are parsed: others (reason_ratio, whose values
        # are fractions, audio/video) must not reject the file
        pmfs: dict[str, Pmf] = {}
        for name in USED_FIELDS:
            if name in fields:
                pmf = parse_pmf(fields[name], where, f"{key}.{name}")
                if pmf is not None:
                    pmfs[name] = pmf
        text_field = "text_tokens" if "text_tokens" in fields else "input_tokens"
        if text_field not in pmfs and "output_tokens" not in pmfs:
            entries.append((start, {}))  # idle window: `{}` or every length pmf `"{}"`
            continue
        for need in (text_field, "output_tokens"):
            if need not in pmfs:
                problem = "missing field" if need not in fields else "empty pmf in a busy window"
                raise SourceError(where, line=None, column=f"{key}.{need}", problem=problem)
        entries.append((start, pmfs))
    entries.sort(key=lambda e: e[0])
    return tuple(e[0] for e in entries), tuple(e[1] for e in entries)


def load_client(trace_csv: Path) -> Client:
    """Read one client's trace and dataset files."""
    check_source(trace_csv)
    match = _TRACE_NAME.match(trace_csv.name)
    if match is None:
        raise TraceFileError(f"{trace_csv}: expected a file named chunk-<client>-trace.csv")
    name = match["client"]
    windows = _read_windows(trace_csv)
    starts, datasets = _read_datasets(trace_csv.with_name(f"chunk-{name}-dataset.json"))
    step = windows[1].start_s - windows[0].start_s if len(windows) > 1 else 600.0
    return Client(
        name=name, windows=windows, dataset_starts=starts, datasets=datasets, window_s=step
    )


def qwen_image_size(tokens: int) -> tuple[int, int]:
    """(width, height) in pixels that Qwen2-VL turns into exactly ``tokens`` image tokens."""
    tokens = max(1, tokens)
    a = math.isqrt(tokens)
    while tokens % a:
        a -= 1
    return QWEN_GRID_PX * (tokens // a), QWEN_GRID_PX * a


def _gap_sampler(w: Window, rng: random.Random) -> Callable[[], float]:
    mean_gap = 1.0 / w.rate_rps
    if w.pattern == "Gamma":
        scale = mean_gap / (w.shape * w.scale)
        return lambda: rng.gammavariate(w.shape, w.scale) * scale
    if w.pattern == "Weibull":
        scale = mean_gap / (w.scale * math.gamma(1.0 + 1.0 / w.shape))
        return lambda: rng.weibullvariate(w.scale, w.shape) * scale
    return lambda: rng.expovariate(w.rate_rps)


def _dataset_at(client: Client, t: float, w: Window) -> dict[str, Pmf]:
    """The dataset window in force at ``t``; when it is idle (no lengths recorded) while the
    arrival window has traffic, the nearest busy one before it, else after it."""
    datasets = client.datasets
    i = max(0, bisect.bisect_right(client.dataset_starts, t) - 1)
    order: list[int] = [i, *range(i - 1, -1, -1), *range(i + 1, len(datasets))]
    for j in order:
        found: dict[str, Pmf] = datasets[j]
        if found:
            return found
    raise SourceError(
        f"chunk-{client.name}-trace.csv",
        line=w.line,
        column="rate_rps",
        problem=f"rate {w.rate_rps} > 0 but every dataset window of client {client.name} is empty",
    )


def _window_rows(
    client: Client, w: Window, rng: random.Random, first_id: int, cols: dict[str, list[Any]]
) -> int:
    """Append one window's sampled requests to ``cols``; return how many."""
    if w.rate_rps <= 0:
        return 0
    n = 0
    gap = _gap_sampler(w, rng)
    end = w.start_s + client.window_s
    t = w.start_s + gap()
    while t < end:
        ds = _dataset_at(client, t, w)
        text = ds.get("text_tokens") or ds["input_tokens"]
        n_images = ds["image_count"].sample(rng) if "image_count" in ds else 0
        per_image = (
            [ds["image_tokens"].sample(rng) for _ in range(n_images)]
            if "image_tokens" in ds
            else []
        )
        sizes = [qwen_image_size(tok) for tok in per_image]
        cols["id"].append(f"{client.name}-{first_id + n}")
        n += 1
        cols["t"].append(t)
        cols["in"].append(max(1, text.sample(rng)))
        cols["out"].append(max(1, ds["output_tokens"].sample(rng)))
        cols["images"].append([{"width": wd, "height": ht} for wd, ht in sizes] or None)
        cols["image_tokens"].append(sum(per_image) if per_image else None)
        cols["workload"].append("image" if per_image else "text")
        cols["line"].append(w.line)
        t += gap()
    return n


def _clients(path: Path) -> list[Client]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if _TRACE_NAME.match(p.name))
        if not files:
            raise TraceFileError(f"{path}: no chunk-<client>-trace.csv files")
        return [load_client(p) for p in files]
    return [load_client(path)]


def read(path: Path, options: ImportOptions, sink: TraceSink) -> None:
    """Sample requests from ServeGen client statistics into ``sink``, window by window."""
    if not path.exists():
        raise TraceFileError(f"{path}: no such file")
    clients = _clients(path)
    sink.note("servegen_clients", [c.name for c in clients])
    sink.note("arrivals", f"sampled per window, seed={options.seed}")
    rngs = {c.name: random.Random(f"servegen:{options.seed}:{c.name}") for c in clients}
    counters = {c.name: 0 for c in clients}
    starts = sorted({w.start_s for c in clients for w in c.windows})
    by_start = {c.name: {w.start_s: w for w in c.windows} for c in clients}
    for start in starts:
        merged: dict[str, list[Any]] = {k: [] for k in _KEYS}
        for c in clients:
            w = by_start[c.name].get(start)
            if w is None:
                continue
            counters[c.name] += _window_rows(c, w, rngs[c.name], counters[c.name], merged)
        if not merged["id"]:
            continue
        order = sorted(range(len(merged["t"])), key=merged["t"].__getitem__)
        table = pa.table(
            {
                s.REQUEST_ID: pa.array([merged["id"][i] for i in order], pa.string()),
                s.ARRIVAL_S: pa.array([merged["t"][i] for i in order], pa.float64()),
                s.INPUT_TOKENS: pa.array([merged["in"][i] for i in order], pa.int64()),
                s.OUTPUT_TOKENS: pa.array([merged["out"][i] for i in order], pa.int64()),
                s.IMAGES: pa.array([merged["images"][i] for i in order], pa.list_(s.IMAGE_TYPE)),
                s.IMAGE_TOKENS: pa.array([merged["image_tokens"][i] for i in order], pa.int64()),
                s.WORKLOAD: pa.array([merged["workload"][i] for i in order], pa.string()),
                s.API: pa.array([s.API_CHAT] * len(order), pa.string()),
                LINE_COLUMN: pa.array([merged["line"][i] for i in order], pa.int64()),
            }
        )
        sink.add(table)
        if sink.done:
            return


_KEYS = ("id", "t", "in", "out", "images", "image_tokens", "workload", "line")

IMPORTER = Importer(
    name="servegen",
    summary="ServeGen per-client statistics (600 s windows + pmfs) sampled into requests",
    read=read,
    options=frozenset({"seed"}),
    source_columns={s.ARRIVAL_S: "rate_rps", s.INPUT_TOKENS: "text_tokens"},
)
