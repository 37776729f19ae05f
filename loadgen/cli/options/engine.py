"""The physics engine's options, shared by ``loadgen sim`` (real time, over HTTP) and
``loadgen simulate`` (virtual time, offline): ``--model`` and the deployment around it,
handed to the command as one ``loadgen.sim.config.EngineConfig`` by :func:`engine_config`.

``engine_options(time_scale=...)`` adds them in ``--help`` order; ``--clock-scale`` (wall
seconds per model second; parameter ``time_scale``, old spelling ``--time-scale``) only
exists where there is a wall clock (``sim``).
``--deployment FILE`` (docs/deployment.md) fills every engine option not given on the
command line (:func:`with_deployment`), so both commands read the same file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from loadgen.cli.options.alias import deprecated_alias
from loadgen.errors import ConfigError

if TYPE_CHECKING:
    from loadgen.sim.config import EngineConfig

_MS = click.FloatRange(0.0, max_open=False)
_POS = click.IntRange(min=1)
_FRACTION = click.FloatRange(0.0, 1.0, min_open=True)
_ENGINE_HELP = "Physics engine (needs --model): "

Decorator = Callable[[Any], Any]


def _engine(
    flag: str, type_: click.ParamType[Any, Any] | None, default: object, text: str
) -> Decorator:
    """An option of the physics engine: its help says it needs --model; a default is shown."""
    return click.option(
        flag,
        type=type_,
        default=default,
        show_default=default is not None,
        help=_ENGINE_HELP + text,
    )


def _engine_flag(flag: str, text: str) -> Decorator:
    """A flag of the physics engine (off by default)."""
    return click.option(flag, is_flag=True, help=_ENGINE_HELP + text)


def _options(*, model_help: str, time_scale: bool) -> list[Decorator]:
    out = [
        click.option(
            "--deployment",
            "deployment_file",
            type=click.Path(path_type=Path, dir_okay=False),
            default=None,
            help="A deployment.toml (docs/deployment.md) for the physics engine; the engine "
            "flags given as well override it.",
        ),
        click.option("--model", default=None, help=model_help),
        _engine("--gpu", None, "h100", "catalog GPU type."),
        _engine("--gpus", _POS, 1, "GPUs per replica (tensor parallel)."),
        _engine(
            "--topology",
            click.Choice(["monolith", "disagg"]),
            "monolith",
            "replicas, or prefill and decode pools.",
        ),
        _engine("--replicas", _POS, 1, "monolith replicas."),
        _engine(
            "--router",
            click.Choice(["round-robin", "least-loaded"]),
            "least-loaded",
            "how requests pick an instance.",
        ),
        _engine("--prefill-instances", _POS, 1, "disagg prefill instances."),
        _engine("--prefill-gpus", _POS, 1, "GPUs per prefill instance."),
        _engine("--decode-instances", _POS, 1, "disagg decode instances."),
        _engine("--decode-gpus", _POS, 1, "GPUs per decode instance."),
        _engine(
            "--link-gbps",
            click.FloatRange(0.0, min_open=True),
            400.0,
            "KV-transfer link bandwidth per prefill instance, Gbit/s.",
        ),
        _engine("--link-latency-us", _MS, 0.0, "KV-transfer setup latency."),
        _engine("--max-num-seqs", _POS, 256, "most sequences in a batch."),
        _engine("--max-batched-tokens", _POS, 2048, "token budget per step (chunked prefill)."),
        _engine("--kv-block-size", _POS, 16, "tokens per KV block (and prefix-cache block)."),
        _engine(
            "--kv-capacity-tokens",
            _POS,
            None,
            "override the budget model's KV capacity per instance.",
        ),
        _engine(
            "--max-model-len",
            _POS,
            None,
            "context limit, prompt plus max_tokens; longer requests get vLLM's 400 "
            "(default: the catalog model's max_context).",
        ),
        _engine(
            "--admission-ttft-ms",
            click.FloatRange(0.0, min_open=True),
            None,
            "admission control: refuse on arrival (429, with why) a request whose estimated "
            "time to first token exceeds this budget (default: off).",
        ),
        _engine(
            "--admission-margin-ms",
            _MS,
            10.0,
            "admission control: allowance for the network and the response write, added "
            "to the estimate.",
        ),
        _engine("--memory-fraction", _FRACTION, 0.9, "share of HBM for weights plus KV cache."),
        _engine_flag("--no-prefix-cache", "disable the prefix cache."),
        _engine_flag(
            "--preempt", "allocate KV blocks on demand and preempt when full (default: reserve)."
        ),
    ]
    if time_scale:
        out.append(
            click.option(
                "--clock-scale",
                "time_scale",
                type=click.FloatRange(0.0, min_open=True),
                default=1.0,
                show_default=True,
                help=_ENGINE_HELP + "wall seconds per model second (10: a tenth of real speed); "
                "analyses take the same value as --clock-scale.",
            )
        )
        out.append(
            deprecated_alias(
                "--time-scale",
                "--clock-scale",
                "time_scale",
                type_=click.FloatRange(0.0, min_open=True),
            )
        )
    out += [
        _engine("--efficiency-prefill", _FRACTION, 0.6, "achieved fraction of peak FLOP/s."),
        _engine("--efficiency-decode", _FRACTION, 0.6, "achieved fraction of HBM bandwidth."),
        _engine("--step-overhead-us", _MS, 0.0, "fixed cost added to every step."),
        _engine(
            "--profile",
            click.Path(path_type=Path, exists=True, dir_okay=False),
            None,
            "calibration profile TOML (loadgen plan calibrate); replaces the efficiencies.",
        ),
        _engine(
            "--tokenizer",
            click.Path(path_type=Path, exists=True, dir_okay=False),
            None,
            "local tokenizer.json (default: one token per word).",
        ),
        _engine(
            "--catalog",
            click.Path(path_type=Path, exists=True, dir_okay=False),
            None,
            "a TOML catalog adding or replacing models and GPUs (as loadgen plan --catalog).",
        ),
    ]
    return out


def engine_options(*, model_help: str, time_scale: bool = True) -> Decorator:
    """Add the engine's options to a command (``--time-scale`` only with ``time_scale``);
    the command receives them as keyword arguments (:data:`ENGINE_OPTIONS`)."""
    options = _options(model_help=model_help, time_scale=time_scale)

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


ENGINE_OPTIONS = (
    "model", "gpu", "gpus", "topology", "replicas", "router", "prefill_instances",
    "prefill_gpus", "decode_instances", "decode_gpus", "link_gbps", "link_latency_us",
    "max_num_seqs", "max_batched_tokens", "kv_block_size", "kv_capacity_tokens",
    "max_model_len", "admission_ttft_ms", "admission_margin_ms",
    "memory_fraction", "no_prefix_cache", "preempt",
    "time_scale", "efficiency_prefill", "efficiency_decode", "step_overhead_us", "tokenizer",
    "profile", "catalog", "deployment_file",
)  # fmt: skip
"""The keyword arguments :func:`engine_options` adds (``time_scale`` where it is given)."""

_GIVEN = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.DEFAULT_MAP)
"""Sources of a value the user gave: the command line, a ``--config`` file, an old spelling."""


def pop_engine_options(options: dict[str, Any], *, time_scale: bool = True) -> dict[str, Any]:
    """Remove the engine's options from a command's keyword arguments and return them
    (``time_scale`` as :func:`engine_options` was given it)."""
    names = ENGINE_OPTIONS if time_scale else tuple(n for n in ENGINE_OPTIONS if n != "time_scale")
    return {name: options.pop(name) for name in names}


def with_deployment(values: dict[str, Any], path: Path) -> dict[str, Any]:
    """The engine options with the deployment file's values where no flag was given."""
    from analyzers.decompose.deployment import with_profile
    from analyzers.errors import BudgetError
    from loadgen.sim.config import engine_options as deployment_engine_options
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
    for name, value in deployment_engine_options(spec).items():
        flag = "no_prefix_cache" if name == "prefix_cache" else name
        if flag not in out:  # e.g. time_scale where the command has no wall clock
            continue
        if ctx.get_parameter_source(flag) in _GIVEN:
            continue
        out[flag] = (not value) if name == "prefix_cache" else value
    return out


