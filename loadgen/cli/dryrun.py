"""Printing a ``--dry-run`` (``replay``, ``sweep``): what would be sent, from
``loadgen.run.dryrun``; nothing is sent and no directory is made."""

from __future__ import annotations

import click

from loadgen.run.dryrun import DryRun

BODY_CHARS = 2000
"""The first request's body is shown up to this many characters (a long prompt is cut)."""


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
        body = plan.first_body
        if len(body) > BODY_CHARS:
            body = f"{body[:BODY_CHARS]}... ({len(plan.first_body)} characters in all)"
        lines.append(f"first request: POST {plan.target.rstrip('/')}{plan.first_path}")
        lines.append(body)
    return lines


def echo_dry_run(plan: DryRun) -> None:
    """Print the dry run on stdout."""
    for line in dry_run_lines(plan):
        click.echo(line)
