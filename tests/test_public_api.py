"""The public names of every package: each ``__init__``'s ``__all__``, pinned and resolving.

A package names its public modules (those without a leading underscore) and whatever it
re-exports. Changing either is an API change, so it has to change here too, in review.
A package that re-exports lazily (PEP 562 ``__getattr__``) binds every such name under
``TYPE_CHECKING`` as well, so that type checkers see what the runtime hands out.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[1]

EXPECTED: Final[dict[str, list[str]]] = {
    "analyzers": [
        "budget",
        "compare",
        "decompose",
        "errors",
        "exprs",
        "frames",
        "goodput",
        "metrics",
        "server_metrics",
        "slo",
        "throughput",
        "timeseries",
        "validity",
    ],
    "analyzers.budget": [
        "BreakEven",
        "BudgetReport",
        "Calibration",
        "Catalog",
        "ClaimVerdict",
        "Deployment",
        "HardwareSpec",
        "LinkSpec",
        "ModelSpec",
        "PlanInputs",
        "PoolRatio",
        "Prediction",
        "PrefillSample",
        "SequenceWork",
        "StepCost",
        "VisionSpec",
        "budgetfile",
        "build_report",
        "calibrate",
        "calibrate_prefill",
        "calibrated",
        "catalog",
        "check_claim",
        "claims",
        "cross_attention_kv_bytes",
        "decode",
        "decode_step_time_s",
        "decode_tokens_per_s",
        "default_catalog",
        "disagg",
        "disagg_break_even",
        "engine",
        "fits",
        "formatting",
        "image_encoder_flops",
        "image_encoder_time_s",
        "image_tokens",
        "images",
        "kv",
        "kv_bytes",
        "kv_bytes_per_token",
        "kv_capacity_tokens",
        "kv_transfer_exposed_s",
        "kv_transfer_time_s",
        "load_budget",
        "load_catalog",
        "max_concurrent_requests",
        "max_prompt_for_ttft",
        "max_utilisation",
        "mdc_wait_s",
        "mg1_wait_s",
        "pool_ratio",
        "prefill",
        "prefill_time_s",
        "queueing",
        "report",
        "specs",
        "step_cost",
        "step_time_s",
        "tpot_s",
        "weights",
        "weights_bytes",
        "weights_read_bytes",
        "write_budget",
    ],
    "analyzers.budget.engine": ["kvblocks", "scheduler", "step", "timeline"],
    "analyzers.compare": ["bootstrap", "identity", "runs", "samples", "sweep"],
    "analyzers.decompose": [
        "CLIENT_TERMS",
        "SERVER_TERMS",
        "TERMS",
        "BudgetModel",
        "CalibrationResult",
        "ClassDecomposition",
        "DecomposeOptions",
        "Decomposition",
        "LoadWindow",
        "NetworkEstimate",
        "RequestTerms",
        "SloBreak",
        "SourceOf",
        "TailComposition",
        "TermStat",
        "decompose",
        "load",
        "model",
        "report",
        "request_terms",
        "run",
        "terms",
    ],
    "analyzers.slo": ["evaluate", "gate", "parse"],
    "loadgen": [
        "__version__",
        "cli",
        "client",
        "clock",
        "collector",
        "deferred",
        "errors",
        "http",
        "live",
        "openai",
        "pacer",
        "prepare",
        "redact",
        "replay",
        "run",
        "schedule",
        "sim",
        "stream",
    ],
    "loadgen.cli": [
        "analyze",
        "compare",
        "decompose",
        "demo",
        "demo_compare",
        "echo",
        "errors",
        "gate",
        "lazy",
        "options",
        "plan",
        "progress",
        "replay",
        "report",
        "root",
        "server_metrics",
        "sim",
        "sweep",
        "trace",
        "trace_import",
        "trace_synth",
        "trace_tools",
    ],
    "loadgen.cli.options": ["bootstrap", "budget", "group", "output", "selection", "slo"],
    "loadgen.http": ["connection", "deadline", "pool", "stamping"],
    "loadgen.openai": ["bodies", "chunks", "timings"],
    "loadgen.run": [
        "options",
        "probe",
        "ray",
        "recorder",
        "runinfo",
        "scrape",
        "session",
        "shard",
        "sharding",
        "sweep",
        "workers",
    ],
    "loadgen.sim": [
        "app",
        "chunks",
        "config",
        "deadline",
        "engine",
        "faults",
        "instance",
        "launch",
        "metrics",
        "physics",
        "prefix",
        "prompt",
        "records",
        "request",
        "response",
        "router",
        "server",
        "tokenizer",
        "tokens",
        "topology",
    ],
    "loadgen.stream": ["feed", "sse", "state"],
    "reports": [
        "charts",
        "compare",
        "console",
        "fmt",
        "gate",
        "html",
        "jsondoc",
        "markdown",
        "plan",
        "tables",
        "theme",
    ],
    "reports.charts": ["compare", "figure", "run"],
    "reports.html": ["report", "run"],
    "traces": [
        "SCHEMA_VERSION",
        "errors",
        "importers",
        "io",
        "prompts",
        "records",
        "runinfo",
        "schema",
        "stats",
        "synth",
        "transform",
        "validate",
    ],
    "traces.importers": [
        "azure_llm",
        "azure_lmm",
        "base",
        "burstgpt",
        "errors",
        "mooncake",
        "parse",
        "registry",
        "servegen",
        "sharegpt",
        "sink",
        "splitwise",
    ],
    "traces.prompts": ["image_tokens", "images", "maker"],
    "traces.synth": ["arrivals", "classes", "lengths", "sessions", "trace"],
}


def _init(package: str) -> Path:
    return ROOT.joinpath(*package.split("."), "__init__.py")


def _public_modules(package: str) -> set[str]:
    """The submodules and subpackages of ``package`` on disk, without a leading underscore."""
    folder = _init(package).parent
    names = {p.stem for p in folder.glob("*.py")} | {
        p.parent.name for p in folder.glob("*/__init__.py")
    }
    return {n for n in names if not n.startswith("_")}


def test_every_package_is_pinned() -> None:
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("loadgen", "traces", "analyzers", "reports")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert sorted(on_disk) == sorted(EXPECTED)


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_all_is_pinned(package: str) -> None:
    assert importlib.import_module(package).__all__ == EXPECTED[package]


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_all_names_every_public_module(package: str) -> None:
    assert _public_modules(package) <= set(EXPECTED[package])


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_public_names_resolve(package: str) -> None:
    """Each name imports as ``from package import name`` would: an attribute (a lazy
    re-export included) or else a submodule."""
    module = importlib.import_module(package)
    missing = []
    for name in EXPECTED[package]:
        try:
            getattr(module, name)
        except AttributeError:
            try:
                importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError:
                missing.append(name)
    assert not missing


def _defines_getattr(package: str) -> bool:
    tree = ast.parse(_init(package).read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)


# The packages that re-export: each resolves its names on first use.
LAZY: Final = ("analyzers.budget", "analyzers.decompose", "traces")


def test_only_the_reexporting_packages_define_getattr() -> None:
    assert [p for p in sorted(EXPECTED) if _defines_getattr(p)] == list(LAZY)


@pytest.mark.parametrize("package", LAZY)
def test_lazy_reexports_are_typed(package: str) -> None:
    """Every name of ``__all__`` is also imported under ``if TYPE_CHECKING:``."""
    tree = ast.parse(_init(package).read_text())
    typed = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for stmt in node.body
        if isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names
    }
    assert set(EXPECTED[package]) <= typed
