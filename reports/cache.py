"""The prefix-cache comparison as text: expected (the trace's prefixes) against reported
cached tokens, token-weighted, and what the expectation rests on. One wording for the
console (``reports.tables``), the HTML page and the Markdown summary. Rendering only: the
numbers are ``analyzers.cache``'s and ``analyzers.metrics``'. Must not import loadgen.
"""

from __future__ import annotations

from analyzers.analysis import Analysis, ClassSummary
from analyzers.cache import CacheBasis
from reports import fmt


def compared_line(c: ClassSummary) -> str | None:
    """``expected X% of prompt tokens, reported Y%: reported/expected Z%`` over the requests
    with an expectation; None without any."""
    f, x = c.fidelity, c.fidelity.expected
    if x is None:
        return None
    reported = (
        f"reported {fmt.percent(x.observed_share)}"
        if f.cached_reported
        else "reported none (the server reports no cached tokens)"
    )
    ratio = (
        f"; reported / expected {fmt.percent(x.fidelity)} ({x.cached_tokens:,} of "
        f"{x.expected_tokens:,} tokens)"
        if f.cached_reported and x.fidelity is not None
        else ""
    )
    return (
        f"prefix cache (token-weighted, {x.requests:,} requests): expected "
        f"{fmt.percent(x.expected_share)} of prompt tokens, {reported}{ratio}"
    )


def basis_line(basis: CacheBasis) -> str:
    """Where the expected cached tokens come from, or why there are none."""
    if basis.unavailable is not None:
        return f"expected cached tokens: none ({basis.unavailable})"
    line = (
        f"expected cached tokens: trace {basis.trace} ({basis.trace_block_size} tokens per "
        f"prefix block id), KV block {basis.kv_block_size} tokens ({basis.kv_block_source})"
    )
    return line + (f"; {basis.note}" if basis.note else "")


def cache_lines(a: Analysis) -> list[str]:
    """The run's comparison and its basis ([] when the expectation was not asked for)."""
    if a.cache_basis is None:
        return []
    line = compared_line(a.overall)
    return [*([line] if line else []), basis_line(a.cache_basis)]
