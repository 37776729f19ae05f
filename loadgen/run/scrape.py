"""Prometheus scraping during a run: the server's own view of its queue, batch and KV cache.

``alongside(work, config, now_ns)`` scrapes ``config.url`` once before ``work()`` starts (a
baseline, so counters and histograms can be differenced over the run), then every
``interval_s`` on absolute deadlines while ``work`` runs, and once more after it ends. Each
sample becomes one row of ``server_metrics.parquet``:

==========  =========  ==============================================================
column      type       meaning
==========  =========  ==============================================================
ts_ns       int64      epoch ns on the run's clock: midpoint of the scrape's request
name        string     sample name as exposed (``vllm:num_requests_running``,
                       ``..._bucket``, ``..._sum``, ``..._count``, ``..._total``)
labels      string     the sample's labels as a JSON object with sorted keys (``{}``)
value       float64    the sample's value
==========  =========  ==============================================================

The event loop only sends the GET and stamps it; the raw texts are held and parsed
(prometheus_client's text parser) and written in one writer thread after the run, so a
slow or large ``/metrics`` never stalls the replay. A failed scrape is counted, never
raised: scraping is optional and must not fail a run. Imports traces only (no polars).
"""

from __future__ import annotations

import asyncio
import json
import math
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.http.pool import FastTransport
from loadgen.redact import Scrubber, redact_url
from traces.runinfo import ScrapeReport
from traces.schema import SERVER_METRICS_SCHEMA, SM_LABELS, SM_NAME, SM_TS_NS, SM_VALUE

T = TypeVar("T")

TS_NS: Final = SM_TS_NS
NAME: Final = SM_NAME
LABELS: Final = SM_LABELS
VALUE: Final = SM_VALUE

DEFAULT_INTERVAL_S: Final = 1.0
_ACCEPT: Final = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
_FLUSH_ROWS: Final = 50_000
_DEFER_BYTES: Final = 64 * 1024 * 1024
"""Raw scraped text held unparsed during a run before it is parsed early."""
"""Rows buffered by the writer before a row group is written (a few scrapes of vLLM)."""
_FLUSH_SCRAPES: Final = 30
"""... or scrapes, whichever comes first, so a killed run keeps most of its samples."""
_YIELD_S: Final = 100e-6
"""Pause of the writer thread between families, so the event loop can take the GIL."""


def metrics_url_for(base_url: str) -> str:
    """The Prometheus endpoint beside an OpenAI base URL: ``http://h:p/v1`` -> ``http://h:p/metrics``."""
    parts = urlsplit(base_url.rstrip("/"))
    path = parts.path.removesuffix("/v1")
    return urlunsplit((parts.scheme, parts.netloc, path + "/metrics", "", ""))


def same_origin(a: str, b: str) -> bool:
    """Whether two URLs share scheme, host and port (credentials may be sent to both)."""
    pa_, pb = urlsplit(a), urlsplit(b)
    return (pa_.scheme, pa_.netloc) == (pb.scheme, pb.netloc)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScrapeConfig:
    """What to scrape. ``required`` False (the default URL): a first scrape that fails or
    finds no samples turns scraping off for the run, with the reason in the report."""

    url: str
    out_path: Path
    interval_s: float = DEFAULT_INTERVAL_S
    required: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    """Per-scrape deadline; default ``min(max(interval, 0.5), 5)`` s."""


def parse_exposition(text: str) -> list[tuple[str, str, float]]:
    """``(name, labels_json, value)`` of every sample of a Prometheus text exposition.
    Raises ``ValueError`` on text prometheus_client cannot parse."""
    from prometheus_client.parser import text_string_to_metric_families

    rows: list[tuple[str, str, float]] = []
    for family in text_string_to_metric_families(text):
        # The parser is pure Python (about 10 ms for a 15 kB exposition, at most about 1 ms
        # per family): hand the GIL to the event loop after each family. sleep(0) would
        # not: this thread would usually take the GIL straight back (the loop thread only
        # forces a switch after the 5 ms switch interval).
        time.sleep(_YIELD_S)
        for sample in family.samples:
            labels = json.dumps(dict(sorted(sample.labels.items())), separators=(",", ":"))
            rows.append((sample.name, labels, float(sample.value)))
    return rows


