"""The ``loadgen sim`` command: parse options into a SimConfig and serve.

Thin by design: validation lives in click types and SimConfig; serving in
:mod:`loadgen.sim.server`. Bad options exit 2 with one line on stderr. Must not import the
replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from loadgen.errors import ConfigError
from loadgen.sim.config import DEFAULT_MODEL_NAME, DEFAULT_PORT, EngineConfig, SimConfig

_RATE = click.FloatRange(0.0, 1.0)
_MS = click.FloatRange(0.0, max_open=False)
_POS = click.IntRange(min=1)
_FRACTION = click.FloatRange(0.0, 1.0, min_open=True)
_ENGINE_HELP = "Physics engine (needs --model): "


def _engine(
    flag: str, type_: click.ParamType[Any, Any] | None, default: object, text: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """An option of the physics engine: its help says it needs --model; a default is shown."""
    return click.option(
        flag,
        type=type_,
        default=default,
        show_default=default is not None,
        help=_ENGINE_HELP + text,
    )


def _engine_flag(flag: str, text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A flag of the physics engine (off by default)."""
    return click.option(flag, is_flag=True, help=_ENGINE_HELP + text)


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
    "--deployment",
    "deployment_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="A deployment.toml (docs/deployment.md) for the physics engine; the engine flags "
    "given as well override it.",
)
@click.option(
    "--model",
    default=None,
    help="Catalog model (e.g. llama-3.1-8b): switch from fixed delays to the physics engine.",
)
@_engine("--gpu", None, "h100", "catalog GPU type.")
@_engine("--gpus", _POS, 1, "GPUs per replica (tensor parallel).")
@_engine(
    "--topology",
    click.Choice(["monolith", "disagg"]),
    "monolith",
    "replicas, or prefill and decode pools.",
)
@_engine("--replicas", _POS, 1, "monolith replicas.")
@_engine(
    "--router",
    click.Choice(["round-robin", "least-loaded"]),
    "least-loaded",
    "how requests pick an instance.",
)
@_engine("--prefill-instances", _POS, 1, "disagg prefill instances.")
@_engine("--prefill-gpus", _POS, 1, "GPUs per prefill instance.")
@_engine("--decode-instances", _POS, 1, "disagg decode instances.")
@_engine("--decode-gpus", _POS, 1, "GPUs per decode instance.")
@_engine(
    "--link-gbps",
    click.FloatRange(0.0, min_open=True),
    400.0,
    "KV-transfer link bandwidth per prefill instance, Gbit/s.",
)
@_engine("--link-latency-us", _MS, 0.0, "KV-transfer setup latency.")
@_engine("--max-num-seqs", _POS, 256, "most sequences in a batch.")
@_engine("--max-batched-tokens", _POS, 2048, "token budget per step (chunked prefill).")
@_engine("--kv-block-size", _POS, 16, "tokens per KV block (and prefix-cache block).")
@_engine(
    "--kv-capacity-tokens", _POS, None, "override the budget model's KV capacity per instance."
)
@_engine("--memory-fraction", _FRACTION, 0.9, "share of HBM for weights plus KV cache.")
@_engine_flag("--no-prefix-cache", "disable the prefix cache.")
@_engine_flag("--preempt", "allocate KV blocks on demand and preempt when full (default: reserve).")
@_engine(
    "--time-scale",
    click.FloatRange(0.0, min_open=True),
    1.0,
    "wall seconds per model second (10: a tenth of real speed).",
)
@_engine("--efficiency-prefill", _FRACTION, 0.6, "achieved fraction of peak FLOP/s.")
@_engine("--efficiency-decode", _FRACTION, 0.6, "achieved fraction of HBM bandwidth.")
@_engine("--step-overhead-us", _MS, 0.0, "fixed cost added to every step.")
@_engine(
    "--profile",
    click.Path(path_type=Path, exists=True, dir_okay=False),
    None,
    "calibration profile TOML (loadgen plan calibrate); replaces the efficiencies.",
)
@_engine(
    "--tokenizer",
    click.Path(path_type=Path, exists=True, dir_okay=False),
    None,
    "local tokenizer.json (default: one token per word).",
)
def sim(**options: Any) -> None:
    """Serve the built-in OpenAI-compatible engine simulator.

    Without --model every request gets fixed delays (--ttft-ms, --itl-ms). With --model the
    physics engine batches requests like vLLM and times every step with the budget model
    for that model on --gpus x --gpu (see docs/simulator.md).

    Prints one line "READY http://HOST:PORT" once serving; stops on SIGTERM or SIGINT.

    Example: loadgen sim --deployment examples/deployments/vllm-monolith.toml --port 0
    """
    engine = {name: options.pop(name) for name in _ENGINE_OPTIONS}
    deployment_file = options.pop("deployment_file")
    try:
        if deployment_file is not None:
            engine = _with_deployment(engine, deployment_file)
        options["engine"] = _engine_config(engine)
        config = SimConfig(**options)
    except ConfigError as exc:
        raise _OptionError(str(exc)) from exc
    from loadgen.sim.server import serve  # deferred: uvicorn is not needed for --help

    serve(config)


_ENGINE_OPTIONS = (
    "model", "gpu", "gpus", "topology", "replicas", "router", "prefill_instances",
    "prefill_gpus", "decode_instances", "decode_gpus", "link_gbps", "link_latency_us",
    "max_num_seqs", "max_batched_tokens", "kv_block_size", "kv_capacity_tokens",
    "memory_fraction", "no_prefix_cache", "preempt", "time_scale", "efficiency_prefill",
    "efficiency_decode", "step_overhead_us", "tokenizer", "profile",
)  # fmt: skip


def _with_deployment(values: dict[str, Any], path: Path) -> dict[str, Any]:
    """The engine options with the deployment file's values where no flag was given."""
    from analyzers.decompose.deployment import with_profile
    from analyzers.errors import BudgetError
    from loadgen.sim.config import engine_options
    from traces.deployment import load_deployment
    from traces.errors import DeploymentError

    try:
        spec = with_profile(load_deployment(path))
    except (DeploymentError, BudgetError) as exc:
        raise ConfigError(str(exc)) from None
    if spec.model is None and values["model"] is None:
        raise ConfigError(f"{path}: names no model (the physics engine needs one; or --model)")
    ctx = click.get_current_context()
    out = dict(values)
    for name, value in engine_options(spec).items():
        flag = "no_prefix_cache" if name == "prefix_cache" else name
        if ctx.get_parameter_source(flag) is click.core.ParameterSource.COMMANDLINE:
            continue
        out[flag] = (not value) if name == "prefix_cache" else value
    return out


def _engine_config(values: dict[str, Any]) -> EngineConfig | None:
    """The engine configuration, or None for fixed delays (engine options need --model)."""
    model = values.pop("model")
    no_cache = values.pop("no_prefix_cache")
    if model is None:
        ctx = click.get_current_context()
        given = [
            name for name in (*values, "no_prefix_cache")
            if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
        ]  # fmt: skip
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise ConfigError(f"{flag} needs --model (the physics engine)")
        return None
    config = EngineConfig(model=model, prefix_cache=not no_cache, **values)
    from loadgen.sim.physics import check_catalog  # deferred: the budget model is not free

    check_catalog(model=config.model, gpu=config.gpu)
    return config


if __name__ == "__main__":
    # ``python -m loadgen.cli.sim``: how ``loadgen.sim.launch`` starts the simulator process.
    sim(prog_name="python -m loadgen.cli.sim")
