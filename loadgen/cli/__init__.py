"""The composition root: every ``loadgen`` command, one module per command or family.

The only package that imports click, and the only one that touches every other package.
Commands parse options, call library functions and render through ``reports``; their
modules are imported lazily (``lazy``), so ``loadgen --help`` loads none of them. Nothing
outside this package may import it.
"""

__all__ = [
    "analyze",
    "compare",
    "decompose",
    "demo",
    "dryrun",
    "echo",
    "errors",
    "export",
    "gate",
    "lazy",
    "options",
    "plan",
    "progress",
    "recover",
    "replay",
    "report",
    "results",
    "root",
    "runstatus",
    "server_metrics",
    "sim",
    "simulate",
    "sweep",
    "trace",
]
