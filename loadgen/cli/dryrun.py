"""Printing a ``--dry-run`` (``replay``, ``sweep``): what would be sent, from
``loadgen.run.dryrun``; nothing is sent and no directory is made."""

from __future__ import annotations

import json
from typing import Any

import click

from loadgen.run.dryrun import DryRun

TEXT_CHARS = 200
"""A string in the first request's body (a prompt) is shown up to this many characters."""


def _shortened(value: Any) -> Any:
    """A JSON value with every long string cut to ``TEXT_CHARS`` (saying how long it was)."""
    if isinstance(value, str) and len(value) > TEXT_CHARS:
        return f"{value[:TEXT_CHARS]}... ({len(value)} characters)"
    if isinstance(value, dict):
        return {k: _shortened(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shortened(v) for v in value]
    return value


def shown_body(body: str) -> str:
    """The body as compact JSON with its long strings cut; every field stays visible."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body[: TEXT_CHARS * 10]
    return json.dumps(_shortened(parsed), separators=(",", ":"), ensure_ascii=False)


def dry_run_lines(plan: DryRun) -> list[str]:
    """The dry run as lines of text."""
    if plan.mode == "closed":
        schedule = f"closed loop, {plan.concurrency} in flight"
    else:
        rate = f", mean {plan.mean_rate:.3g} req/s" if plan.mean_rate is not None else ""
        schedule = (
            f"open loop, time factor {plan.time_factor:.4g}, "
            f"schedule spans {plan.span_s:.3g} s{rate}"
        )
    classes = ", ".join(f"{name} {count}" for name, count in plan.classes) or "none"
    lines = [
        "dry run: nothing sent, no run directory made",
        f"target: {plan.target} (model {plan.model})",
        f"requests: {plan.requests} ({schedule}; the first {plan.warmup_requests} warm-up)",
        f"classes: {classes}",
    ]
    if plan.headers:
        lines.append("headers: " + ", ".join(f"{k}: {v}" for k, v in plan.headers))
    if plan.first_body is not None:
        body = shown_body(plan.first_body)
        lines.append(f"first request: POST {plan.target.rstrip('/')}{plan.first_path}")
        lines.append(body)
    return lines


def echo_dry_run(plan: DryRun) -> None:
    """Print the dry run on stdout."""
    for line in dry_run_lines(plan):
        click.echo(line)
