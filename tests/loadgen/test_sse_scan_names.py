"""The Python names ``loadgen/stream/_sse_scan.c`` uses by string exist on the Python side.

The C walk reads and writes ``StreamState``'s slots, calls its methods and reads
``SSEDecoder``'s buffer by interned name, and reads chunks' JSON keys. A renamed slot would
only fail at run time, on the C path, and a key the reference starts reading would silently
make the two implementations disagree. So the source is parsed (it need not be built):

* every name is interned into one of three groups (``state_attr``, ``decoder_attr``,
  ``key``) and only ever used through its group;
* an attribute is read or written on the right object (``state``, ``decoder``) and is a
  slot of its class; a method called by name is a method of it;
* the JSON keys are exactly the ones the reference classification reads
  (``loadgen.openai.chunks.chunk_kind`` and ``StreamState._add_decoded``), but ``role``.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.openai import chunks
from loadgen.stream.sse import SSEDecoder
from loadgen.stream.state import StreamState

SOURCE = Path(__file__).resolve().parents[2] / "loadgen" / "stream" / "_sse_scan.c"

OWNERS: dict[str, tuple[str, type]] = {
    "state_attr": ("state", StreamState),
    "decoder_attr": ("decoder", SSEDecoder),
}
"""Attribute groups: the C variable each is looked up on, and that object's class."""
GROUPS = {*OWNERS, "key"}
ACCESSORS = {"PyObject_GetAttr", "PyObject_SetAttr", "set_if_none", "append_to"}
"""C calls ``(obj, name, ...)`` that read or write an attribute: it must be a slot."""
CALLERS = {"PyObject_CallMethodObjArgs"}
"""C calls ``(obj, name, ...)`` that call a method by name."""
HELPER_PARAMS = {"attr"}
"""The name parameter of ``set_if_none`` and ``append_to``, passed to the accessors."""
KEY_LOOKUP = "item"
"""``item(dict, key, &failed)``: the only way the C code reads a JSON key."""
ONLY_IN_REFERENCE = {"role"}
"""Keys the reference reads and C need not: role-only and other chunks add the same."""

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_INTERN = re.compile(r'\bintern\(\s*&(\w+)\.(\w+),\s*"([^"]*)"\s*\)')
_USE = re.compile(r"\b(\w+)\(\s*(\w+),\s*(\w+)\.(\w+)\b")
_GROUP_USE = re.compile(r"\b(\w+)\.(\w+)\b")
_API_CALL = re.compile(
    r"\b(PyObject_GetAttr|PyObject_SetAttr|PyObject_CallMethodObjArgs)\(\s*(\w+),\s*([\w.]+)"
)
_STRING_API = re.compile(r"\b(Py\w*AttrString|PyObject_CallMethod|PyImport_ImportModule)\(([^;]*)")


def c_code() -> str:
    return _COMMENT.sub("", SOURCE.read_text())


def interned(code: str) -> dict[tuple[str, str], str]:
    """``(group, field)`` to the interned name."""
    out: dict[tuple[str, str], str] = {}
    for group, field, name in _INTERN.findall(code):
        assert group in GROUPS, f"intern into {group}.{field}: not one of {sorted(GROUPS)}"
        assert (group, field) not in out, f"{group}.{field} interned twice"
        out[group, field] = name
    return out


def uses(code: str) -> list[tuple[str, str, str, str]]:
    """Every use of a group's name outside the interning: ``(call, first argument, group,
    field)``. Fails on a use that is not the second argument of a call."""
    body = _INTERN.sub("", code)
    found = [u for u in _USE.findall(body) if u[2] in GROUPS]
    total = sum(1 for group, _ in _GROUP_USE.findall(body) if group in GROUPS)
    assert len(found) == total, "a group's name used other than as a call's second argument"
    return found


def read_keys(function: Callable[..., Any]) -> set[str]:
    """The string constants ``function`` reads as keys: ``x.get("k")`` and ``"k" in x``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    keys: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            keys.add(str(node.args[0].value))
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.ops[0], ast.In | ast.NotIn)
        ):
            keys.add(str(node.left.value))
    return keys


def test_every_interned_name_is_used_through_its_group() -> None:
    code = c_code()
    names = interned(code)
    used = {(group, field) for _, _, group, field in uses(code)}
    assert used == set(names), "interned but unused, or used but never interned"


@pytest.mark.parametrize("group", sorted(OWNERS))
def test_attribute_names_exist_on_their_class(group: str) -> None:
    code = c_code()
    names = interned(code)
    owner, cls = OWNERS[group]
    slots = set(getattr(cls, "__slots__", ()))
    assert slots, f"{cls.__name__} has no __slots__"
    checked = 0
    for call, obj, used_group, field in uses(code):
        if used_group != group:
            continue
        name = names[group, field]
        assert obj == owner, f"{call}({obj}, {group}.{field}): {group} names are of `{owner}`"
        if call in ACCESSORS:
            assert name in slots, f"{call} reads or writes {cls.__name__}.{name}: no such slot"
        elif call in CALLERS:
            method = getattr(cls, name, None)
            assert callable(method), f"{call} calls {cls.__name__}.{name}: no such method"
        else:
            pytest.fail(f"{call}({obj}, {group}.{field}): not a known attribute access")
        checked += 1
    assert checked > 0


def test_json_keys_are_the_ones_the_reference_reads() -> None:
    code = c_code()
    names = interned(code)
    for call, _, group, field in uses(code):
        if group == "key":
            assert call == KEY_LOOKUP, f"{call}(.., key.{field}): keys are read by item()"
    c_keys = {name for (group, _), name in names.items() if group == "key"}
    reference = read_keys(chunks.chunk_kind) | read_keys(StreamState._add_decoded)
    assert c_keys - reference == set(), "C reads keys the reference classification does not"
    assert reference - c_keys == ONLY_IN_REFERENCE, "the reference reads keys C does not"


def test_no_attribute_is_reached_any_other_way() -> None:
    """Every attribute call names a group's member (or the helpers' parameter), and the
    only attribute looked up by a literal string is ``orjson.loads``."""
    code = c_code()
    for call, _, name in _API_CALL.findall(code):
        group = name.split(".")[0]
        assert group in OWNERS or name in HELPER_PARAMS, f"{call}(.., {name}): not a group's name"
    literal = [(call, args.split(")")[0]) for call, args in _STRING_API.findall(code)]
    assert literal == [
        ("PyImport_ImportModule", '"orjson"'),
        ("PyObject_GetAttrString", 'orjson, "loads"'),
    ]
    assert callable(orjson.loads)
