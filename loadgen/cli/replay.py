"""``loadgen replay``: parse options, run a session with a live display, print the summary."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from loadgen.cli.echo import cli_console
from loadgen.cli.options.alias import deprecated_alias
from loadgen.cli.options.apis import api_options
from loadgen.cli.options.config import config_option, refuse_redacted, write_config
from loadgen.cli.options.loadmode import load_mode_options
from loadgen.cli.options.url import check_base_url, with_v1_hint
from loadgen.errors import ConfigError
from loadgen.prepare.ahead import DEFAULT_AHEAD_MIB
from loadgen.run.session import SessionOptions, SessionResult, run_session
from loadgen.stream.sse import DEFAULT_MAX_EVENT_BYTES, MIB


def parse_headers(values: tuple[str, ...]) -> dict[str, str]:
    """``Name: value`` pairs from repeated ``--header`` options."""
    out: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"--header {item!r}: expected 'Name: value'")
        out[name.strip()] = value.strip()
    return out


def default_run_dir(trace: Path) -> Path:
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{trace.stem}"


def run_with_display(opts: SessionOptions, *, progress: bool, console: Console) -> SessionResult:
    """Run a session under asyncio (uvloop when installed) with the progress display."""
    from loadgen.cli.progress import live_progress

    async def main() -> SessionResult:
        def notice(text: str) -> None:
            console.print(f"[yellow]warning:[/yellow] {text}")

        async with live_progress(console, enabled=progress) as feed:
            return await run_session(opts, on_start=feed.attach, on_notice=notice)

    try:
        import uvloop
    except ImportError:
        return asyncio.run(main())
    return uvloop.run(main())


def run_guarded(opts: SessionOptions, *, progress: bool, console: Console) -> SessionResult:
    """``run_with_display``; a run that fails before writing anything (a failed preflight)
    leaves no empty run directory behind, and an endpoint failure at a base URL without
    ``/v1`` says to add it."""
    from traces.errors import UserError

    existed = opts.run_dir.exists()
    try:
        return run_with_display(opts, progress=progress, console=console)
    except UserError as exc:
        if not existed:
            remove_if_empty(opts.run_dir)
        raise with_v1_hint(exc, opts.base_url) from exc.__cause__


def remove_if_empty(run_dir: Path) -> None:
    """Remove ``run_dir`` when it holds nothing but the run lock (it was made for this run)."""
    if not run_dir.is_dir():
        return
    entries = list(run_dir.iterdir())
    if all(e.is_file() and e.name == "run.lock" for e in entries):
        for e in entries:
            e.unlink(missing_ok=True)
        run_dir.rmdir()


def exit_if_interrupted(result: SessionResult) -> None:
    """A run stopped by Ctrl-C (or SIGTERM) exits 130 after its summary, with one stderr
    line: its rows so far are kept, and run.json says ``interrupted``."""
    if result.replay.stop_reason == "interrupted":
        click.echo(
            f"interrupted: {result.rows} rows kept in {result.run_dir} "
            "(run.json status 'interrupted'; requests cancelled in flight count as errors)",
            err=True,
        )
        click.get_current_context().exit(130)


def write_results(result: SessionResult) -> None:
    """``results.json`` in the run directory (loadgen.cli.results), after the run."""
    from loadgen.cli.results import write_run_results

    write_run_results(result.run_dir)


def print_summary(result: SessionResult, console: Console, *, explain: bool = False) -> None:
    """The end-of-run table (exact percentiles from Polars), validity, and where the run
    went; with ``explain`` (the demo), what each line means."""
    from analyzers.metrics import summarize
    from reports.console import summary_table, totals_lines

    summary = summarize(result.run_dir)
    console.print(summary_table(summary, title=f"Run {result.run_id} ({result.model})"))
    for line in totals_lines(summary):
        console.print(line)
    health = result.replay
    stamps = health.stamp_delay
    stamp = f"stamp delay p99 {stamps.p99_ms:.2f} ms, " if stamps and stamps.samples else ""
    console.print(
        f"generator: schedule lag p99 {health.schedule_lag.p99_ms:.2f} ms, "
        f"loop lag p99 {health.loop_lag.p99_ms:.2f} ms, {stamp}"
        f"CPU {health.cpu_utilisation:.0%} of a core"
    )
    if result.not_sent:
        console.print(
            f"{result.not_sent} requests of the schedule not sent (run ended: "
            f"{result.replay.stop_reason})"
        )
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    # The session already warned about a client-bound run; add the analyzers' other flags.
    for flag in summary.validity.flags:
        if flag.kind not in ("client_bound", "backpressure", "stall"):  # the session said these
            console.print(f"[yellow]warning:[/yellow] {flag.reason}")
    if explain:
        from reports.glossary import glossary_lines

        for line in glossary_lines():
            console.print(line, highlight=False)
    else:
        from reports.glossary import DOC

        console.print(f"what each line means: {DOC}", highlight=False)
    console.print(f"run written to {result.run_dir} (summary for scripts: results.json)")
    console.print(
        f"next: loadgen analyze {result.run_dir} (percentiles per class), "
        f"loadgen report {result.run_dir} (HTML)"
    )


@click.command()
@click.argument("trace", type=click.Path(path_type=Path, dir_okay=False))
@config_option
@click.option(
    "--base-url",
    default="http://127.0.0.1:8000/v1",
    show_default=True,
    callback=check_base_url,
    help="OpenAI-compatible base URL (ending in /v1).",
)
@click.option("--model", default=None, help="Model name to request [default: the first served].")
@click.option(
    "-o",
    "--out",
    "out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Run directory [default: runs/<time>-<trace>].",
)
@load_mode_options()
@click.option(
    "--max-rate",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Closed loop: ceiling on dispatches per second.",
)
@click.option(
    "--max-inflight",
    type=click.IntRange(min=1),
    default=None,
    help="Open loop: cap on requests in flight (lateness is recorded).",
)
@click.option(
    "--max-requests",
    type=click.IntRange(min=1),
    default=None,
    help="Replay at most this many requests of the trace.",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Stop dispatching after this many seconds: later requests are not sent (run.json "
    "counts them), rows still in flight are flagged drain.",
)
@click.option(
    "--warmup-requests",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Flag the first N requests as warm-up (excluded from summaries).",
)
@deprecated_alias("--warmup", "--warmup-requests", "warmup_requests", type_=click.IntRange(min=0))
@click.option(
    "--warmup-time",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Flag requests due in the first SECONDS as warm-up (excluded from summaries).",
)
@click.option(
    "--sessions",
    "session_mode",
    type=click.Choice(["open", "closed"]),
    default="open",
    show_default=True,
    help="open: every turn at its trace time; closed: a turn is due at the later of its "
    "trace time and its parent's end plus think time (think_s).",
)
@click.option(
    "--max-sessions",
    type=click.IntRange(min=1),
    default=None,
    help="--sessions closed: cap on sessions in progress (a new one waits; lateness is recorded).",
)
@click.option(
    "--history",
    type=click.Choice(["trace", "live"]),
    default="trace",
    show_default=True,
    help="--sessions closed: trace: each turn's history as the trace gives it (exact "
    "replay); live: the server's own replies as the history.",
)
@click.option(
    "--start-offset",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Enter each session SECONDS into it: earlier turns are not sent, the rest move "
    "back to the session's start (with --duration: steady state for N seconds).",
)
@click.option(
    "--request-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    help="Per-request deadline in seconds.",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Seconds in-flight requests may finish after Ctrl-C before cancellation.",
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="'NAME: VALUE'",
    help="Extra HTTP header (repeatable).",
)
@click.option(
    "--api-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    help="Environment variable holding the API key (never written anywhere).",
)
@click.option("--no-preflight", is_flag=True, help="Skip the endpoint probe (requires --model).")
@click.option(
    "--prompt-seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the synthetic prompt text.",
)
@click.option("--overwrite", is_flag=True, help="Reuse a non-empty run directory.")
@click.option("--no-progress", is_flag=True, help="No live display.")
@click.option("--run-id", default=None, help="Run id [default: time plus random suffix].")
@click.option(
    "--transport",
    type=click.Choice(["fast", "httpx"]),
    default="fast",
    show_default=True,
    help="fast: asyncio + httptools HTTP/1.1; httpx: httpx's own (proxies; HTTP/2 with --http2).",
)
@click.option(
    "--http2",
    is_flag=True,
    help="HTTP/2 (--transport httpx only; pip install 'llm-loadgen[http2]').",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1, max=64),
    default=1,
    show_default=True,
    help="Processes, each replaying every N-th request from one start time.",
)
@click.option(
    "--scrape-metrics",
    "scrape_url",
    default=None,
    metavar="URL",
    help="Prometheus endpoint to scrape during the run [default: the endpoint's /metrics, "
    "when it answers].",
)
@click.option(
    "--no-scrape-metrics",
    is_flag=True,
    help="Do not scrape Prometheus metrics (no server_metrics.parquet).",
)
@click.option(
    "--scrape-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Seconds between Prometheus scrapes.",
)
@click.option(
    "--ray",
    "ray_address",
    default=None,
    metavar="local|auto|ADDRESS",
    help="Run the --workers shards as Ray tasks, spread over the cluster's nodes (pip "
    "install 'llm-loadgen[ray]'); run.json names each shard's node.",
)
@click.option(
    "--tokenizer",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="The server's tokenizer.json: prompts of exact token counts (needs 'tokenizers').",
)
@click.option(
    "--calibrate-prompts",
    is_flag=True,
    help="Measure the server's tokens per word first and size prompts with it.",
)
@click.option(
    "--template-tokens",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Tokens the server's chat template adds to a chat prompt.",
)
@click.option(
    "--max-event-mib",
    type=click.IntRange(min=1, max=4096),
    default=DEFAULT_MAX_EVENT_BYTES // MIB,
    show_default=True,
    help="Longest SSE event a response may send (MiB; a whole 1M-token response fits); "
    "a longer one makes the request a protocol_error and its body is not read further.",
)
@click.option(
    "--prepare-ahead-mib",
    type=click.IntRange(min=0),
    default=DEFAULT_AHEAD_MIB,
    show_default=True,
    help="When the trace has images or prompts of 16,384+ tokens, their bodies are built "
    "ahead of their due times in a process of their own, at most this many MiB ahead of "
    "what the replay has taken (the replay holds up to 64 MiB more, ready to send); 0 "
    "builds every body on the event loop. Ordinary traces start no such process.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be sent (request count, schedule, classes, the first request's "
    "body, secrets redacted) and exit 0: no connection, no run directory.",
)
@api_options()
def replay(
    trace: Path,
    base_url: str,
    model: str | None,
    out: Path | None,
    concurrency: int | None,
    time_scale: float | None,
    rate: float | None,
    max_rate: float | None,
    max_inflight: int | None,
    max_requests: int | None,
    duration: float | None,
    warmup_requests: int,
    warmup_time: float | None,
    session_mode: str,
    max_sessions: int | None,
    history: str,
    start_offset: float | None,
    request_timeout: float,
    grace: float,
    headers: tuple[str, ...],
    api_key_env: str,
    no_preflight: bool,
    prompt_seed: int,
    overwrite: bool,
    no_progress: bool,
    run_id: str | None,
    transport: str,
    workers: int,
    ray_address: str | None,
    tokenizer: Path | None,
    calibrate_prompts: bool,
    template_tokens: int,
    scrape_url: str | None,
    no_scrape_metrics: bool,
    scrape_interval: float,
    max_event_mib: int,
    prepare_ahead_mib: int,
    http2: bool,
    extra_body: dict[str, Any] | None,
    no_stream: bool,
    dry_run: bool,
    api: str | None,
    embed_batch: int,
) -> None:
    """Replay TRACE against an OpenAI-compatible endpoint and record every token's arrival.

    Open loop by default, at the trace's own timestamps (--time-scale, --rate to rescale);
    closed loop with --concurrency; closed-loop sessions (each turn after its parent's
    reply) with --sessions closed. Writes requests.parquet, run.json, results.json and
    config.toml (the resolved options) to the run directory, and server_metrics.parquet
    when the server exposes Prometheus metrics. Options can come from a TOML file
    (--config; flags given as well win): RUN/config.toml replays a run again.

    \b
    Examples:
      loadgen replay trace.parquet --base-url http://127.0.0.1:8000/v1 -o runs/r1
      loadgen replay trace.parquet --concurrency 32
      loadgen replay trace.parquet --time-scale 0.5
      loadgen replay trace.parquet --extra-body '{"temperature": 0, "seed": 1}'
      loadgen replay trace.parquet --no-stream     # TGI: joins its x-*-time headers
      loadgen replay trace.parquet --transport httpx --http2
      loadgen replay --config run.toml --rate 8         # the file's options, --rate 8
      loadgen replay --config runs/r1/config.toml -o runs/r2   # runs/r1 again
      loadgen replay trace.parquet --dry-run            # what would be sent; sends nothing
      loadgen replay agents.parquet --sessions closed --max-sessions 64
      loadgen replay chats.parquet --sessions closed --history live
      loadgen replay agents.parquet --sessions closed --start-offset 600 --duration 300 \\
          --warmup-time 30
      loadgen replay trace.parquet --api responses
      loadgen replay trace.parquet --api embeddings --embed-batch 8
      loadgen replay trace.parquet --workers 6 --ray HEAD:6379   # one shard per node
      loadgen replay images.parquet --prepare-ahead-mib 64   # bodies built <= 64 MiB ahead
    """
    refuse_redacted(click.get_current_context())
    opts = SessionOptions(
        trace_path=trace,
        run_dir=out or default_run_dir(trace),
        base_url=base_url,
        model=model,
        concurrency=concurrency,
        time_scale=time_scale,
        rate=rate,
        max_rate=max_rate,
        max_inflight=max_inflight,
        max_requests=max_requests,
        duration_s=duration,
        warmup_requests=warmup_requests,
        warmup_s=warmup_time,
        sessions=session_mode,
        max_sessions=max_sessions,
        history=history,
        start_offset_s=start_offset,
        request_timeout_s=request_timeout,
        grace_s=grace,
        headers=parse_headers(headers),
        api_key=os.environ.get(api_key_env) or None,
        preflight=not no_preflight,
        prompt_seed=prompt_seed,
        overwrite=overwrite,
        run_id=run_id,
        transport=transport,
        workers=workers,
        ray=ray_address,
        tokenizer=tokenizer,
        calibrate_prompts=calibrate_prompts,
        template_tokens=template_tokens,
        scrape_metrics=not no_scrape_metrics,
        scrape_url=scrape_url,
        scrape_interval_s=scrape_interval,
        max_event_bytes=max_event_mib * MIB,
        prepare_ahead_mib=prepare_ahead_mib,
        http2=http2,
        extra_body=extra_body,
        stream=not no_stream,
        api=api,
        embed_batch=embed_batch,
    )
    if dry_run:
        from loadgen.cli.dryrun import echo_dry_run
        from loadgen.run.dryrun import plan_dry_run

        echo_dry_run(plan_dry_run(opts))
        return
    console = cli_console(stderr=False)
    result = run_guarded(opts, progress=not no_progress and console.is_terminal, console=console)
    write_config(click.get_current_context(), result.run_dir)
    write_results(result)
    print_summary(result, console)
    exit_if_interrupted(result)
