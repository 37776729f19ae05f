"""Cache fidelity: the prefix-cache hits a run's trace allows, beside what the server reported.

The expectation is an ideal, unbounded prefix cache fed by the run's requests in the order
they were sent (``IdealPrefixCache``). The prompt maker renders equal ``prefix_blocks`` ids
as equal text and a block a prompt ends inside as the beginning of that block's text, so
two prompts share their first tokens exactly as far as their block ids agree from the
start. A request's expected cached tokens are then

    floor(min(shared, prompt - 1) / kv_block) * kv_block

with ``shared`` the longest token prefix it shares with an earlier request whose prompt the
server prefilled (one that got a first token or ended ok), ``prompt`` the prompt tokens the
server reported (else the requested ones), and ``kv_block`` the server's KV block size: a
prefix cache hits whole blocks and computes at least the last prompt token (vLLM's rule,
which the simulator follows). Tokens past a row's block ids are unique to it (the maker
seeds them by the request id), so a trace without ``prefix_blocks`` allows no hits. Rows
with images, or with their own text (``prompt``/``messages``), and embeddings requests get
no expectation (null):
the text shared is not known in tokens; so do rows whose request id is not the trace's at
their index (placeholders of a run recovered without its trace). A chat template's fixed
head is not counted, so the expectation may fall short of a server's hits by up to it.

A run replayed with ``--history live`` sent the server's own replies as each turn's
history: its text is not the trace's, so it gets no expectation.

Where the numbers come from (``CacheBasis``): the trace is the one ``run.json`` names
(``config.trace_path``, as given, then relative to where the replay ran), or the one the
caller gives (``CacheOptions.trace``, ``--trace``); either must match the content hash
``run.json`` recorded. Tokens per block id: the trace's ``block_size`` metadata (512 when
absent). The KV block size: ``CacheOptions.kv_block_size``, else the run's deployment in
``run.json`` (``scheduler.block_size``), else ``DEFAULT_KV_BLOCK`` (vLLM's default).
Without a reachable trace there is no expectation and ``CacheBasis.unavailable`` says why.

Must not import loadgen or httpx.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import polars as pl

from analyzers.errors import AnalyzerError, DifferentTracesError
from analyzers.frames import run_dirs, run_info, scan_run
from traces import schema as s
from traces.errors import TraceError
from traces.io import file_sha256, read_metadata
from traces.runinfo import RunInfo
from traces.validate import block_size_of

DEFAULT_KV_BLOCK: Final = 16
"""The server's KV block size when neither the caller nor the run's deployment says (vLLM's
default ``--block-size``)."""
EXPECTED_CACHED: Final = "expected_cached_tokens"
"""The per-request column of the expectation joined to the run's rows (null: none)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheOptions:
    """Asks ``analyze`` for the expected cached tokens. ``trace``: the trace file the run
    replayed (None: the one ``run.json`` names); ``kv_block_size``: the server's KV block
    size in tokens (None: the run's deployment, else ``DEFAULT_KV_BLOCK``)."""

    trace: str | None = None
    kv_block_size: int | None = None

    def __post_init__(self) -> None:
        if self.kv_block_size is not None and self.kv_block_size < 1:
            raise ValueError("kv_block_size must be at least 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheBasis:
    """What the expectation rests on, or why there is none (``unavailable``)."""

    trace: str | None
    trace_block_size: int | None
    kv_block_size: int
    kv_block_source: str
    unavailable: str | None = None
    note: str | None = None
    """A caveat that does not stop the comparison (prefix caching off in the deployment)."""

    @property
    def available(self) -> bool:
        """Whether each request's expected cached tokens were computed."""
        return self.unavailable is None


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheTokens:
    """Expected against reported cached tokens over the same requests: those with a
    reported prompt and an expectation. Shares are of their reported prompt tokens."""

    requests: int
    prompt_tokens: int
    expected_tokens: int
    cached_tokens: int

    @property
    def expected_share(self) -> float | None:
        """Expected cached / prompt tokens (None over no prompt tokens)."""
        return self.expected_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def observed_share(self) -> float | None:
        """Reported cached / prompt tokens (None over no prompt tokens)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def fidelity(self) -> float | None:
        """Reported / expected cached tokens (None when the trace allows none); above 1
        when the server found more than the trace's prefixes explain."""
        return self.cached_tokens / self.expected_tokens if self.expected_tokens else None


def cache_tokens(
    requests: object, prompt: object, expected: object, cached: object
) -> CacheTokens | None:
    """A ``CacheTokens`` from aggregated sums (None over no compared request)."""
    n = int(requests) if isinstance(requests, int) else 0
    if n == 0:
        return None
    return CacheTokens(
        requests=n,
        prompt_tokens=int(prompt) if isinstance(prompt, int) else 0,
        expected_tokens=int(expected) if isinstance(expected, int) else 0,
        cached_tokens=int(cached) if isinstance(cached, int) else 0,
    )


class IdealPrefixCache:
    """An unbounded prefix cache over trace block ids: a trie of id prefixes, each node
    holding the most tokens of its block any added prompt covered (see the module doc)."""

    def __init__(self, *, trace_block: int, kv_block: int) -> None:
        if trace_block < 1 or kv_block < 1:
            raise ValueError("block sizes must be at least 1")
        self._bs = trace_block
        self._kv = kv_block
        self._child: dict[tuple[int, int], int] = {}
        self._covered: list[int] = [0]

    def shared(self, blocks: Sequence[int], tokens: int) -> int:
        """Tokens of a ``tokens``-token prompt over ``blocks`` that an added one shares."""
        return self._walk(blocks, tokens, add=False)

    def expected(
        self, blocks: Sequence[int], tokens: int, prompt: int, *, add: bool = False
    ) -> int:
        """Cached tokens a server would report for a ``prompt``-token prompt whose text
        (``tokens`` of them) lies over ``blocks``: whole KV blocks, the last token
        computed. ``add``: then cache the prompt too (one walk for both)."""
        hit = min(self._walk(blocks, tokens, add=add), prompt - 1)
        return max(0, hit // self._kv * self._kv)

    def add(self, blocks: Sequence[int], tokens: int) -> None:
        """Cache a prefilled prompt of ``tokens`` tokens over ``blocks``."""
        self._walk(blocks, tokens, add=True)

    def _walk(self, blocks: Sequence[int], tokens: int, *, add: bool) -> int:
        """The tokens shared with what was added before; with ``add``, then add these."""
        bs = self._bs
        full, tail = divmod(max(tokens, 0), bs)
        n = min(len(blocks), full + (1 if tail else 0))
        children, covered = self._child, self._covered
        node, shared, matching = 0, 0, True
        for j in range(n):
            own = bs if j < full else tail
            key = (node, blocks[j])
            child = children.get(key)
            if child is None:
                matching = False
                if not add:
                    break
                child = children[key] = len(covered)
                covered.append(own)
            else:
                seen = covered[child]
                if matching:
                    if seen >= own:
                        shared += own  # a whole (or, the last, partial) block shared
                    else:
                        shared += seen  # the part an earlier prompt ended inside
                        matching = False
                if add:
                    if own > seen:
                        covered[child] = own
                elif not matching:
                    break
            node = child
        return shared


def _candidates(info: RunInfo, run_dir: Path) -> list[Path]:
    """Where ``run.json``'s trace path may be: as given, then from where the replay ran
    (the run directory less the path it was given as)."""
    given = Path(info.config.trace_path)
    out = [given]
    if not given.is_absolute():
        recorded = Path(info.config.run_dir)
        here = run_dir.resolve()
        parts = recorded.parts
        if parts and not recorded.is_absolute() and here.parts[-len(parts) :] == parts:
            out.append(here.parents[len(parts) - 1] / given)
        out.append(run_dir / given)
    return out


def _kv_block(info: RunInfo | None, options: CacheOptions) -> tuple[int, str, str | None]:
    """The KV block size, where it came from, and a note on the deployment's caching."""
    note = None
    spec = None
    if info is not None and info.deployment is not None:
        try:
            spec = info.deployment.spec()
        except TraceError:
            spec = None
    if spec is not None and spec.scheduler.prefix_caching is False:
        note = "the run's deployment says prefix caching is off"
    if options.kv_block_size is not None:
        return options.kv_block_size, "--kv-block-size", note
    if spec is not None and spec.scheduler.block_size is not None:
        deployment = info.deployment if info is not None else None
        sources = deployment.sources() if deployment is not None else {}
        source = sources.get("scheduler.block_size", "deployment")
        return spec.scheduler.block_size, f"run.json deployment ({source})", note
    return DEFAULT_KV_BLOCK, f"default ({DEFAULT_KV_BLOCK}, vLLM's)", note


def resolve_trace(
    run: Path | str, options: CacheOptions
) -> tuple[Path | None, str | None, RunInfo | None]:
    """The trace file of ``run`` (checked against ``run.json``'s hash), or None and why."""
    dirs = run_dirs(run)
    info = next((i for i in (run_info(d) for d in dirs) if i is not None), None)
    if options.trace is not None:
        path = Path(options.trace)
        if not path.is_file():
            raise AnalyzerError(f"--trace {path}: no such trace file")
        if info is not None and file_sha256(path) != info.trace.sha256:
            raise DifferentTracesError(
                f"--trace {path} is not the trace {run} replayed (its sha256 differs from "
                f"run.json's {info.trace.sha256[:12]})"
            )
        return path, None, info
    if info is None:
        return None, "no run.json names the trace: give --trace", None
    for path in _candidates(info, dirs[0]):
        if path.is_file():
            if file_sha256(path) != info.trace.sha256:
                why = f"{path} changed since the run (sha256 differs): give --trace"
                return None, why, info
            return path, None, info
    return None, f"trace {info.config.trace_path} not found: give --trace", info


def _trace_rows(path: Path) -> pl.DataFrame:
    """The trace columns the expectation reads, with ``trace_index`` (the row number)."""
    lf = pl.scan_parquet(path)
    names = lf.collect_schema().names()
    cols = [pl.col(s.REQUEST_ID).cast(pl.String).alias("_trace_id")]
    for name, dtype in ((s.PREFIX_BLOCKS, pl.List(pl.Int64)), (s.API, pl.String)):
        col = pl.col(name).cast(dtype) if name in names else pl.lit(None, dtype)
        cols.append(col.alias(name))
    explicit = [pl.col(c).is_not_null() for c in (s.PROMPT, s.MESSAGES) if c in names]
    if s.IMAGES in names:
        explicit.append(pl.col(s.IMAGES).list.len().fill_null(0) > 0)
    cols.append((pl.any_horizontal(explicit) if explicit else pl.lit(False)).alias("_opaque"))
    return lf.select(cols).with_row_index(s.TRACE_INDEX).collect()


def cache_expectation(
    run: Path | str, options: CacheOptions
) -> tuple[pl.DataFrame | None, CacheBasis]:
    """Each request's expected cached tokens (``trace_index``, ``EXPECTED_CACHED``), or
    None, and the basis (see the module doc)."""
    path, why, info = resolve_trace(run, options)
    kv, kv_source, note = _kv_block(info, options)
    if info is not None and info.config.history != "trace":
        path = None
        why = (
            f"--history {info.config.history}: the history sent was the server's replies, "
            "which the trace's prefix blocks do not describe"
        )
    if path is None:
        basis = CacheBasis(
            trace=None,
            trace_block_size=None,
            kv_block_size=kv,
            kv_block_source=kv_source,
            unavailable=why,
            note=note,
        )
        return None, basis
    trace_block = block_size_of(read_metadata(path), str(path))
    template = info.config.template_tokens if info is not None else 0
    api_sent = info.config.api if info is not None else None
    n_in = pl.col(s.INPUT_TOKENS).cast(pl.Int64)
    sent = (
        scan_run(run)
        .select(
            pl.col(s.TRACE_INDEX).cast(pl.Int64),
            pl.col(s.REQUEST_ID).cast(pl.String),
            pl.coalesce(pl.col(s.SENT_NS), pl.col(s.DUE_NS)).alias("_at"),
            (pl.col(s.FIRST_TOKEN_NS).is_not_null() | (pl.col(s.OUTCOME) == s.OUTCOME_OK)).alias(
                "_filled"
            ),
            pl.col(s.PROMPT_TOKENS).cast(pl.Int64).fill_null(n_in).alias("_prompt"),
            n_in.alias("_input"),
        )
        .sort(["_at", s.TRACE_INDEX])
        .collect()
    )
    trace_rows = _trace_rows(path).with_columns(pl.col(s.TRACE_INDEX).cast(pl.Int64))
    rows = sent.join(trace_rows, on=s.TRACE_INDEX, how="left", maintain_order="left")
    basis = CacheBasis(
        trace=str(path),
        trace_block_size=trace_block,
        kv_block_size=kv,
        kv_block_source=kv_source,
        note=note,
    )
    # A row whose request id is not the trace's at its index (a placeholder `loadgen
    # recover` wrote without the trace) gets no expectation; most of them: another trace.
    stray = pl.col("_trace_id").is_null() | (pl.col("_trace_id") != pl.col(s.REQUEST_ID))
    wrong = rows.filter(stray).height
    if wrong * 2 > rows.height:
        raise DifferentTracesError(
            f"{path}: {wrong} of the run's {rows.height} requests have another request id "
            "at their trace index: not the trace this run replayed"
        )
    rows = rows.with_columns(pl.col("_opaque").fill_null(True) | stray)
    if not rows.select(pl.col(s.PREFIX_BLOCKS).list.len().fill_null(0).max()).item():
        # No block ids at all: every prompt is unique to its request, nothing to walk.
        frame = rows.unique(s.TRACE_INDEX, keep="first", maintain_order=True).select(
            s.TRACE_INDEX,
            pl.when(pl.col("_opaque") | (pl.lit(api_sent or "") == s.API_EMBEDDINGS))
            .then(None)
            .when(pl.col(s.API) == s.API_EMBEDDINGS)
            .then(None)
            .otherwise(0)
            .cast(pl.Int64)
            .alias(EXPECTED_CACHED),
        )
        return frame, basis
    cache = IdealPrefixCache(trace_block=trace_block, kv_block=kv)
    out: dict[int, int | None] = {}
    for index, api, blocks, opaque, filled, prompt, n_in in rows.select(
        s.TRACE_INDEX, s.API, s.PREFIX_BLOCKS, "_opaque", "_filled", "_prompt", "_input"
    ).iter_rows():
        if index in out:
            continue  # a request sent twice: its first dispatch counts
        api = api_sent or api
        tokens = max(0, n_in - template) if api == s.API_CHAT else n_in
        ids = blocks or ()
        if opaque or api == s.API_EMBEDDINGS:
            out[index] = None
        else:
            out[index] = cache.expected(ids, tokens, prompt, add=filled)
    frame = pl.DataFrame(
        {s.TRACE_INDEX: list(out), EXPECTED_CACHED: list(out.values())},
        schema={s.TRACE_INDEX: pl.Int64, EXPECTED_CACHED: pl.Int64},
    )
    return frame, basis