class _Writer(threading.Thread):
    """Parses scraped texts and appends them to the Parquet file, off the event loop."""

    def __init__(self, path: Path) -> None:
        super().__init__(name="metrics-writer", daemon=True)
        self._path = path
        self._inbox: queue.SimpleQueue[tuple[int, str] | None] = queue.SimpleQueue()
        self._writer: pq.ParquetWriter | None = None
        self._ts: list[int] = []
        self._names: list[str] = []
        self._labels: list[str] = []
        self._values: list[float] = []
        self._pending_scrapes = 0
        self.samples = 0
        self.parse_errors = 0
        self.last_error: str | None = None

    def put(self, ts_ns: int, text: str) -> None:
        self._inbox.put((ts_ns, text))

    def finish(self) -> None:
        """Flush and close the file (blocking: call from a thread)."""
        self._inbox.put(None)
        self.join()

    def run(self) -> None:
        # Parsing holds the interpreter lock for milliseconds per scrape, which would delay
        # the replay's event loop: keep the raw texts and parse them when the run is over,
        # unless they outgrow _DEFER_BYTES (then parse what is held, and go on holding).
        held: list[tuple[int, str]] = []
        held_bytes = 0
        try:
            while (item := self._inbox.get()) is not None:
                held.append(item)
                held_bytes += len(item[1])
                if held_bytes > _DEFER_BYTES:
                    self._ingest_all(held)
                    held, held_bytes = [], 0
            self._ingest_all(held)
            self._flush()
        finally:
            if self._writer is None:
                self._writer = pq.ParquetWriter(self._path, SERVER_METRICS_SCHEMA)
            self._writer.close()

    def _ingest_all(self, items: list[tuple[int, str]]) -> None:
        for ts_ns, text in items:
            self._ingest(ts_ns, text)
            if len(self._ts) >= _FLUSH_ROWS or self._pending_scrapes >= _FLUSH_SCRAPES:
                self._flush()

    def _ingest(self, ts_ns: int, text: str) -> None:
        try:
            rows = parse_exposition(text)
        except ValueError as exc:
            self.parse_errors += 1
            self.last_error = f"unparseable exposition: {exc}"[:300]
            return
        for name, labels, value in rows:
            if math.isnan(value):
                continue
            self._ts.append(ts_ns)
            self._names.append(name)
            self._labels.append(labels)
            self._values.append(value)
        self._pending_scrapes += 1

    def _flush(self) -> None:
        if not self._ts:
            return
        table = pa.table(
            [
                pa.array(self._ts, pa.int64()),
                pa.array(self._names, pa.string()),
                pa.array(self._labels, pa.string()),
                pa.array(self._values, pa.float64()),
            ],
            schema=SERVER_METRICS_SCHEMA,
        )
        if self._writer is None:
            self._writer = pq.ParquetWriter(self._path, SERVER_METRICS_SCHEMA)
        self._writer.write_table(table)
        self.samples += len(self._ts)
        self._ts, self._names, self._labels, self._values = [], [], [], []
        self._pending_scrapes = 0


