"""The ``loadgen`` command: the composition root, the only module that touches every package.

Subcommands live in their packages' ``cli`` modules and are imported lazily, so that
``loadgen replay`` does not pay for Polars or matplotlib. Every package's errors subclass
``traces.errors.UserError`` and carry an ``exit_code``; they are printed as one line on
stderr, never as a traceback. Any other exception is a bug and keeps its traceback.

Exit codes (README's table; tests/test_exit_codes.py holds every command to it): 0 success;
1 SLO breach; 2 bad input or option (a missing path, a malformed file, a trace where a run
belongs, a bad URL); 3 invalid run (a run directory whose files cannot be analysed); 4
endpoint or infrastructure failure; 130 interrupted (a replay's rows so far are kept).
"""

from __future__ import annotations

from typing import Any

import click

from loadgen import __version__
from loadgen.cli.lazy import LazyGroup

_COMMANDS: dict[str, tuple[str, str]] = {
    "trace": (
        "loadgen.cli.trace.group:trace",
        "Make, import, inspect and transform workload traces.",
    ),
    "replay": (
        "loadgen.cli.replay:replay",
        "Replay a trace against an OpenAI-compatible endpoint.",
    ),
    "recover": (
        "loadgen.cli.recover:recover",
        "Merge a killed run's journals and mark it incomplete, with what it lost.",
    ),
    "sim": ("loadgen.cli.sim:sim", "Serve the built-in OpenAI-compatible engine simulator."),
    "simulate": (
        "loadgen.cli.simulate:simulate",
        "Run a trace through the simulator's engine offline, in virtual time.",
    ),
    "demo": ("loadgen.cli.demo.harness:demo", "Run the whole harness end to end on the simulator."),
    "plan": (
        "loadgen.cli.plan.group:plan",
        "Predict prefill, decode, KV and disaggregation budgets.",
    ),
    "analyze": (
        "loadgen.cli.analyze:analyze",
        "Latency percentiles, throughput, errors, fidelity and goodput of a run.",
    ),
    "decompose": (
        "loadgen.cli.decompose:decompose",
        "Split TTFT into client, network, queue, prefill and first-token time.",
    ),
    "server-metrics": (
        "loadgen.cli.server_metrics:server_metrics",
        "Server-reported queue, batch and KV usage during a run.",
    ),
    "export": (
        "loadgen.cli.export:export",
        "Write a run's per-request rows as CSV or JSON Lines.",
    ),
    "report": (
        "loadgen.cli.report:report",
        "Write an HTML report and Markdown summary of runs, sweeps.",
    ),
    "gate": ("loadgen.cli.gate:gate", "Fail CI on an SLO breach or a regression (exit 0/1/2/3/4)."),
    "compare": (
        "loadgen.cli.compare:compare",
        "Compare runs (or sweeps) of one trace on different deployments.",
    ),
    "sweep": ("loadgen.cli.sweep:sweep", "Replay a trace at successively higher load."),
    "demo-compare": (
        "loadgen.cli.demo.disagg:demo_compare",
        "Monolith vs disaggregated on the simulator: sweeps, comparison, crossover.",
    ),
}


def _user_error_exit_code(exc: BaseException) -> int | None:
    """The exit code of one of our packages' user-facing errors, or None for anything else."""
    # Imported here: ``traces`` loads pyarrow, which ``loadgen --help`` and ``sim`` need not
    # pay for; by the time one of our errors is raised, it is loaded anyway.
    from traces.errors import UserError

    return exc.exit_code if isinstance(exc, UserError) else None


def _user_error_in(exc: BaseException) -> BaseException:
    """``exc``, or the first of our errors inside it when it is an exception group (an
    error raised in a replay's task group, e.g. the body preparer's, comes wrapped)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _user_error_in(inner)
            if _user_error_exit_code(found) is not None:
                return found
    return exc


class _LazyRoot(LazyGroup):
    """The root group: lazy subcommands, and our errors printed as one line with their code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.exceptions.Exit:
            raise
        except click.UsageError as exc:
            # One line, as our own errors are: a CI log shows the whole mistake at its end.
            where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
            message = " ".join(exc.format_message().split())
            click.echo(f"error: {message} (see '{where} --help')", err=True)
            ctx.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted before the run started", err=True)
            ctx.exit(130)
        except Exception as exc:
            error = _user_error_in(exc)
            code = _user_error_exit_code(error)
            if code is None:
                raise
            click.echo(f"error: {error}", err=True)
            ctx.exit(code)


@click.group(
    cls=_LazyRoot,
    lazy_commands=_COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="loadgen")
def cli() -> None:
    """Trace-driven replay and load testing for OpenAI-compatible LLM endpoints.

    Replay a Parquet trace open-loop at its own timestamps (or closed-loop at a
    concurrency), record every token's arrival, and explain latency against budgets
    predicted from first principles.

    \b
    Examples:
      loadgen demo                        # the whole harness on the built-in simulator
      loadgen trace synth --requests 200 --rate 5 -o trace.parquet
      loadgen replay trace.parquet --base-url http://127.0.0.1:8000/v1 -o runs/r1
      loadgen analyze runs/r1             # runs/r1/results.json has the summary too
      loadgen gate runs/r1 --slo 'ttft_ms.p99<=500'

    Exit codes: 0 ok, 1 SLO breach, 2 bad input, 3 invalid run, 4 endpoint down,
    130 interrupted (README's table).
    """


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="loadgen")


if __name__ == "__main__":  # pragma: no cover
    main()
