"""``loadgen server-metrics RUN``: what the server said about itself during a run.

Prints the running / waiting / KV-usage gauges (mean, max, and a per-interval timeline) from
``server_metrics.parquet``, and the cross-checks of the TTFT decomposition: the mean
server-side queue time from the queue histogram against the requests' queue, and the
server's total prefill time against the sum of per-request prefill. A thin command over
``analyzers.server_metrics``; errors are one stderr line with the error's exit code (3: the
run has no server metrics). Must not import loadgen or httpx.
"""

from __future__ import annotations

from pathlib import Path

import click

from loadgen.cli.options.output import json_option
from loadgen.cli.options.runpath import RUN_PATH
from reports import fmt


@click.command(name="server-metrics")
@click.argument("run", type=RUN_PATH)
@click.option(
    "--bucket",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Seconds per timeline row (the max within each).",
)
@click.option(
    "--rows",
    type=click.IntRange(min=0),
    default=30,
    show_default=True,
    help="Timeline rows to print at most (0: none).",
)
@json_option
def server_metrics(run: Path, bucket: float, rows: int, as_json: bool) -> None:
    """Queue depth, running requests and KV-cache usage the server reported during RUN,
    and how its queue and prefill totals compare with the per-request decomposition.

    \b
    Examples:
      loadgen server-metrics runs/r1
      loadgen server-metrics runs/r1 --bucket 5 --rows 0
      loadgen server-metrics runs/r1 --json | jq .queue
    """
    from analyzers.server_metrics import summarize_server_metrics, timeline
    from loadgen.cli.runstatus import refuse_newer
    from traces.errors import UserError

    try:
        refuse_newer(run)
        summary = summarize_server_metrics(run)
        table = timeline(run, bucket_s=bucket)
    except UserError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(exc.exit_code) from exc
    if as_json:
        from loadgen.cli.echo import echo_json
        from reports.jsondoc import server_metrics_json

        echo_json(server_metrics_json(summary, table.iter_rows()))
        return
    click.echo(
        f"{summary.samples} samples from {summary.scrapes} scrapes over {summary.duration_s:.1f} s"
    )
    for label, stats, digits in (
        ("running", summary.running, 1),
        ("waiting", summary.waiting, 1),
        ("kv usage", summary.kv_usage, 3),
    ):
        if stats is None:
            click.echo(f"{label:>9}: not exposed")
        else:
            click.echo(
                f"{label:>9}: mean {stats.mean:.{digits}f}, max {stats.max:.{digits}f} "
                f"({stats.name})"
            )
    q = summary.queue
    if q.histogram is not None:
        click.echo(
            f"queue (histogram {q.histogram}): "
            f"{fmt.fixed(q.histogram_mean_ms, '.1f', ' ms')} mean over "
            f"{fmt.fixed(q.histogram_requests, '.0f')} requests"
        )
    else:
        click.echo("queue (histogram): not exposed")
    click.echo(
        f"queue (requests): reported {fmt.fixed(q.reported_mean_ms, '.1f', ' ms')}, "
        f"remainder after server prefill {fmt.fixed(q.remainder_mean_ms, '.1f', ' ms')} mean"
    )
    p = summary.prefill
    if p is not None:
        click.echo(
            f"prefill total: {p.counter_total_ms:.1f} ms by {p.counter}, "
            f"{fmt.fixed(p.requests_total_ms, '.1f', ' ms')} by the requests' server_prefill_ms"
        )
    if rows and table.height:
        click.echo("")
        click.echo(f"{'t (s)':>8} {'running':>8} {'waiting':>8} {'kv usage':>9}")
        for t_s, running, waiting, kv in table.head(rows).iter_rows():
            click.echo(
                f"{t_s:>8.1f} {fmt.fixed(running, '.0f'):>8} {fmt.fixed(waiting, '.0f'):>8} "
                f"{fmt.fixed(kv, '.3f'):>9}"
            )
        if table.height > rows:
            click.echo(f"... {table.height - rows} more rows (--rows, --bucket)")