class MetricsScraper:
    """Scrapes one URL at a fixed interval into ``server_metrics.parquet``.

    ``scrape_once()`` takes one sample set; ``run()`` scrapes on absolute deadlines
    (``start + k * interval``; missed ticks are skipped, not bunched) until ``stop()``,
    then takes a final one; ``aclose()`` flushes the file. One instance per run.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        config: ScrapeConfig,
        now_ns: Callable[[], int],
    ) -> None:
        self._http = http
        self._config = config
        self._now_ns = now_ns
        self._stop = asyncio.Event()
        self._writer = _Writer(config.out_path)
        self._writer.start()
        self.scrapes = 0
        self.errors = 0
        self.last_error: str | None = None
        self._timeout_s = config.timeout_s or min(max(config.interval_s, 0.5), 5.0)
        # Errors go into run.json: never with the credentials sent along.
        self._scrubber = Scrubber.of(headers=config.headers, urls=[config.url])

    async def scrape_once(self) -> bool:
        """One scrape; False (and counted) when the server did not answer with 200."""
        started = self._now_ns()
        try:
            async with asyncio.timeout(self._timeout_s):
                resp = await self._http.get(
                    self._config.url, headers={**self._config.headers, "accept": _ACCEPT}
                )
        except (httpx.HTTPError, httpx.InvalidURL, TimeoutError) as exc:
            return self._failed(f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc))
        ended = self._now_ns()
        if resp.status_code != 200:
            return self._failed(f"HTTP {resp.status_code}")
        self.scrapes += 1
        self._writer.put(started + (ended - started) // 2, resp.text)
        return True

    def _failed(self, why: str) -> bool:
        self.errors += 1
        self.last_error = self._scrubber.scrub(why)[:300]
        return False

    def stop(self) -> None:
        """Ask ``run()`` to take its final scrape and return."""
        self._stop.set()

    async def run(self) -> None:
        """Scrape every ``interval_s`` until ``stop()`` (or cancellation), then once more."""
        loop = asyncio.get_running_loop()
        interval = self._config.interval_s
        start = loop.time()
        k = 1
        while not self._stop.is_set():
            due = start + k * interval
            try:
                async with asyncio.timeout_at(due):
                    await self._stop.wait()
            except TimeoutError:
                await self.scrape_once()
                # Skip ticks the scrape overran, keeping the grid.
                k = max(k + 1, math.floor((loop.time() - start) / interval) + 1)
        await self.scrape_once()

    async def aclose(self) -> ScrapeReport:
        """Flush and close the Parquet file; what scraping did."""
        writer = self._writer
        await asyncio.to_thread(writer.finish)
        errors = self.errors + writer.parse_errors
        return ScrapeReport(
            url=redact_url(self._config.url),
            interval_s=self._config.interval_s,
            enabled=True,
            scrapes=self.scrapes,
            samples=writer.samples,
            errors=errors,
            last_error=self._scrubber.scrub_optional(writer.last_error or self.last_error),
            file=self._config.out_path.name,
        )


async def alongside(
    work: Callable[[], Awaitable[T]], config: ScrapeConfig | None, now_ns: Callable[[], int]
) -> tuple[T, ScrapeReport | None]:
    """Run ``work()`` while scraping per ``config`` (None: just run it).

    The first scrape happens before ``work`` starts. Without ``config.required``, a first
    scrape that fails or yields no samples turns scraping off (and no file is written).
    """
    if config is None:
        return await work(), None
    # The fast transport: httptools parses the exposition's HTTP framing in C, so a scrape
    # costs the event loop a fraction of what httpx's own transport would (measured: p99
    # schedule lag 4.6 ms with httpx's transport vs 1.8 ms without scraping).
    transport = FastTransport(now_ns, max_connections=2)
    async with httpx.AsyncClient(transport=transport, timeout=None, follow_redirects=True) as http:
        scraper = MetricsScraper(http, config, now_ns)
        if not await scraper.scrape_once() and not config.required:
            await scraper.aclose()
            config.out_path.unlink(missing_ok=True)
            return await work(), _off(config, f"{redact_url(config.url)}: {scraper.last_error}")
        # A task owned by this block rather than a TaskGroup: a TaskGroup would wrap the
        # replay's own errors (EndpointError, ...) in an ExceptionGroup.
        task = asyncio.create_task(scraper.run(), name="metrics-scraper")
        try:
            result = await work()
        finally:
            scraper.stop()
            try:
                await task
            finally:
                report = await scraper.aclose()
    if report.samples == 0 and not config.required:
        config.out_path.unlink(missing_ok=True)
        return result, _off(config, f"{report.url}: no samples ({report.last_error})")
    return result, report


def _off(config: ScrapeConfig, reason: str) -> ScrapeReport:
    return ScrapeReport(
        url=redact_url(config.url), interval_s=config.interval_s, enabled=False, reason=reason
    )
