"""``--config FILE``: a command's options from a TOML file, and the resolved options written
back as one (``RUN/config.toml``), so that ``loadgen replay --config RUN/config.toml``
replays the run again.

The file is flat: one key per option, named as the option is without its leading dashes
(``max-requests`` or ``max_requests``), the command's argument by its name (``trace``).
Flags take ``true``/``false``, repeatable options a list, an option that takes a JSON
object (``extra-body``) a table or its JSON text. Flags given on the command line
win over the file: the file fills click's ``default_map`` (an eager option, read before
the others), and click takes a value from the command line first. Relative paths in a
file are relative to the file's directory. An unknown key or a bad value is one usage
error naming the key and the file (exit 2).

Secrets are never written: URL user info and credential header values are replaced by
``<redacted>`` (``loadgen.redact``), and a file value still holding ``<redacted>`` is
refused unless the command line gives that option. API keys come from the environment
variable ``--api-key-env`` names, whose name is written, never its value.

``tomllib`` reads; :func:`dump_toml` writes the flat values options have (strings,
numbers, booleans, lists of them), which is all a config file holds.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import click

from loadgen.redact import REDACTED, redact_headers, redact_url

CONFIG_NAME: Final = "config.toml"
"""The resolved options' file in a run (or sweep) directory."""
NOT_SAVED: Final = ("out", "overwrite", "run_id", "no_progress", "dry_run")
"""Options that name or shape one run rather than the experiment: not written back, so
that a replay from a saved file writes a new run directory."""
URL_KEYS: Final = ("base_url", "scrape_metrics")
"""Keys whose values are URLs: written with their user info and credentials redacted."""
_META: Final = "loadgen.config"

TomlValue = str | int | float | bool | list[str] | list[int] | list[float]


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """The config file a command read, and the parameter names it set."""

    path: Path
    names: tuple[str, ...]


def config_key(param: click.Parameter) -> str:
    """The key of ``param`` in a config file: its first long option without the dashes,
    with underscores (an argument: its name)."""
    if isinstance(param, click.Option):
        longs = [o for o in param.opts if o.startswith("--")]
        if longs:
            return longs[0][2:].replace("-", "_")
    return (param.name or "").replace("-", "_")


def _settable(command: click.Command) -> dict[str, click.Parameter]:
    """The command's parameters a file may set, by key (hidden aliases and eager options
    such as ``--help`` and ``--config`` left out)."""
    out: dict[str, click.Parameter] = {}
    for param in command.params:
        if param.name is None or not param.expose_value or param.is_eager:
            continue
        if isinstance(param, click.Option) and param.hidden:
            continue
        out[config_key(param)] = param
    return out


def _fail(path: Path, key: str, why: str) -> click.UsageError:
    return click.UsageError(f"{path}: key {key!r}: {why}")


def _file_value(param: click.Parameter, raw: object, path: Path, key: str) -> object:
    """A TOML value as the command line would give it: a list for a repeatable option, a
    path relative to the file's directory, a table as JSON text for an option that reads
    JSON; any other table refused."""
    if isinstance(raw, dict):
        if param.type is not click.STRING or param.callback is None:
            raise _fail(path, key, "expected a value, got a table")
        return json.dumps(raw)
    many = param.multiple or param.nargs != 1
    if isinstance(raw, list):
        if not many:
            raise _fail(path, key, "expected one value, got a list")
        if any(isinstance(item, dict | list) for item in raw):
            raise _fail(path, key, "expected a list of values")
        items: list[object] = list(raw)
    else:
        items = [raw]
    if isinstance(param.type, click.Path):
        items = [
            str(path.parent / item) if isinstance(item, str) and not Path(item).is_absolute()
            else item
            for item in items
        ]  # fmt: skip
    return items if many else items[0]


def _check(ctx: click.Context, param: click.Parameter, value: object, path: Path, key: str) -> Any:
    """``value`` converted by the option's type and checked by its callback, or a usage
    error that names the key and the file."""
    from traces.errors import UserError  # deferred: traces loads pyarrow; --help need not

    try:
        converted = param.type_cast_value(ctx, value)
        if param.callback is not None:
            converted = param.callback(ctx, param, converted)
    except click.BadParameter as exc:
        raise _fail(path, key, exc.message) from None
    except UserError as exc:
        raise _fail(path, key, str(exc)) from None
    return converted