def engine_config(values: dict[str, Any]) -> EngineConfig | None:
    """The engine configuration, or None without ``--model`` (then no engine option may be
    given on the command line). ``deployment_file``, when given, fills the options not
    given on the command line. Raises ``ConfigError`` for a bad value or catalog name."""
    from loadgen.sim.config import EngineConfig  # deferred: --help stays light

    values = dict(values)
    deployment_file = values.pop("deployment_file", None)
    if deployment_file is not None:
        values = with_deployment(values, deployment_file)
    model = values.pop("model")
    no_cache = values.pop("no_prefix_cache")
    if model is None:
        ctx = click.get_current_context()
        given = [
            name for name in (*values, "no_prefix_cache")
            if ctx.get_parameter_source(name) in _GIVEN
        ]  # fmt: skip
        if given:
            params = {p.name: p for p in ctx.command.params if isinstance(p, click.Option)}
            param = params.get(given[0])
            flag = param.opts[0] if param is not None else "--" + given[0].replace("_", "-")
            raise ConfigError(f"{flag} needs --model (the physics engine)")
        return None
    config = EngineConfig(model=model, prefix_cache=not no_cache, **values)
    from loadgen.sim.physics import check_catalog  # deferred: the budget model is not free

    check_catalog(model=config.model, gpu=config.gpu, user_file=config.catalog)
    return config
