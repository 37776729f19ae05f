"""The import arrows of docs/architecture.md, checked on the source and in fresh interpreters.

Static check: every module belongs to the most specific layer of ``LAYERS`` (a package or
subpackage) and may import only its own layer, the layers and modules its allow-list names,
the standard library and the third-party distributions listed for it. An import is every
``import`` statement (module level, in a function, under ``TYPE_CHECKING``), with relative
imports resolved, ``from X import Y`` counted as ``X.Y`` where that is a module, and
``importlib.import_module`` / ``__import__`` counted as an import of their literal
argument. A computed name is accepted in two cases only: the CLI's lazy group, and
``import_module(f".{name}", __name__)``, a module below the importer's own package (the
lazy re-exports of a package ``__init__``), counted as an import of every such module.
Optional extras (Pillow, tokenizers, matplotlib, Ray, uvloop) may only be imported inside
a function or under ``TYPE_CHECKING``, so that the package imports without them.

Entry-point checks: a fresh interpreter imports an entry point (and the rest of its
layer), and ``sys.modules`` must hold none of what that entry point must not load.

``BANS`` restates the architecture's prohibitions; a test keeps the allow-lists from ever
granting one, so that a failure here is not fixed by widening a list into a ban.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[1]
PACKAGES: Final = ("loadgen", "traces", "analyzers", "reports")


@dataclass(frozen=True, slots=True, kw_only=True)
class Layer:
    """What the modules of one layer may import besides their own layer and the stdlib.

    ``may_import`` entries: ``"x.*"`` is layer ``x`` (the package ``x`` and every module
    below it that no deeper layer claims); ``"x.y"`` is exactly the module ``x.y``.
    ``third_party``: top-level import names allowed anywhere in the module; ``optional``:
    extras allowed only inside a function or under ``TYPE_CHECKING``."""

    may_import: tuple[str, ...] = ()
    third_party: frozenset[str] = frozenset()
    optional: frozenset[str] = frozenset()


LAYERS: Final[dict[str, Layer]] = {
    # On-disk truth: nothing of ours.
    "traces": Layer(third_party=frozenset({"pyarrow"}), optional=frozenset({"PIL", "tokenizers"})),
    # The replay core (clock, schedule, replay, client, prepare, collector, live, deferred,
    # errors) over the HTTP stack, the sans-IO stream and the wire protocol.
    "loadgen": Layer(
        may_import=("loadgen.http.*", "loadgen.stream.*", "loadgen.openai.*", "traces.*"),
        third_party=frozenset({"asyncio_throttle", "hdrh", "httpx", "orjson"}),
    ),
    "loadgen.http": Layer(third_party=frozenset({"httptools", "httpx"})),
    "loadgen.stream": Layer(may_import=("loadgen.openai.*",), third_party=frozenset({"orjson"})),
    "loadgen.openai": Layer(may_import=("traces.*",), third_party=frozenset({"orjson"})),
    # A run start to finish, on top of the core.
    "loadgen.run": Layer(
        may_import=(
            "loadgen.*",
            "loadgen.http.*",
            "loadgen.stream.*",  # the SSE limit's default, for the options
            "loadgen.openai.*",
            "traces.*",
        ),
        third_party=frozenset({"httpx", "orjson", "prometheus_client", "pyarrow"}),
        optional=frozenset({"ray", "uvloop"}),
    ),
    # A peer of the replay engine: the budget model's physics, nothing of the client.
    "loadgen.sim": Layer(
        may_import=(
            "loadgen",
            "loadgen.errors",
            "loadgen.wakeup",  # the one wake-up timer, shared with the replay
            "analyzers.errors",
            "analyzers.budget.*",
            "analyzers.budget.engine.*",
            "traces.*",
        ),
        third_party=frozenset({"orjson", "prometheus_client", "uvicorn"}),
        optional=frozenset({"tokenizers"}),
    ),
    # Real engines started for the user (vLLM on the CPU, a tiny model built here): servers
    # like the simulator, launched by its READY protocol; nothing of the client.
    "loadgen.engines": Layer(
        may_import=("loadgen.errors", "loadgen.sim.launch"),
        optional=frozenset({"numpy", "safetensors", "tokenizers", "uvloop", "vllm"}),
    ),
    # The composition root: every layer, and the only importer of click.
    "loadgen.cli": Layer(
        may_import=(
            "loadgen.*",
            "loadgen.http.*",
            "loadgen.stream.*",
            "loadgen.openai.*",
            "loadgen.run.*",
            "loadgen.sim.*",
            "loadgen.engines.*",
            "analyzers.*",
            "analyzers.budget.*",
            "analyzers.budget.engine.*",
            "reports.*",
            "reports.html.*",
            "reports.charts.*",
            "traces.*",
        ),
        third_party=frozenset({"click", "orjson", "polars", "rich"}),
        optional=frozenset({"uvloop"}),
    ),
    "analyzers": Layer(
        may_import=("analyzers.budget.*", "analyzers.budget.engine.*", "traces.*"),
        # pyarrow (Polars' own columnar format): its compute kernels where they beat
        # Polars' (chunk_sums counts a million requests' gaps with Arrow's hash kernel).
        third_party=frozenset({"polars", "pyarrow"}),
    ),
    # Pure arithmetic: the standard library, the errors and the image-token rules.
    "analyzers.budget": Layer(
        may_import=(
            "analyzers.errors",
            "analyzers.budget.engine.*",
            "traces.errors",
            "traces.prompts.image_tokens",
        ),
    ),
    # The scheduler's leaf: the arithmetic it steps, not the planning report.
    "analyzers.budget.engine": Layer(
        may_import=(
            "analyzers.errors",
            "analyzers.budget.kv",
            "analyzers.budget.profile",
            "analyzers.budget.specs",
            "analyzers.budget.weights",
        ),
    ),
    "reports": Layer(
        may_import=("reports.html.*", "analyzers.*", "analyzers.budget.*", "traces.*"),
        third_party=frozenset({"rich"}),
    ),
    "reports.html": Layer(
        may_import=("reports.*", "reports.charts.*", "analyzers.*", "traces.*"),
    ),
    "reports.charts": Layer(
        may_import=("reports.theme", "analyzers.*"),
        optional=frozenset({"cycler", "matplotlib"}),
    ),
}

_REPLAY_PATH: Final = ("loadgen", "loadgen.http", "loadgen.stream", "loadgen.openai", "loadgen.run")
_CLIENT: Final = (
    "loadgen.client",
    "loadgen.replay",
    "loadgen.prepare",
    "loadgen.http",
    "loadgen.stream",
    "loadgen.run",
    "loadgen.cli",
)

# What the architecture forbids, per layer: names of ours (a module and everything below
# it) and third-party import names. Every layer but loadgen.cli also bans click.
_REPLAY_BANS: Final = (
    "analyzers",
    "reports",
    "loadgen.sim",
    "loadgen.cli",
    "polars",
    "matplotlib",
    "rich",
)
BANS: Final[dict[str, tuple[str, ...]]] = {
    "traces": ("loadgen", "analyzers", "reports", "polars", "httpx", "rich"),
    **dict.fromkeys(_REPLAY_PATH, _REPLAY_BANS),
    "loadgen.sim": (*_CLIENT, "httpx", "polars"),
    "loadgen.engines": (*_CLIENT, "analyzers", "reports", "httpx", "polars"),
    "analyzers": ("loadgen", "reports", "httpx", "rich"),
    "analyzers.budget": ("loadgen", "reports", "httpx", "rich", "polars", "pyarrow"),
    "analyzers.budget.engine": (
        "loadgen",
        "reports",
        "traces",
        "analyzers.budget.report",
        "httpx",
        "rich",
        "polars",
        "pyarrow",
    ),
    "reports": ("loadgen", "httpx"),
    "reports.html": ("loadgen", "httpx"),
    "reports.charts": ("loadgen", "httpx"),
}

# httpx imports its own command line (httpx._main: click, rich, pygments) at import time
# when those are installed. Nothing of ours uses it; blocking it lets the entry-point
# checks see whether *our* code loads click or rich.
_PROBE: Final = """
import importlib, json, sys
sys.modules["httpx._main"] = None
seen = set(sys.modules)
files, loaded = {}, {}
for name in sys.argv[1:]:
    files[name] = importlib.import_module(name).__file__
    loaded[name] = sorted(set(sys.modules) - seen)
    seen = set(sys.modules)
