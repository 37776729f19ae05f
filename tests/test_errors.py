"""One exception tree per package, all under ``traces.errors.UserError``, and the CLI's
mapping of an error to its exit code by ``isinstance`` (README's exit-code table)."""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path
from typing import Final

import httpx
import pytest

from analyzers.errors import (
    AnalyzerError,
    BudgetError,
    CapacityError,
    DifferentTracesError,
    InfrastructureError,
    InvalidRunError,
    SLOBreach,
    SLOError,
)
from loadgen.cli.root import _user_error_exit_code, _user_error_in
from loadgen.errors import (
    ConfigError,
    DroppedConnection,
    EndpointError,
    LoadgenError,
    PrepareAheadError,
    PromptShapeError,
    RecorderError,
    RequestError,
    RunDirError,
    RunLiveError,
)
from traces.errors import (
    DeploymentError,
    MissingExtraError,
    NewerRunInfoError,
    PromptError,
    RunInfoError,
    SchemaError,
    TraceError,
    TraceFileError,
    TransformError,
    UserError,
    ValidationError,
)
from traces.importers.errors import ImportOptionError, SourceError

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("loadgen", "traces", "analyzers", "reports")


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (TraceError("x"), 2),
        (TraceFileError("x"), 2),
        (RunInfoError("x"), 2),
        (NewerRunInfoError("x"), 2),
        (SchemaError("x"), 2),
        (DeploymentError("x"), 2),
        (ValidationError("x", row=1, column="c"), 2),
        (SourceError("f", line=3, column="c", problem="bad"), 2),
        (ImportOptionError("x"), 2),
        (PromptError("x"), 2),
        (MissingExtraError("x"), 2),
        (TransformError("x"), 2),
        (LoadgenError("x"), 2),
        (ConfigError("x"), 2),
        (EndpointError("x"), 4),
        (RecorderError("x"), 4),
        (RunDirError("x"), 2),
        (RunLiveError("x"), 2),
        (AnalyzerError("x"), 2),
        (BudgetError("x"), 2),
        (CapacityError("x"), 2),
        (SLOError("x"), 2),
        (InvalidRunError("x"), 3),
        (SLOBreach("x"), 1),
        (InfrastructureError("x"), 4),
        (DifferentTracesError("x"), 2),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_each_error_maps_to_its_documented_code(error: UserError, code: int) -> None:
    assert _user_error_exit_code(error) == code


def test_the_mapping_is_by_type_not_by_module_name() -> None:
    # What the old duck typing accepted: any exception with an ``exit_code`` whose module
    # name began with one of our packages. Neither a foreign one nor a stray one counts now.
    stray = type("Stray", (Exception,), {"exit_code": 3, "__module__": "analyzers.stray"})
    assert _user_error_exit_code(stray("x")) is None
    assert _user_error_exit_code(ValueError("x")) is None
    assert _user_error_exit_code(KeyError("x")) is None


def test_one_of_ours_inside_an_exception_group_is_found() -> None:
    # A replay's task group wraps what its tasks raise (the body preparer's error).
    ours = PrepareAheadError("the body preparer process died (exit code -9)")
    group = ExceptionGroup("tasks", [ValueError("other"), ExceptionGroup("inner", [ours])])
    assert _user_error_in(group) is ours
    assert _user_error_exit_code(_user_error_in(group)) == 4
    alone = ExceptionGroup("tasks", [ValueError("x")])
    assert _user_error_in(alone) is alone  # nothing of ours: the traceback stays


def test_simulator_errors_are_on_the_loadgen_tree() -> None:
    # The simulator answers these over HTTP; they are on the tree so that none is a bare
    # ValueError a caller could swallow by accident.
    assert issubclass(PromptShapeError, RequestError)
    assert issubclass(RequestError, LoadgenError)
    assert issubclass(DroppedConnection, LoadgenError)
    assert RequestError("bad", param="model").param == "model"
    assert issubclass(CapacityError, BudgetError)


@functools.cache
def _exception_classes() -> list[tuple[str, str]]:
    """(module, class) of every class in the four packages whose bases name an exception
    (``...Error``, ``...Exception``, ``...Breach``, ``DroppedConnection``). Scanned once,
    when a test asks: not at collection, which every parallel worker would repeat."""
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            module = module.removesuffix(".__init__")
            for node in ast.walk(tree):
                if not isinstance(node, ast.ClassDef):
                    continue
                bases = [ast.unparse(b) for b in node.bases]
                if any(b.endswith(("Error", "Exception", "Breach", "Connection")) for b in bases):
                    found.append((module, node.name))
    return found


def test_the_scan_finds_the_exceptions() -> None:
    names = {name for _, name in _exception_classes()}
    assert {"TraceError", "LoadgenError", "AnalyzerError", "DroppedConnection"} <= names
    assert len(names) >= 25


# The fast transport raises httpx's own exception types, so that the client handles both
# transports alike; the client turns them into a row's outcome: they never reach a user.
HTTPX_FAMILY: Final = {("loadgen.http.stamping", "MalformedResponse")}


def test_every_exception_class_is_a_user_error() -> None:
    outside = []
    for module, name in _exception_classes():
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, BaseException), f"{module}.{name}"
        if (module, name) in HTTPX_FAMILY:
            assert issubclass(cls, httpx.HTTPError)
            assert not issubclass(cls, UserError)
        elif not issubclass(cls, UserError):
            outside.append(f"{module}.{name}")
    assert outside == [], f"outside the error trees: {outside}"
