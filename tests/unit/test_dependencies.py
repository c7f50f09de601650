"""The shipped packages' third-party imports agree with setup.cfg (issue 17 item 5).

- every third-party package imported in ``zkconsumer/`` or ``spark_integration/`` is declared
  (``install_requires`` or an extra);
- a package declared only in an extra is imported optionally in ``zkconsumer/`` (inside a
  function, a ``try`` or ``if TYPE_CHECKING``, so ``import zkconsumer`` works without it), and the
  module tells what to install (``pip install <distribution>``, or ``'.[<extra>]'`` in a source tree:
  no package named zkconsumer is published, so ``zkconsumer[<extra>]`` would not install);
  ``spark_integration/`` is the ``spark`` extra's package and may import it at the top;
- every ``install_requires`` entry is imported somewhere in the shipped packages.

Static (the source is parsed, nothing imported); the import name -> distribution map comes from the
installed distributions' metadata.
"""

from __future__ import annotations

import ast
import configparser
import functools
import importlib.metadata
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("zkconsumer", "spark_integration")

#: Imported but deliberately undeclared, with the reason.
UNDECLARED_ALLOWED: Dict[str, str] = {}


@dataclass(frozen=True)
class Import:
    module: str  # top-level import name, e.g. "kazoo"
    path: Path
    line: int
    optional: bool  # inside a function, a try or an ``if``: not run by importing the module
    type_only: bool  # under ``if TYPE_CHECKING``: never run


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(text: str) -> List[str]:
    names = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
            assert match, f"unparseable requirement {line!r} in setup.cfg"
            names.append(_normalize(match.group(0)))
    return names


def declared() -> Tuple[Set[str], Dict[str, Set[str]]]:
    """``install_requires`` names and, per extra, its names (normalized, as in PEP 503)."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    required = set(_requirement_names(cfg.get("options", "install_requires")))
    extras = {extra: set(_requirement_names(text)) for extra, text in cfg.items("options.extras_require")}
    return required, extras


def third_party_imports() -> List[Import]:
    """Every absolute import of a module that is neither the standard library nor ours."""
    stdlib = set(sys.stdlib_module_names)
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                optional, type_only, up = False, False, node
                while up in parents:
                    up = parents[up]
                    if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Try, ast.If)):
                        optional = True
                    if isinstance(up, ast.If) and "TYPE_CHECKING" in ast.unparse(up.test):
                        type_only = True
                for name in names:
                    top = name.split(".")[0]
                    if top not in stdlib and top not in PACKAGES:
                        found.append(Import(top, path.relative_to(ROOT), node.lineno, optional, type_only))
    return found


@functools.lru_cache(maxsize=None)
def _installed() -> Dict[str, List[str]]:
    return dict(importlib.metadata.packages_distributions())


def distribution_of(module: str) -> Set[str]:
    """The installed distributions providing the top-level ``module`` (normalized names)."""
    return {_normalize(d) for d in _installed().get(module, [])}


IMPORTS = third_party_imports()


def test_the_scan_finds_the_known_imports() -> None:
    modules = {i.module for i in IMPORTS}
    assert {"kazoo", "tenacity", "prometheus_client", "pyspark", "pyarrow"} <= modules


@pytest.mark.parametrize("module", sorted({i.module for i in IMPORTS} - set(UNDECLARED_ALLOWED)))
def test_every_third_party_import_is_declared(module: str) -> None:
    required, extras = declared()
    where = [f"{i.path}:{i.line}" for i in IMPORTS if i.module == module]
    dists = distribution_of(module)
    assert dists, f"{module} (imported at {where}) is not installed: cannot tell its distribution"
    all_declared = required.union(*extras.values())
    assert dists & all_declared, f"{module} ({sorted(dists)}) imported at {where} is not in setup.cfg"


@pytest.mark.parametrize("module", sorted({i.module for i in IMPORTS} - set(UNDECLARED_ALLOWED)))
def test_a_package_of_an_extra_is_imported_optionally_and_the_extra_is_named(module: str) -> None:
    required, extras = declared()
    dists = distribution_of(module)
    if dists & required:
        return
    in_extras = sorted(extra for extra, names in extras.items() if dists & names)
    for imp in IMPORTS:
        if imp.module != module or imp.path.parts[0] == "spark_integration" or imp.type_only:
            continue  # spark_integration is the `spark` extra's package; type-only imports never run
        assert imp.optional, (f"{imp.path}:{imp.line} imports {module} (extra {in_extras}) when the module is "
                              "imported: `import zkconsumer` would need the extra")
        source = (ROOT / imp.path).read_text(encoding="utf-8")
        told = [f"'.[{extra}]'" for extra in in_extras] + [f"pip install {d}" for d in dists]
        assert any(t in source for t in told), (f"{imp.path} imports {module} optionally but never tells what "
                                                f"to install (one of {told})")


def test_spark_integration_imports_only_the_spark_extra_beyond_install_requires() -> None:
    required, extras = declared()
    for imp in IMPORTS:
        if imp.path.parts[0] == "spark_integration" and imp.module not in UNDECLARED_ALLOWED:
            dists = distribution_of(imp.module)
            assert dists & (required | extras["spark"]), f"{imp.path}:{imp.line}: {imp.module} is not in [spark]"


def test_every_install_requires_entry_is_imported() -> None:
    required, _ = declared()
    imported: Set[str] = set()
    for module in {i.module for i in IMPORTS}:
        imported |= distribution_of(module)
    assert required - imported == set(), "install_requires entries no shipped module imports"
