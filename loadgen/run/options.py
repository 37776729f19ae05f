"""What a replay session is asked to do: ``SessionOptions``, checked once, and the trace
it replays. Secrets never leave this object: ``public_config`` is what run.json records.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from loadgen.errors import ConfigError
from loadgen.http.headers import header_problem
from loadgen.openai.bodies import extra_body_problem
from loadgen.prepare.ahead import DEFAULT_AHEAD_MIB
from loadgen.redact import Scrubber, basic_authorization, redact_headers, redact_url
from loadgen.run.scrape import DEFAULT_INTERVAL_S
from loadgen.sessions import enter_sessions
from loadgen.stream.sse import DEFAULT_MAX_EVENT_BYTES
from traces.io import read_metadata, read_trace
from traces.records import TraceRequest
from traces.runinfo import RunConfig
from traces.schema import APIS
from traces.values import ID_CHARS, id_problem

TRANSPORTS = ("fast", "httpx")
SESSION_MODES = ("open", "closed")
HISTORIES = ("trace", "live")


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionOptions:
    """Everything a replay session needs; secrets stay out of ``run.json``."""

    trace_path: Path
    run_dir: Path
    base_url: str
    model: str | None = None
    concurrency: int | None = None
    time_scale: float | None = None
    rate: float | None = None
    max_rate: float | None = None
    max_inflight: int | None = None
    max_requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    request_timeout_s: float = 600.0
    grace_s: float = 5.0
    headers: Mapping[str, str] = field(default_factory=dict)
    api_key: str | None = None
    preflight: bool = True
    prompt_seed: int = 0
    overwrite: bool = False
    run_id: str | None = None
    transport: str = "fast"
    """``fast`` (asyncio.Protocol + httptools) or ``httpx`` (httpx's own, stamped)."""
    workers: int = 1
    """Processes, each replaying ``index % workers == k`` (sessions kept whole)."""
    ray: str | None = None
    """Run the shards as Ray tasks: ``local``, ``auto`` or a cluster address."""
    tokenizer: Path | None = None
    """A local ``tokenizer.json`` (the server's): prompts of exact token counts."""
    calibrate_prompts: bool = False
    """Measure the server's tokens per word first, and size prompt text with it."""
    template_tokens: int = 0
    """Tokens the server's chat template adds to a chat prompt (subtracted from its text)."""
    scrape_metrics: bool = True
    """Scrape Prometheus metrics during the run into server_metrics.parquet."""
    scrape_url: str | None = None
    """What to scrape; None: the endpoint's ``/metrics``, when it answers."""
    scrape_interval_s: float = DEFAULT_INTERVAL_S
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    """The longest SSE event a response may send; a longer one makes the request a
    ``protocol_error`` and the rest of its body is not read (``loadgen.stream.sse``)."""
    extra_body: Mapping[str, Any] | None = None
    """``--extra-body``: fields merged into every request body (``loadgen.openai.bodies``)."""
    stream: bool = True
    """False with ``--no-stream``: one JSON response per request (no TTFT, no ITL)."""
    http2: bool = False
    """``--http2``: HTTP/2 with ``--transport httpx`` (needs the ``h2`` package)."""
    sessions: str = "open"
    """``open``: every turn at its trace time; ``closed``: a turn is due at the later of its
    trace time and its parent's end plus think time (``loadgen.sessions``)."""
    max_sessions: int | None = None
    """Closed sessions: cap on sessions in progress (a session waits to start)."""
    history: str = "trace"
    """Closed sessions: ``trace`` (the trace's history, exact replay) or ``live`` (the
    server's replies, ``loadgen.history``)."""
    start_offset_s: float | None = None
    """Enter each session this many seconds into it (earlier turns are not sent)."""
    warmup_s: float | None = None
    """Flag requests due in the first this many seconds as warm-up."""
    api: str | None = None
    """Send every request to this API (``traces.schema.APIS``); None: each row's own."""
    embed_batch: int = 1
    """Inputs per embeddings request: each row's prompt cut into this many items."""
    prepare_ahead_mib: int = DEFAULT_AHEAD_MIB
    """Bodies built ahead off the loop and not yet sent, at most (MiB), when the trace has
    images or huge prompts (``loadgen.prepare.ahead``); 0: every body built on the loop."""

    def request_headers(self) -> dict[str, str]:
        """The headers every request to the endpoint carries: ``--header`` values and the
        credential. Precedence: ``--api-key`` (``Authorization: Bearer KEY``), then an
        ``Authorization`` given with ``--header``, then the user info of ``--base-url``
        (``http://user:pass@host/v1``: ``Authorization: Basic base64(user:pass)``)."""
        headers = dict(self.headers)
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        elif not any(name.lower() == "authorization" for name in headers):
            basic = basic_authorization(self.base_url)
            if basic is not None:
                headers["authorization"] = basic
        return headers

    def http2_mode(self) -> str | None:
        """httpx's HTTP/2 mode for ``--http2`` (None: HTTP/1.1): prior knowledge (h2c)
        for an ``http://`` base URL, where nothing negotiates it; ALPN for ``https://``."""
        if not self.http2:
            return None
        return "alpn" if self.base_url.startswith("https://") else "prior-knowledge"

    def scrubber(self) -> Scrubber:
        """The run's secrets (the API key, credential headers, the URLs' user info and the
        Basic credential made of it), to take out of whatever is stored or printed."""
        urls = [self.base_url] + ([self.scrape_url] if self.scrape_url is not None else [])
        return Scrubber.of(headers=self.request_headers(), urls=urls, values=[self.api_key])

    def public_config(self) -> RunConfig:
        """The options as recorded in run.json: no API key, credentials redacted (header
        values, and the user info of the URLs)."""
        cfg: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            cfg[f.name] = str(value) if isinstance(value, Path) else value
        del cfg["api_key"]
        cfg["headers"] = redact_headers(self.headers)
        cfg["base_url"] = redact_url(self.base_url)
        if self.scrape_url is not None:
            cfg["scrape_url"] = redact_url(self.scrape_url)
        # An option added here and not to RunConfig fails every replay with a TypeError:
        # run.json is a contract, and tests/loadgen/test_runinfo.py pins the two together.
        return RunConfig(**cfg, api_key_set=self.api_key is not None)


def load_requests(opts: SessionOptions) -> tuple[list[TraceRequest], dict[str, Any]]:
    """The trace's requests (cut to ``max_requests``, then entered ``start_offset_s`` into
    each session) and its provenance metadata."""
    return load_schedule(opts).requests, read_metadata(opts.trace_path)


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """The requests a replay sends, and how many of the trace's it skipped."""

    requests: list[TraceRequest]
    skipped: int = 0


def load_schedule(opts: SessionOptions) -> Schedule:
    """``load_requests``' requests with the count ``start_offset_s`` skipped."""
    requests = with_api(read_trace(opts.trace_path), opts.api)
    if opts.max_requests is not None:
        requests = requests[: opts.max_requests]
    if opts.start_offset_s is None:
        return Schedule(requests=requests)
    kept = enter_sessions(requests, opts.start_offset_s)
    if not kept:
        raise ConfigError(
            f"--start-offset {opts.start_offset_s:g}: no request is left (every session is "
            "shorter than the offset)"
        )
    return Schedule(requests=kept, skipped=len(requests) - len(kept))


def with_api(requests: list[TraceRequest], api: str | None) -> list[TraceRequest]:
    """``requests``, each sent to ``api`` (``--api``) when one is given."""
    if api is None:
        return requests
    if api not in APIS:
        raise ConfigError(f"--api {api}: expected one of {', '.join(sorted(APIS))}")
    return [r if r.api == api else replace(r, api=api) for r in requests]


def _header_problem(name: str, value: str) -> str | None:
    """Why a header cannot be sent as given, or None; never quotes the value (it may be a
    credential)."""
    for what, text in (("name", name), ("value", value)):
        if not text.isascii():
            pos = next(i for i, c in enumerate(text) if not c.isascii())
            return f"character {pos} of its {what} is not ASCII, which HTTP headers cannot carry"
    return header_problem(name.encode("ascii"), value.encode("ascii"))


def check_wire_values(opts: SessionOptions) -> None:
    """Refuse what would reach every request's head and cannot be sent as given: the run id
    (the prefix of each ``X-Request-Id``), ``--header`` names and values, the API key. A
    CR, LF or NUL there would end a header early and inject what follows."""
    if opts.run_id is not None:
        problem = id_problem(opts.run_id)
        if problem is not None:
            raise ConfigError(
                f"--run-id {opts.run_id[:60]!r} {problem}: it prefixes every X-Request-Id, "
                f"which takes {ID_CHARS} only"
            )
    for name, value in opts.headers.items():
        problem = _header_problem(name, value)
        if problem is not None:
            raise ConfigError(f"--header {name[:40]!r}: {problem}")
    if opts.api_key is not None:
        problem = _header_problem("authorization", f"Bearer {opts.api_key}")
        if problem is not None:
            raise ConfigError(
                "the API key cannot be sent in an HTTP header (a control character or a "
                "character beyond ASCII): check the environment variable that holds it"
            )


def check_options(opts: SessionOptions) -> None:
    check_wire_values(opts)
    if opts.concurrency is not None and (opts.time_scale is not None or opts.rate is not None):
        raise ConfigError(
            "--concurrency (closed loop) cannot be combined with --time-scale or --rate"
        )
    if opts.max_rate is not None and opts.concurrency is None:
        raise ConfigError("--max-rate applies to closed loop only (use --rate for open loop)")
    if opts.transport not in TRANSPORTS:
        raise ConfigError(
            f"--transport {opts.transport!r}: expected one of {', '.join(TRANSPORTS)}"
        )
    if opts.tokenizer is not None and opts.calibrate_prompts:
        raise ConfigError("give either --tokenizer or --calibrate-prompts, not both")
    if opts.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {opts.workers}")
    if opts.max_event_bytes < 1:
        raise ConfigError(f"--max-event-mib must be positive, got {opts.max_event_bytes} bytes")
    if opts.prepare_ahead_mib < 0:
        raise ConfigError(f"--prepare-ahead-mib must be 0 or more, got {opts.prepare_ahead_mib}")
    if opts.extra_body is not None:
        problem = extra_body_problem(opts.extra_body)
        if problem is not None:
            raise ConfigError(f"--extra-body {problem}")
    if opts.http2 and opts.transport != "httpx":
        raise ConfigError("--http2 needs --transport httpx (the fast transport is HTTP/1.1)")
    if opts.http2 and importlib.util.find_spec("h2") is None:
        raise ConfigError("--http2 needs the h2 package: pip install 'llm-loadgen[http2]'")
    if not opts.scrape_interval_s > 0:
        raise ConfigError(f"--scrape-interval must be positive, got {opts.scrape_interval_s}")
    if opts.scrape_url is not None and not opts.scrape_url.startswith(("http://", "https://")):
        raise ConfigError(f"--scrape-metrics {opts.scrape_url!r}: expected an http(s) URL")
    if opts.sessions not in SESSION_MODES:
        raise ConfigError(
            f"--sessions {opts.sessions!r}: expected one of {', '.join(SESSION_MODES)}"
        )
    if opts.sessions == "closed" and opts.concurrency is not None:
        raise ConfigError("--sessions closed is an open-loop schedule: drop --concurrency")
    if opts.history not in HISTORIES:
        raise ConfigError(f"--history {opts.history!r}: expected one of {', '.join(HISTORIES)}")
    if opts.history == "live" and opts.sessions != "closed":
        raise ConfigError(
            "--history live needs --sessions closed: a turn cannot carry a reply it is sent before"
        )
    if opts.sessions == "closed" and opts.max_inflight is not None:
        raise ConfigError(
            "--max-inflight caps requests of an open loop; closed sessions cap sessions "
            "(--max-sessions)"
        )
    if opts.max_sessions is not None and opts.sessions != "closed":
        raise ConfigError("--max-sessions applies to --sessions closed only")
    if opts.max_sessions is not None and opts.max_sessions < opts.workers:
        raise ConfigError(
            f"--max-sessions {opts.max_sessions} is below --workers {opts.workers}: "
            "every worker needs at least one session"
        )
    for name, value in (("--start-offset", opts.start_offset_s), ("--warmup-time", opts.warmup_s)):
        if value is not None and not 0 <= value < float("inf"):
            raise ConfigError(f"{name} must be a finite number of seconds >= 0, got {value}")
    if opts.concurrency is not None and opts.concurrency < opts.workers:
        raise ConfigError(
            f"--concurrency {opts.concurrency} is below --workers {opts.workers}: "
            "every worker needs at least one slot"
        )