def _load(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    """The ``--config`` callback: fill ``ctx.default_map`` from the file."""
    if value is None or ctx.resilient_parsing:
        return
    try:
        data = tomllib.loads(value.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise click.UsageError(f"--config {value}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise click.UsageError(f"--config {value}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise click.UsageError(f"--config {value}: not valid TOML ({exc})") from None
    settable = _settable(ctx.command)
    defaults: dict[str, Any] = dict(ctx.default_map or {})
    names: list[str] = []
    for raw_key, raw in data.items():
        key = raw_key.replace("-", "_")
        target = settable.get(key)
        if target is None or target.name is None:
            raise _fail(value, raw_key, f"no such option of '{ctx.command_path}'")
        given = _file_value(target, raw, value, raw_key)
        _check(ctx, target, given, value, raw_key)
        defaults[target.name] = given
        names.append(target.name)
    ctx.default_map = defaults
    ctx.meta[_META] = LoadedConfig(path=value, names=tuple(names))


def config_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--config FILE`` (read before the other options; flags given as well win)."""
    return click.option(
        "--config",
        type=click.Path(path_type=Path, dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=_load,
        help="TOML file of option values (keys: the option names, e.g. max_requests = 100); "
        "options given as well override it. See docs/cli.md.",
    )(func)


def refuse_redacted(ctx: click.Context) -> None:
    """Refuse a value the config file still has redacted (a saved run's secret) unless the
    command line gave that option: the run would send ``<redacted>`` as a credential."""
    loaded = ctx.meta.get(_META)
    if not isinstance(loaded, LoadedConfig):
        return
    by_name = {p.name: p for p in ctx.command.params}
    for name in loaded.names:
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT_MAP:
            continue
        value = ctx.params.get(name)
        texts = value if isinstance(value, tuple | list) else (value,)
        if any(isinstance(t, str) and REDACTED in t for t in texts):
            key = config_key(by_name[name])
            raise _fail(
                loaded.path, key, f"holds a redacted secret: give --{key.replace('_', '-')}"
            )


def _redact_header_items(items: Iterable[str]) -> list[str]:
    out = []
    for item in items:
        name, sep, value = item.partition(":")
        if not sep:
            out.append(item)
            continue
        redacted = redact_headers({name.strip(): value.strip()})[name.strip()]
        out.append(f"{name.strip()}: {redacted}")
    return out


def resolved_config(ctx: click.Context, *, skip: Sequence[str] = NOT_SAVED) -> dict[str, TomlValue]:
    """The command's resolved options by config key, as a config file holds them: paths
    absolute, unset options (None) left out, secrets redacted, ``skip`` left out."""
    out: dict[str, TomlValue] = {}
    for key, param in _settable(ctx.command).items():
        if key in skip or param.name not in ctx.params:
            continue
        value = ctx.params[param.name]
        if value is None:
            continue
        if isinstance(value, tuple | list):
            items = [str(v.absolute()) if isinstance(v, Path) else v for v in value]
            if key == "header":
                items = _redact_header_items(str(v) for v in items)
            out[key] = items
        elif isinstance(value, Path):
            out[key] = str(value.absolute())
        elif isinstance(value, dict):
            out[key] = json.dumps(value, sort_keys=True)  # what the option reads: JSON text
        elif isinstance(value, str | int | float | bool):
            out[key] = redact_url(value) if key in URL_KEYS and isinstance(value, str) else value
        else:
            out[key] = str(value)
    return out


def _toml_string(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    raise TypeError(f"not a TOML scalar: {value!r}")


def dump_toml(values: Mapping[str, object], *, comment: str = "") -> str:
    """Flat ``key = value`` TOML (strings, numbers, booleans, lists of them), keys sorted;
    ``comment`` lines first. ``tomllib.loads`` reads it back to equal values."""
    lines = [f"# {line}" if line else "#" for line in comment.splitlines()]
    for key in sorted(values):
        value = values[key]
        if isinstance(value, list | tuple):
            text = "[" + ", ".join(_toml_scalar(v) for v in value) + "]"
        else:
            text = _toml_scalar(value)
        bare = key.replace("_", "").replace("-", "").isalnum() and key.isascii()
        lines.append(f"{key if bare else _toml_string(key)} = {text}")
    return "\n".join(lines) + "\n"


def write_config(ctx: click.Context, directory: Path, *, skip: Sequence[str] = NOT_SAVED) -> Path:
    """Write the command's resolved options to ``directory/config.toml``; return its path."""
    command = ctx.command_path
    comment = (
        f"The options of this {command.split()[-1]}, resolved (flags, --config file, "
        "defaults).\n"
        f"Run it again: {command} --config {directory / CONFIG_NAME} [-o NEW_DIR]\n"
        "Secrets are redacted; API keys come from the variable api_key_env names."
    )
    path = directory / CONFIG_NAME
    path.write_text(dump_toml(resolved_config(ctx, skip=skip), comment=comment), encoding="utf-8")
    return path
