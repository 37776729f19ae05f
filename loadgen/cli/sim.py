"""The ``loadgen sim`` command: parse options into a SimConfig and serve.

Thin by design: validation lives in click types and SimConfig; serving in
:mod:`loadgen.sim.server`. Bad options exit 2 with one line on stderr. Must not import the
replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import errno
from typing import Any

import click

from loadgen.cli.options.config import config_option
from loadgen.cli.options.engine import engine_config, engine_options, pop_engine_options
from loadgen.errors import ConfigError
from loadgen.sim.config import DEFAULT_MODEL_NAME, DEFAULT_PORT, SimConfig

_RATE = click.FloatRange(0.0, 1.0)
_MS = click.FloatRange(0.0, max_open=False)


class _OptionError(click.ClickException, ConfigError):
    """A bad option, shown as one ``Error: ...`` line (no usage block), exit status 2.

    A ``ConfigError`` like any other, rendered by click: ``python -m loadgen.cli.sim`` (how
    ``loadgen.sim.launch`` starts the simulator) has no root group to print our errors."""

    exit_code = 2


class _OneLineErrors(click.Command):
    """A command whose usage errors print one line instead of usage + hint + message."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _OptionError(exc.format_message()) from exc


@click.command(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@config_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="TCP port; 0 picks a free one (see the READY line).",
)
@click.option(
    "--served-model-name",
    default=DEFAULT_MODEL_NAME,
    show_default=True,
    help="Model name served at /v1/models and required in requests (when they name one).",
)
@click.option(
    "--ttft-ms", type=_MS, default=20.0, show_default=True, help="Fixed time to first token."
)
@click.option(
    "--prefill-us-per-token",
    type=_MS,
    default=0.0,
    show_default=True,
    help="Extra time to first token per prompt token, in microseconds.",
)
@click.option("--itl-ms", type=_MS, default=10.0, show_default=True, help="Inter-token latency.")
@click.option(
    "--tokens-per-chunk",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Tokens per streamed content chunk; chunks come every itl-ms x this.",
)
@click.option(
    "--image-tokens",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Prompt tokens counted per image_url content part.",
)
@click.option(
    "--error-rate", type=_RATE, default=0.0, show_default=True, help="Share answered 500."
)
@click.option("--rate-429", type=_RATE, default=0.0, show_default=True, help="Share answered 429.")
@click.option(
    "--drop-rate",
    type=_RATE,
    default=0.0,
    show_default=True,
    help="Share whose connection drops after half of max_tokens.",
)
@click.option(
    "--stall-rate", type=_RATE, default=0.0, show_default=True, help="Share that stall mid-stream."
)
@click.option("--stall-ms", type=_MS, default=500.0, show_default=True, help="Length of a stall.")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the per-request fault draws."
)
@click.option(
    "--loading-s",
    type=_MS,
    default=0.0,
    show_default=True,
    help="Answer 503 (model loading, Retry-After: 1) for this long after start.",
)
@click.option(
    "--malformed-rate",
    type=_RATE,
    default=0.0,
    show_default=True,
    help="Share whose stream gets one chunk that is not valid JSON.",
)
@click.option(
    "--accept-delay-ms",
    type=_MS,
    default=0.0,
    show_default=True,
    help="Slow accept: hold a request this long before reading it.",
)
@click.option(
    "--accept-delay-rate",
    type=_RATE,
    default=1.0,
    show_default=True,
    help="Share of requests held by --accept-delay-ms.",
)
@click.option(
    "--frontend-ms",
    type=_MS,
    default=0.0,
    show_default=True,
    help="With --model: a front end on the engine's core, ms a request (as vLLM's API server "
    "beside a CPU-served engine; loadgen plan calibrate RUN prints it): requests pass it one "
    "at a time and the engine loses --frontend-share of its time.",
)
@click.option(
    "--frontend-share",
    type=_RATE,
    default=1.0,
    show_default=True,
    help="With --frontend-ms: the share of the front end's time its engine loses (1: the "
    "engine stops; 0.5: half speed; loadgen plan calibrate prints it from prefills that "
    "requests arrived during).",
)
@click.option(
    "--tgi-headers",
    is_flag=True,
    help="Non-streamed replies carry TGI's x-queue-time/x-inference-time/... headers "
    "instead of the body's metrics (test a --no-stream join).",
)
@engine_options(
    model_help=(
        "Catalog model (e.g. llama-3.1-8b): switch from fixed delays to the physics engine."
    )
)
def sim(**options: Any) -> None:
    """Serve the built-in OpenAI-compatible engine simulator.

    Without --model every request gets fixed delays (--ttft-ms, --itl-ms). With --model the
    physics engine batches requests like vLLM and times every step with the budget model
    for that model on --gpus x --gpu (see docs/simulator.md).

    Prints one line "READY http://HOST:PORT" once serving; stops on SIGTERM or SIGINT.

    \b
    Examples:
      loadgen sim --deployment examples/deployments/vllm-monolith.toml --port 0
      loadgen sim --config sim.toml --port 0     # e.g. ttft_ms = 50, itl_ms = 5
    """
    engine = pop_engine_options(options)
    try:
        options["engine"] = engine_config(engine)
        if options["frontend_ms"] and options["engine"] is None:
            raise ConfigError("--frontend-ms needs the physics engine (--model)")
        if options["frontend_share"] != 1.0 and not options["frontend_ms"]:
            raise ConfigError("--frontend-share needs a front end (--frontend-ms)")
        config = SimConfig(**options)
    except ConfigError as exc:
        raise _OptionError(str(exc)) from exc
    from loadgen.sim.server import serve  # deferred: uvicorn is not needed for --help

    try:
        serve(config)
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise
        # One line (the default port 8000 is often a local vLLM's): exit 4, infrastructure.
        click.echo(
            f"error: cannot listen on {config.host}:{config.port} ({exc.strerror}); "
            "hint: --port 0 picks a free port and prints it on the READY line",
            err=True,
        )
        click.get_current_context().exit(4)


if __name__ == "__main__":
    # ``python -m loadgen.cli.sim``: how ``loadgen.sim.launch`` starts the simulator process.
    sim(prog_name="python -m loadgen.cli.sim")
