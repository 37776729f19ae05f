"""``--dry-run``: what a replay would send, worked out without a connection and without a
run directory: the request count, the schedule (its span and mean rate after the time
factor, or the concurrency), the classes of requests, and the first request as it would
go out (path and JSON body), its secrets redacted, at a base URL shown without user info.

The preflight does not run, so the body names ``--model`` or a placeholder for the
endpoint's first model, and carries the optional fields a ``--no-preflight`` run assumes
the endpoint takes (``stream_options``, ``ignore_eos``, ``min_tokens``; a preflight drops
those an endpoint refuses); prompts are sized by words (or ``--tokenizer``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from loadgen.openai.bodies import endpoint_path
from loadgen.prepare.preparer import Preparer
from loadgen.redact import redact_headers, redact_url
from loadgen.run.options import SessionOptions, check_options, load_requests
from loadgen.run.shard import PromptPlan, prompt_maker
from loadgen.schedule import check_span, mean_rate, time_factor
from traces.runinfo import Capabilities
from traces.validate import block_size_of

PLACEHOLDER_MODEL = "<the endpoint's first model>"
"""The model a dry run names when ``--model`` is not given (the preflight would ask)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DryRun:
    """What a replay with these options would send."""

    target: str
    """The base URL, user info and credential query values redacted."""
    requests: int
    mode: str
    """``open`` (the trace's timestamps times ``time_factor``) or ``closed``."""
    time_factor: float
    span_s: float
    """Seconds from the first request's due time to the last's (open loop)."""
    mean_rate: float | None
    """Requests per second over the span (open loop), None when undefined."""
    concurrency: int | None
    classes: tuple[tuple[str, int], ...]
    """Request counts per ``workload/api`` class, most first."""
    first_path: str | None
    first_body: str | None
    """The first request's JSON body as it would be sent, secrets redacted."""
    headers: tuple[tuple[str, str], ...]
    """The headers every request carries, credential values redacted."""
    model: str
    warmup_requests: int


def plan_dry_run(opts: SessionOptions) -> DryRun:
    """Check the options, read the trace and build the first request; sends nothing."""
    check_options(opts)
    requests, meta = load_requests(opts)
    block_size = block_size_of(meta, str(opts.trace_path))
    arrivals = [r.arrival_s for r in requests]
    factor = time_factor(arrivals, time_scale=opts.time_scale, rate=opts.rate)
    check_span(arrivals, factor)
    closed = opts.concurrency is not None
    span = (arrivals[-1] - arrivals[0]) * factor if len(arrivals) > 1 else 0.0
    rate = mean_rate(arrivals)
    model = opts.model or PLACEHOLDER_MODEL
    first_path = first_body = None
    scrubber = opts.scrubber()
    if requests:
        preparer = Preparer(
            prompts=prompt_maker(
                opts, block_size, PromptPlan(template_tokens=opts.template_tokens)
            ),
            model=model,
            run_id=opts.run_id or "dry-run",
            capabilities=Capabilities(),
            warmup_requests=opts.warmup_requests,
            extra_body=opts.extra_body,
            stream=opts.stream,
        )
        first = preparer.prepare(requests[0], 0)
        first_path = endpoint_path(requests[0].api)
        first_body = scrubber.scrub(bytes(first.body).decode("utf-8"))
    classes = Counter(f"{r.workload}/{r.api}" for r in requests)
    return DryRun(
        target=redact_url(opts.base_url),
        requests=len(requests),
        mode="closed" if closed else "open",
        time_factor=factor,
        span_s=0.0 if closed else span,
        mean_rate=None if closed or rate is None or factor <= 0 else rate / factor,
        concurrency=opts.concurrency,
        classes=tuple(classes.most_common()),
        first_path=first_path,
        first_body=first_body,
        headers=tuple(sorted(redact_headers(opts.request_headers()).items())),
        model=model,
        warmup_requests=min(opts.warmup_requests, len(requests)),
    )
