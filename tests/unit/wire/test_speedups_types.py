"""The C extension's types: its stub (_speedups.pyi) and the loader's Speedups protocol name what it has."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Set

import pytest

from zkconsumer.wire import messageset

STUB = Path(messageset.__file__).with_name("_speedups.pyi")


def stub_names() -> Set[str]:
    tree = ast.parse(STUB.read_text(encoding="utf-8"))
    names: Set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def protocol_names() -> Set[str]:
    return {name for name in vars(messageset.Speedups) if not name.startswith("_")}


@pytest.fixture(scope="module")
def extension() -> object:
    try:
        return importlib.import_module("zkconsumer.wire._speedups")
    except ImportError:
        pytest.skip("the C extension zkconsumer.wire._speedups is not built")


def test_the_stub_declares_exactly_the_extensions_public_names(extension: object) -> None:
    public = {name for name in dir(extension) if not name.startswith("_")}
    assert stub_names() == public


def test_the_loaders_protocol_names_only_what_the_extension_has(extension: object) -> None:
    names = protocol_names()
    assert {"decode", "decode_inner", "concat", "recv_frame", "MessageBlock", "Cursor", "WRAPPER"} <= names
    assert names <= stub_names(), f"not in _speedups.pyi: {sorted(names - stub_names())}"
    assert all(hasattr(extension, name) for name in names)
