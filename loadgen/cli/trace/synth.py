"""``loadgen trace synth``: write a seeded synthetic workload trace (docs/workloads.md).

A thin command: it parses and validates options (bad input exits 2 with one line), builds
a ``SynthConfig`` and calls ``traces.synth.trace.write_synth``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from loadgen.cli.options.outfile import parquet_out
from traces.errors import TraceError
from traces.synth.agents import AgentSpec
from traces.synth.arrivals import ARRIVAL_KINDS, ArrivalSpec, RateStep
from traces.synth.lengths import (
    Empirical,
    Fixed,
    LengthDist,
    LogNormal,
    empirical_from_file,
    empirical_from_text,
)
from traces.synth.sessions import SessionSpec
from traces.synth.trace import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_IMAGE_MODEL,
    ClassShare,
    ClassValue,
    PrefixSpec,
    SynthConfig,
    image_class,
    long_context_class,
    parse_class_values,
    parse_mix,
    text_class,
    write_synth,
)

_POS = click.FloatRange(min=0.0, min_open=True)
_NONNEG = click.FloatRange(min=0.0)
_T = TypeVar("_T")


class _ListType(click.ParamType[tuple[_T, ...], Any]):
    """A comma-separated list read by one of the synthesizer's parsers (``parse_mix``,
    ``parse_class_values``); the parser's ValueError is a usage error."""

    def __init__(self, name: str, parse: Callable[[str], tuple[_T, ...]]) -> None:
        self.name = name
        self._parse = parse

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[_T, ...]:
        if isinstance(value, tuple):
            return value
        try:
            return self._parse(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


_MIX = _ListType("CLASS=W,...", parse_mix)
_CLASS_VALUES = _ListType("MS|CLASS=MS,...", parse_class_values)


class _StepsType(click.ParamType[tuple[RateStep, ...], Any]):
    name = "SECONDS:RATE,..."

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[RateStep, ...]:
        if isinstance(value, tuple):
            return value
        steps: list[RateStep] = []
        for part in str(value).split(","):
            dur, sep, rate = part.partition(":")
            try:
                step = RateStep(duration_s=float(dur), rate=float(rate))
            except ValueError:
                self.fail(f"expected SECONDS:RATE pairs, got {part!r}", param, ctx)
            if not sep or not step.duration_s > 0 or not step.rate >= 0:
                self.fail(f"a step needs a positive duration and a rate >= 0: {part!r}", param, ctx)
            steps.append(step)
        if steps[-1].rate <= 0:
            self.fail("the last step's rate must be positive (it is held)", param, ctx)
        return tuple(steps)


class _LengthsType(click.ParamType[Empirical, Any]):
    """A comma-separated list of lengths, or a Parquet trace file to resample."""

    name = "PATH|N,N,..."

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Empirical:
        if isinstance(value, Empirical):
            return value
        text = str(value)
        column = "output_tokens" if param is not None and param.name == "output_from" else None
        try:
            if Path(text).suffix == ".parquet" or Path(text).exists():
                return empirical_from_file(Path(text), column or "input_tokens")
            return empirical_from_text(text)
        except (ValueError, TraceError) as exc:
            self.fail(str(exc), param, ctx)


def _length(
    ctx: click.Context,
    which: str,
    mean: float | None,
    sigma: float | None,
    fixed: int | None,
    source: Empirical | None,
) -> LengthDist | None:
    """The one length distribution the user asked for (None: the class default)."""
    given = [
        name
        for name, v in ((f"--{which}-mean/--{which}-sigma", mean if mean is not None else sigma),
                        (f"--{which}-fixed", fixed),
                        (f"--{which}-from", source))
        if v is not None
    ]  # fmt: skip
    if len(given) > 1:
        raise click.UsageError(f"{' and '.join(given)} are exclusive; give one", ctx)
    if fixed is not None:
        return Fixed(value=fixed)
    if source is not None:
        return source
    if mean is not None or sigma is not None:
        default = text_class()
        base = default.input if which == "input" else default.output
        assert isinstance(base, LogNormal)
        return LogNormal(
            mean=mean if mean is not None else base.mean,
            sigma=sigma if sigma is not None else base.sigma,
        )
    return None


def _given(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source != click.core.ParameterSource.DEFAULT


_ARRIVAL_OPTIONS: dict[str, tuple[str, ...]] = {
    "cv": ("gamma", "ramp", "steps", "diurnal", "bursts"),
    "rate_from": ("ramp",),
    "rate_to": ("ramp",),
    "steps": ("steps",),
    "period": ("diurnal",),
    "amplitude": ("diurnal",),
    "burst_factor": ("bursts",),
    "burst_length": ("bursts",),
    "burst_every": ("bursts",),
}


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--requests", type=click.IntRange(min=1), help="Number of requests.")
@click.option("--duration", type=_POS, help="Trace length in seconds.")
@click.option("--rate", type=_POS, default=1.0, show_default=True, help="Requests per second.")
@click.option(
    "--arrival",
    type=click.Choice(ARRIVAL_KINDS),
    default="poisson",
    show_default=True,
    help="Arrival process.",
)
@click.option("--cv", type=_POS, help="Coefficient of variation of gaps (gamma; default 1).")
@click.option("--rate-from", type=_NONNEG, default=1.0, show_default=True, help="Ramp start rate.")
@click.option("--rate-to", type=_POS, default=10.0, show_default=True, help="Ramp end rate.")
@click.option("--steps", type=_StepsType(), help="Step profile, e.g. 60:5,60:10,60:20.")
@click.option(
    "--period", type=_POS, default=600.0, show_default=True, help="Diurnal period, seconds."
)
@click.option(
    "--amplitude",
    type=click.FloatRange(min=0.0, max=1.0, max_open=True),
    default=0.5,
    show_default=True,
    help="Diurnal relative amplitude.",
)
@click.option(
    "--burst-factor", type=_POS, default=5.0, show_default=True, help="Rate multiplier in bursts."
)
@click.option(
    "--burst-length", type=_POS, default=10.0, show_default=True, help="Burst length, seconds."
)
@click.option(
    "--burst-every", type=_POS, default=60.0, show_default=True, help="Burst period, seconds."
)
@click.option("--input-mean", type=_POS, help="Text prompt mean tokens (lognormal; 1000).")
@click.option("--input-sigma", type=_NONNEG, help="Text prompt log-spread (lognormal; 0.8).")
@click.option("--input-fixed", type=click.IntRange(min=1), help="Every text prompt this long.")
@click.option("--input-from", type=_LengthsType(), help="Resample text prompt lengths.")
@click.option("--output-mean", type=_POS, help="Output mean tokens (lognormal; 250).")
@click.option("--output-sigma", type=_NONNEG, help="Output log-spread (lognormal; 0.6).")
@click.option("--output-fixed", type=click.IntRange(min=1), help="Every output this long.")
@click.option("--output-from", type=_LengthsType(), help="Resample output lengths.")
@click.option("--mix", type=_MIX, default="text=1", show_default=True, help="Class weights.")
@click.option(
    "--long-min", type=click.IntRange(min=1), default=32_768, show_default=True,
    help="Shortest long_context prompt.",
)  # fmt: skip
@click.option(
    "--long-max", type=click.IntRange(min=1), default=1_048_576, show_default=True,
    help="Longest long_context prompt.",
)  # fmt: skip
@click.option(
    "--images-max", type=click.IntRange(min=1, max=64), default=2, show_default=True,
    help="Images per image request: 1..N.",
)  # fmt: skip
@click.option(
    "--image-model", default=DEFAULT_IMAGE_MODEL, show_default=True,
    help="Model family whose rule gives image_tokens.",
)  # fmt: skip
@click.option("--prefix-groups", type=click.IntRange(min=1), help="Shared prefixes (groups).")
@click.option(
    "--prefix-tokens", type=click.IntRange(min=1), default=2048, show_default=True,
    help="Tokens per shared prefix (whole blocks).",
)  # fmt: skip
@click.option(
    "--zipf-s", type=_NONNEG, default=1.1, show_default=True, help="Zipf exponent of groups."
)
@click.option(
    "--prefix-fraction", type=click.FloatRange(0.0, 1.0), default=1.0, show_default=True,
    help="Fraction of requests with a shared prefix.",
)  # fmt: skip
@click.option(
    "--api",
    type=click.Choice(["chat", "completions", "responses", "embeddings", "mixed"]),
    default="chat",
    show_default=True,
    help="Endpoint of each request (mixed: half chat, half completions).",
)
@click.option("--sessions", is_flag=True, help="Multi-turn conversations with growing context.")
@click.option(
    "--turns-mean", type=click.FloatRange(min=1.0), default=4.0, show_default=True,
    help="Mean turns per session.",
)  # fmt: skip
@click.option(
    "--think-mean", type=_NONNEG, default=10.0, show_default=True,
    help="Mean seconds between turns (--kind agent: default 2).",
)  # fmt: skip
@click.option(
    "--kind", type=click.Choice(["requests", "agent"]), default="requests", show_default=True,
    help="requests: the classes of --mix; agent: tool-using agent sessions (--rate starts "
    "sessions).",
)  # fmt: skip
@click.option("--agents", type=click.IntRange(min=1), help="[agent] Top-level sessions to start.")
@click.option(
    "--turns-min", type=click.IntRange(min=1), default=10, show_default=True,
    help="[agent] Fewest turns per session.",
)  # fmt: skip
@click.option(
    "--turns-max", type=click.IntRange(min=1), default=40, show_default=True,
    help="[agent] Most turns per session.",
)  # fmt: skip
@click.option(
    "--context-max", type=click.IntRange(min=1), default=131_072, show_default=True,
    help="[agent] Context a session grows to at most, tokens.",
)  # fmt: skip
@click.option(
    "--tools", type=click.IntRange(min=0), default=12, show_default=True,
    help="[agent] Tool definitions in the system prompt.",
)  # fmt: skip
@click.option(
    "--tool-tokens", type=click.IntRange(min=1), default=250, show_default=True,
    help="[agent] Tokens per tool definition.",
)  # fmt: skip
@click.option(
    "--toolsets", type=click.IntRange(min=1), default=4, show_default=True,
    help="[agent] Distinct tool preambles shared across sessions (Zipf).",
)  # fmt: skip
@click.option(
    "--task-mean", type=_POS, default=600.0, show_default=True,
    help="[agent] Mean task message tokens (lognormal).",
)  # fmt: skip
@click.option(
    "--tool-result-mean", type=_POS, default=3000.0, show_default=True,
    help="[agent] Mean tool result tokens added per turn (lognormal).",
)  # fmt: skip
@click.option(
    "--reply-mean", type=_POS, default=250.0, show_default=True,
    help="[agent] Mean reply (tool call) tokens (lognormal).",
)  # fmt: skip
@click.option(
    "--fork-prob", type=click.FloatRange(0.0, 1.0), default=0.03, show_default=True,
    help="[agent] Chance a turn starts sub-agents.",
)  # fmt: skip
@click.option(
    "--branches-mean", type=click.FloatRange(min=1.0), default=2.0, show_default=True,
    help="[agent] Mean sub-agents per branching (geometric).",
)  # fmt: skip
@click.option(
    "--spawn-fraction", type=click.FloatRange(0.0, 1.0), default=0.5, show_default=True,
    help="[agent] Share of sub-agents that start fresh from the preamble (others fork).",
)  # fmt: skip
@click.option(
    "--child-turns-max", type=click.IntRange(min=2), default=8, show_default=True,
    help="[agent] Most turns per sub-agent.",
)  # fmt: skip
@click.option("--slo-ttft-ms", type=_CLASS_VALUES, help="TTFT SLO: MS or CLASS=MS,...")
@click.option("--slo-tpot-ms", type=_CLASS_VALUES, help="TPOT SLO: MS or CLASS=MS,...")
@click.option(
    "--block-size", type=click.IntRange(min=1), default=DEFAULT_BLOCK_SIZE, show_default=True,
    help="Tokens per prefix block id.",
)  # fmt: skip
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Random seed: the same options and seed give an identical file.",
)
@click.option(
    "-o", "--out", "out", type=click.Path(path_type=Path, dir_okay=False), required=True,
    callback=parquet_out, help="Trace file to write (.parquet).",
)  # fmt: skip
@click.pass_context
def synth(ctx: click.Context, /, **opts: Any) -> None:
    """Synthesize a seeded workload trace (same options and seed: identical file).

    \b
    Examples:
      loadgen trace synth --requests 200 --rate 5 --seed 1 -o trace.parquet
      loadgen trace synth --duration 600 --arrival gamma --cv 3 --rate 20 \\
          --mix text=0.7,long_context=0.1,image=0.2 --prefix-groups 8 -o mixed.parquet
      loadgen trace synth --kind agent --agents 200 --rate 0.5 --context-max 131072 \\
          --seed 3 -o agents.parquet
    """
    config = _config(ctx, opts)
    try:
        result = write_synth(config, opts["out"])
    except ValueError as exc:
        raise click.UsageError(str(exc), ctx) from exc
    table = result.table
    span = table.column("arrival_s")[-1].as_py() if table.num_rows else 0.0
    sessions = ""
    if config.agent is not None:
        ids = table.column("session_id").unique().to_pylist()
        subs = sum(1 for i in ids if i is not None and "." in i)
        sessions = f" in {len(ids) - subs} agent sessions and {subs} sub-agents"
    click.echo(f"wrote {opts['out']}: {table.num_rows} requests{sessions} over {span:.1f} s")


_AGENT_OPTIONS = (
    "agents", "turns_min", "turns_max", "context_max", "tools", "tool_tokens", "toolsets",
    "task_mean", "tool_result_mean", "reply_mean", "fork_prob", "branches_mean",
    "spawn_fraction", "child_turns_max",
)  # fmt: skip
_REQUEST_OPTIONS = (
    "input_mean", "input_sigma", "input_fixed", "input_from", "output_mean", "output_sigma",
    "output_fixed", "output_from", "mix", "long_min", "long_max", "images_max", "prefix_groups",
    "prefix_tokens", "zipf_s", "prefix_fraction", "api", "sessions", "turns_mean",
)  # fmt: skip


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _agent(ctx: click.Context, o: dict[str, Any]) -> AgentSpec | None:
    """The agent spec of ``--kind agent`` (None for ``--kind requests``); options of the
    other kind are usage errors, never silently ignored."""
    if o["kind"] != "agent":
        for name in _AGENT_OPTIONS:
            if _given(ctx, name):
                raise click.UsageError(f"{_flag(name)} needs --kind agent", ctx)
        return None
    for name in _REQUEST_OPTIONS:
        if _given(ctx, name):
            raise click.UsageError(f"{_flag(name)} does not apply to --kind agent", ctx)
    if o["turns_min"] > o["turns_max"]:
        raise click.UsageError("--turns-min must not exceed --turns-max", ctx)
    try:
        return AgentSpec(
            sessions=o["agents"],
            turns_min=o["turns_min"],
            turns_max=o["turns_max"],
            context_max=o["context_max"],
            toolsets=o["toolsets"],
            tools=o["tools"],
            tool_tokens=o["tool_tokens"],
            task=LogNormal(mean=o["task_mean"], sigma=0.6),
            tool_result=LogNormal(mean=o["tool_result_mean"], sigma=1.0),
            reply=LogNormal(mean=o["reply_mean"], sigma=0.5),
            think_mean_s=o["think_mean"] if _given(ctx, "think_mean") else 2.0,
            fork_prob=o["fork_prob"],
            branches_mean=o["branches_mean"],
            spawn_fraction=o["spawn_fraction"],
            child_turns_max=o["child_turns_max"],
        )
    except ValueError as exc:
        raise click.UsageError(str(exc), ctx) from exc


def _config(ctx: click.Context, o: dict[str, Any]) -> SynthConfig:
    agent = _agent(ctx, o)
    bounded = agent is not None and agent.sessions is not None
    if o["requests"] is None and o["duration"] is None and not bounded:
        raise click.UsageError(
            "give --requests N, --duration SECONDS or both (--kind agent: or --agents N)", ctx
        )
    kind = o["arrival"]
    for name, kinds in _ARRIVAL_OPTIONS.items():
        if _given(ctx, name) and kind not in kinds:
            flag = "--" + name.replace("_", "-")
            raise click.UsageError(f"{flag} applies to --arrival {'/'.join(kinds)} only", ctx)
    if kind == "steps" and o["steps"] is None:
        raise click.UsageError("--arrival steps needs --steps SECONDS:RATE,...", ctx)
    if kind == "bursts" and o["burst_length"] >= o["burst_every"]:
        raise click.UsageError("--burst-length must be shorter than --burst-every", ctx)
    if o["long_min"] > o["long_max"]:
        raise click.UsageError("--long-min must not exceed --long-max", ctx)
    spec = ArrivalSpec(
        kind=kind,
        rate=o["rate"],
        cv=o["cv"] if o["cv"] is not None else 1.0,
        rate_from=o["rate_from"],
        rate_to=o["rate_to"],
        steps=o["steps"] or (),
        period_s=o["period"],
        amplitude=o["amplitude"],
        burst_factor=o["burst_factor"],
        burst_s=o["burst_length"],
        burst_every_s=o["burst_every"],
    )
    if kind == "ramp":
        # The ramp spans the trace: the given duration, or the span in which the ramp's
        # expected count equals --requests (rates scale down in session mode likewise).
        span = o["duration"] or 2.0 * o["requests"] / (o["rate_from"] + o["rate_to"])
        spec = ArrivalSpec(
            kind="ramp", cv=spec.cv, rate_from=o["rate_from"], rate_to=o["rate_to"], ramp_s=span
        )
    inp = _length(
        ctx, "input", o["input_mean"], o["input_sigma"], o["input_fixed"], o["input_from"]
    )
    out = _length(
        ctx, "output", o["output_mean"], o["output_sigma"], o["output_fixed"], o["output_from"]
    )
    prefix = None
    if o["prefix_groups"] is not None:
        prefix = PrefixSpec(
            groups=o["prefix_groups"],
            tokens=o["prefix_tokens"],
            zipf_s=o["zipf_s"],
            fraction=o["prefix_fraction"],
        )
    else:
        for name in ("prefix_tokens", "zipf_s", "prefix_fraction"):
            if _given(ctx, name):
                flag = "--" + name.replace("_", "-")
                raise click.UsageError(f"{flag} needs --prefix-groups", ctx)
    sessions = None
    if o["sessions"]:
        sessions = SessionSpec(turns_mean=o["turns_mean"], think_mean_s=o["think_mean"])
    else:
        for name in ("turns_mean", "think_mean"):
            if _given(ctx, name) and not (agent is not None and name == "think_mean"):
                raise click.UsageError(f"--{name.replace('_', '-')} needs --sessions", ctx)
    mix: tuple[ClassShare, ...] = o["mix"]
    classes = (
        text_class(input=inp, output=out),
        long_context_class(low=o["long_min"], high=o["long_max"]),
        image_class(images_max=o["images_max"], output=out),
    )
    ttft: tuple[ClassValue, ...] = o["slo_ttft_ms"] or ()
    tpot: tuple[ClassValue, ...] = o["slo_tpot_ms"] or ()
    try:
        return SynthConfig(
            requests=o["requests"],
            duration_s=o["duration"],
            arrival=spec,
            classes=classes,
            mix=mix,
            api=o["api"],
            prefix=prefix,
            sessions=sessions,
            agent=agent,
            slo_ttft_ms=ttft,
            slo_tpot_ms=tpot,
            block_size=o["block_size"],
            image_model=o["image_model"],
            seed=o["seed"],
        )
    except TraceError as exc:
        raise click.BadParameter(str(exc), ctx, param_hint="--image-model") from exc
    except ValueError as exc:
        raise click.UsageError(str(exc), ctx) from exc