print(json.dumps({"files": files, "loaded": loaded}))
"""


# ------------------------------------------------------------------ the module tree


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """One module of ours: its file (a ``.pyi`` stands for a compiled module)."""

    name: str
    path: Path
    is_package: bool
    compiled: bool


def _sources() -> dict[str, Source]:
    found: dict[str, Source] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py*")):
            if path.suffix not in (".py", ".pyi") or (
                path.suffix == ".pyi" and path.with_suffix(".py").exists()
            ):
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            found[name] = Source(
                name=name, path=path, is_package=is_package, compiled=path.suffix == ".pyi"
            )
    return found


SOURCES: Final = _sources()


def under(name: str, prefix: str) -> bool:
    """Whether ``name`` is the module ``prefix`` or below it."""
    return name == prefix or name.startswith(prefix + ".")


def layer_of(module: str) -> str:
    """The most specific layer whose package holds ``module``."""
    return max((layer for layer in LAYERS if under(module, layer)), key=len)


def allows(layer: str, target: str) -> bool:
    """Whether a module of ``layer`` may import our module ``target``."""
    if layer_of(target) == layer:
        return True
    return any(
        layer_of(target) == entry[:-2] if entry.endswith(".*") else target == entry
        for entry in LAYERS[layer].may_import
    )


def modules_of(*layers: str) -> list[str]:
    """The importable (source, not compiled) modules of ``layers``, sorted."""
    return sorted(n for n, s in SOURCES.items() if layer_of(n) in layers and not s.compiled)


# ------------------------------------------------------------------ reading imports


@dataclass(frozen=True, slots=True, kw_only=True)
class Import:
    """One import a module makes: ``target`` is a module of ours or a top-level name
    (stdlib or third-party); ``problem`` is set where the import cannot be checked."""

    target: str
    line: int
    lazy: bool
    problem: str = ""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


class _ImportReader(ast.NodeVisitor):
    """Collects a module's imports, noting whether each runs at import time."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.package = source.name if source.is_package else source.name.rpartition(".")[0]
        self.depth = 0  # functions and TYPE_CHECKING blocks entered
        self.found: list[Import] = []

    def add(self, name: str, node: ast.stmt | ast.expr, problem: str = "") -> None:
        top = name.partition(".")[0]
        if problem:
            target = name
        elif top not in PACKAGES:
            target = top
        elif name in SOURCES:
            target = name
        else:
            target, problem = name, f"{name} is not a module of this repository"
        self.found.append(
            Import(target=target, line=node.lineno, lazy=self.depth > 0, problem=problem)
        )

    def nested(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = nested

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.depth += 1
        for stmt in node.body:
            self.visit(stmt)
        self.depth -= 1
        for stmt in node.orelse:
            self.visit(stmt)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            anchor = self.package.split(".")
            if node.level - 1 >= len(anchor):
                self.add(f"{'.' * node.level}{base}", node, "relative import beyond the top")
                return
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            candidate = f"{base}.{alias.name}"
            self.add(candidate if candidate in SOURCES else base, node)

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        if _call_name(node.func) not in ("import_module", "__import__") or not node.args:
            return
        name, anchor = node.args[0], node.args[1] if len(node.args) > 1 else None
        for keyword in node.keywords:
            if keyword.arg == "package":
                anchor = keyword.value
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            self.add(self.absolute(name.value, anchor), node)
        elif self.below_own_package(name, anchor):
            for module in SOURCES:
                if module.startswith(self.source.name + "."):
                    self.add(module, node)
        elif layer_of(self.source.name) != "loadgen.cli":
            self.add(ast.unparse(node), node, "a computed import cannot be checked")

    def absolute(self, name: str, anchor: ast.expr | None) -> str:
        """``name`` made absolute against ``import_module``'s package argument."""
        if not name.startswith("."):
            return name
        package = self.source.name
        if isinstance(anchor, ast.Constant) and isinstance(anchor.value, str):
            package = anchor.value
        dots = len(name) - len(name.lstrip("."))
        parts = package.split(".")
        return ".".join([*parts[: len(parts) - (dots - 1)], name.lstrip(".")])

    def below_own_package(self, name: ast.expr, anchor: ast.expr | None) -> bool:
        """``f".{x}"`` relative to ``__name__`` in a package ``__init__``."""
        return (
            self.source.is_package
            and isinstance(anchor, ast.Name)
            and anchor.id == "__name__"
            and isinstance(name, ast.JoinedStr)
            and bool(name.values)
            and isinstance(name.values[0], ast.Constant)
            and name.values[0].value == "."
            and len(name.values) > 1
            and isinstance(name.values[1], ast.FormattedValue)
        )


@cache
def imports_of(module: str) -> tuple[Import, ...]:
    source = SOURCES[module]
    reader = _ImportReader(source)
    reader.visit(ast.parse(source.path.read_text(), filename=str(source.path)))
    return tuple(reader.found)


def violations(module: str) -> Iterator[str]:
    """Every import of ``module`` its layer does not allow, as one line each."""
    layer = layer_of(module)
    rules = LAYERS[layer]
    for imp in imports_of(module):
        where = f"line {imp.line}: "
        top = imp.target.partition(".")[0]
        if imp.problem:
            yield f"{where}{imp.target}: {imp.problem}"
        elif top in PACKAGES:
            if not allows(layer, imp.target):
                yield f"{where}{imp.target} (of {layer_of(imp.target)}) is not allowed in {layer}"
        elif top in sys.stdlib_module_names or top in rules.third_party:
            continue
        elif top in rules.optional:
            if not imp.lazy:
                yield f"{where}the optional extra {top} is imported at import time"
        else:
            yield f"{where}third-party {top} is not allowed in {layer}"


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_imports_follow_the_layers(module: str) -> None:
    bad = list(violations(module))
    assert not bad, f"{module} ({layer_of(module)}):\n  " + "\n  ".join(bad)


def test_allow_lists_name_real_layers_and_grant_no_ban() -> None:
    assert sorted(BANS) == sorted(set(LAYERS) - {"loadgen.cli"})
    for layer, rules in LAYERS.items():
        for entry in rules.may_import:
            assert (entry[:-2] in LAYERS) if entry.endswith(".*") else (entry in SOURCES), entry
        for ban in (*BANS.get(layer, ()), *(("click",) if layer != "loadgen.cli" else ())):
            if ban.partition(".")[0] in PACKAGES:
                granted = [m for m in SOURCES if under(m, ban) and allows(layer, m)]
                assert not granted, f"{layer} is allowed {granted}, banned by {ban}"
            else:
                assert ban not in rules.third_party | rules.optional, f"{layer} allows {ban}"


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_resolve_to_this_repository(package: str) -> None:
    mod = importlib.import_module(package)
    assert mod.__file__ is not None
    assert Path(mod.__file__).resolve().parent == ROOT / package


# ------------------------------------------------------------------ entry points


def loaded_by(*modules: str) -> dict[str, list[str]]:
    """Import ``modules`` in order in a fresh interpreter; for each, the modules its import
    added to ``sys.modules`` (what an earlier one loaded is not counted again)."""
    modules = tuple(dict.fromkeys(modules))  # an entry point is also one of its layer's
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for name, file in report["files"].items():
        assert file is not None, name
        assert Path(file).resolve().is_relative_to(ROOT), (name, file)
    loaded: dict[str, list[str]] = report["loaded"]
    return loaded


def offenders(loaded: dict[str, list[str]], never: Iterable[str]) -> list[str]:
    """``"entry -> module"`` for every loaded module under one of ``never``."""
    never = tuple(never)
    return [
        f"{entry} -> {module}"
        for entry, modules in loaded.items()
        for module in modules
        if any(under(module, ban) for ban in never)
    ]


def ours(modules: Iterable[str]) -> list[str]:
    return [m for m in modules if m.partition(".")[0] in PACKAGES]


def test_replay_path_loads_no_analysis_simulator_or_cli() -> None:
    """``import loadgen.replay``, then the rest of the replay path (the run, the HTTP
    stack, the stream, the protocol): no Polars, matplotlib, click or rich; nothing of the
    analyzers, reports, simulator or CLI."""
    loaded = loaded_by("loadgen.replay", *modules_of(*_REPLAY_PATH))
    assert not offenders(loaded, (*_REPLAY_BANS, "click"))


def test_simulator_loads_no_client() -> None:
    """``import loadgen.sim.app``, then every simulator module: nothing of the replay
    client, no httpx, no Polars."""
    loaded = loaded_by("loadgen.sim.app", *modules_of("loadgen.sim"))
    assert not offenders(loaded, (*_CLIENT, "httpx", "polars"))


def test_real_engines_load_no_client() -> None:
    """``import loadgen.engines.launch``, then the rest (the tiny model's builder, the
    server's entry point): nothing of the replay client, the analyzers or the reports, no
    httpx, no Polars; and vLLM only when a server starts."""
    loaded = loaded_by("loadgen.engines.launch", *modules_of("loadgen.engines"))
    assert not offenders(loaded, (*_CLIENT, "analyzers", "reports", "httpx", "polars", "vllm"))


def test_budget_engine_loads_only_its_arithmetic() -> None:
    """``import analyzers.budget.engine.scheduler``, then the rest of the engine: no
    third-party module at all (so no pyarrow, no Polars), and of ours only what the
    engine's allow-list names and the packages above it."""
    loaded = loaded_by("analyzers.budget.engine.scheduler", *modules_of("analyzers.budget.engine"))
    everything = [m for modules in loaded.values() for m in modules]
    third = [
        m for m in everything if m.partition(".")[0] not in (*PACKAGES, *sys.stdlib_module_names)
    ]
    assert not third
    # ``analyzers.errors`` derives from ``traces.errors.UserError``, the one base every
    # package's errors share: the engine loads that module through it, and nothing else.
    parents = {"analyzers", "analyzers.budget", "traces", "traces.errors"}
    extra = [
        m for m in ours(everything) if m not in parents and not allows("analyzers.budget.engine", m)
    ]
    assert not extra


def test_traces_loads_nothing_of_ours() -> None:
    """``import traces`` loads no other module of ours (its re-export is lazy), and every
    traces module together loads nothing of the other packages, nor Polars, httpx, click,
    rich or matplotlib."""
    loaded = loaded_by("traces", *modules_of("traces"))
    assert ours(loaded["traces"]) == ["traces"]
    never = ("loadgen", "analyzers", "reports", "polars", "httpx", "click", "rich", "matplotlib")
    assert not offenders(loaded, never)


def test_cli_root_loads_no_command() -> None:
    """``loadgen --help`` imports ``loadgen.cli.root``: the lazy group, click and nothing
    heavy; every command's module waits until it runs."""
    loaded = loaded_by("loadgen.cli.root")
    heavy = ("polars", "matplotlib", "pyarrow", "httpx", "ray", "rich")
    assert not offenders(loaded, (*heavy, "analyzers", "reports", "traces"))
    assert ours(loaded["loadgen.cli.root"]) == [
        "loadgen",
        "loadgen.cli",
        "loadgen.cli.lazy",
        "loadgen.cli.root",
    ]


def test_package_inits_load_nothing_else() -> None:
    """Importing a package (its parents first) loads no other module of ours and nothing
    third-party: an ``__init__`` names its API, re-exporting lazily where it re-exports."""
    packages = sorted(n for n, s in SOURCES.items() if s.is_package)
    loaded = loaded_by(*packages)
    for package, modules in loaded.items():
        third = [
            m for m in modules if m.partition(".")[0] not in (*PACKAGES, *sys.stdlib_module_names)
        ]
        assert ours(modules) == [package], (package, ours(modules))
        assert not third, (package, third)
