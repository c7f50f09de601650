"""The package layout: no import cycles, layers import only downwards, small modules, a small ``zkconsumer.testing``.

Imports are read with :mod:`ast` from the source (nothing is imported), at module
level and inside functions alike: an import moved into a function to dodge a
cycle still counts. Imports under ``if TYPE_CHECKING:`` count for the layers (a
lower layer must not know a higher one's types either) but not for cycles (they
never run).

Layers, lowest first (``LAYERS``; a module may import its own layer and the
layers its row names, nothing else):

=============  ==================================================  =====================================
layer          modules                                             may import
=============  ==================================================  =====================================
base           errors, config, properties_file, java_regex,        base
               assignors (pure: no I/O, no other layer)
zookeeper      zookeeper/ (ZooKeeper formats and calls)            base
wire           wire/ (Kafka protocol, connections, decoding)       base
security       security (SSL contexts, ZooKeeper ACLs)             base, zookeeper
fetch          fetch/                                              base, zookeeper, wire, security
exporters      monitoring.prometheus, .http, .push (metrics of a   base
               connector, handed in duck-typed)
core           the other top-level modules (connector_base,        base, zookeeper, wire, security,
               zookeeper_connector, rebalancer, offsets, stream..) fetch, exporters
coordinator    coordinator/                                        everything above but the entry point
entry          connector (``ZookeeperConsumerConnector``: picks    core, coordinator and below
               the ZooKeeper or the coordinator connector)
admin          admin/                                              base, zookeeper, wire, core
monitoring     the rest of monitoring/ (lag, Burrow, exporter)     admin and below
package        zkconsumer (``__init__``), perf                     entry and below
cli            cli/, __main__                                      anything but testing
testing        testing/                                            testing, and the public names of
                                                                   ``zkconsumer`` and ``zkconsumer.errors``
=============  ==================================================  =====================================
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "zkconsumer"

MAX_MODULE_LINES = 600
#: What a user's tests need (LocalCluster and its fault controls, the Kafka download, and the
#: process, port and directory helpers LocalSparkCluster shares) fits in 1,500 lines.
MAX_TESTING_LINES = 1500
SIZE_CHECKED = ("zkconsumer", "spark_integration", "benchmarks")

_BELOW_CORE = ("base", "zookeeper", "wire", "security", "fetch", "metrics", "offsets")

#: (layer, module prefixes, layers it may import besides its own). First matching row wins.
LAYERS: Tuple[Tuple[str, Tuple[str, ...], Tuple[str, ...]], ...] = (
    ("base", ("zkconsumer.errors", "zkconsumer.config", "zkconsumer.properties_file", "zkconsumer.java_regex",
              "zkconsumer.assignors", "zkconsumer.structs", "zkconsumer.threads"), ()),
    ("zookeeper", ("zkconsumer.zookeeper",), ("base",)),
    ("wire", ("zkconsumer.wire",), ("base",)),
    ("security", ("zkconsumer.security",), ("base", "zookeeper")),
    ("fetch", ("zkconsumer.fetch",), ("base", "zookeeper", "wire", "security")),
    ("metrics", ("zkconsumer.metrics",), ("base",)),
    ("offsets", ("zkconsumer.offsets",), ("base", "zookeeper", "wire", "security", "fetch")),
    ("core", ("zkconsumer.consumer",), _BELOW_CORE),
    ("rebalance", ("zkconsumer.rebalance",), _BELOW_CORE + ("core",)),
    ("coordinator", ("zkconsumer.coordinator",), _BELOW_CORE + ("core",)),
    ("entry", ("zkconsumer.connector",), _BELOW_CORE + ("core", "rebalance", "coordinator")),
    ("admin", ("zkconsumer.admin",), _BELOW_CORE + ("core",)),
    ("monitoring", ("zkconsumer.monitoring",), _BELOW_CORE + ("core", "admin")),
    ("package", ("zkconsumer.perf",), _BELOW_CORE + ("core", "rebalance", "coordinator", "entry")),
    ("cli", ("zkconsumer.cli", "zkconsumer.__main__"),
     _BELOW_CORE + ("core", "rebalance", "coordinator", "entry", "admin", "monitoring", "package")),
    ("testing", ("zkconsumer.testing",), ()),  # and PUBLIC_MODULES, see test_layers_import_only_downwards
)

#: What ``zkconsumer.testing`` may use of the consumer: the documented public names.
PUBLIC_MODULES = ("zkconsumer", "zkconsumer.errors")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> Dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> str:
    if module == "zkconsumer":
        return "package"
    for name, prefixes, _allowed in LAYERS:
        if any(module == p or module.startswith(p.rstrip(".") + ".") or (p.endswith(".") and module.startswith(p))
               for p in prefixes):
            return name
    raise AssertionError(f"no layer for {module}")


def allowed_layers(layer: str) -> Set[str]:
    for name, _prefixes, allowed in LAYERS:
        if name == layer:
            return {layer, *allowed}
    raise AssertionError(layer)


def _type_checking_lines(tree: ast.AST) -> Set[int]:
    lines: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports(module: str, path: Path, known: Dict[str, Path]) -> Iterator[Tuple[str, int, bool, bool]]:
    """``(imported module, line, inside a function, under TYPE_CHECKING)`` for each zkconsumer import."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_function: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    typing_only = _type_checking_lines(tree)
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        targets: List[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:  # ``from pkg import mod`` imports the module pkg.mod
                candidate = f"{source}.{alias.name}"
                targets.append(candidate if candidate in known else source)
        else:
            continue
        for target in targets:
            while target and target not in known:  # ``import a.b.c`` of a non-module attribute: its module
                target = target.rpartition(".")[0]
            if target and target != module:
                yield target, node.lineno, node.lineno in in_function, node.lineno in typing_only


def import_graph() -> Dict[str, Dict[str, Tuple[int, bool, bool]]]:
    known = modules()
    graph: Dict[str, Dict[str, Tuple[int, bool, bool]]] = {m: {} for m in known}
    for module, path in known.items():
        for target, line, in_function, typing_only in imports(module, path, known):
            graph[module].setdefault(target, (line, in_function, typing_only))
    return graph


def cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles_among_zkconsumer_modules() -> None:
    graph = import_graph()
    runtime = {m: {t for t, (_line, _fn, typing_only) in targets.items() if not typing_only}
               for m, targets in graph.items()}
    found = cycles(runtime)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_layers_import_only_downwards() -> None:
    graph = import_graph()
    violations = []
    for module, targets in sorted(graph.items()):
        layer = layer_of(module)
        allowed = allowed_layers(layer)
        for target, (line, in_function, _typing_only) in sorted(targets.items()):
            if layer == "testing":
                ok = layer_of(target) == "testing" or target in PUBLIC_MODULES
            else:
                ok = layer_of(target) in allowed
            if not ok:
                where = " (inside a function)" if in_function else ""
                violations.append(f"{module}:{line} [{layer}] imports {target} [{layer_of(target)}]{where}")
    assert not violations, "imports against the layers:\n" + "\n".join(violations)


def _python_files(top: str) -> Iterator[Path]:
    directory = ROOT / top
    if directory.is_dir():
        yield from sorted(directory.rglob("*.py"))


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_over_600_lines() -> None:
    too_long = [f"{p.relative_to(ROOT)}: {_lines(p)} lines"
                for top in SIZE_CHECKED for p in _python_files(top) if _lines(p) > MAX_MODULE_LINES]
    assert not too_long, "modules over 600 lines:\n" + "\n".join(too_long)


def test_zkconsumer_testing_ships_only_local_cluster() -> None:
    """What ships in ``zkconsumer.testing`` is LocalCluster and its fault controls, nothing else.

    Every module there is reached from the package's ``__init__`` (LocalCluster, the Kafka
    distribution it runs, the process, port and directory helpers it shares with
    ``LocalSparkCluster``), none imports the benchmarks, and the whole stays under
    MAX_TESTING_LINES. What only this project's tests and benchmarks use (Kafka's own tools
    as referees, SSL listeners, Debian's ZooKeeper, a ZooKeeper ensemble, kept work
    directories, the ZooKeeper proxy) is in ``benchmarks/cluster/``, not shipped.
    """
    files = sorted((PACKAGE / "testing").rglob("*.py"))
    total = sum(_lines(p) for p in files)
    assert total < MAX_TESTING_LINES, "zkconsumer/testing: " + ", ".join(
        f"{p.relative_to(PACKAGE / 'testing')} {_lines(p)}" for p in files) + f"; total {total}"
    graph = import_graph()
    reached, todo = set(), ["zkconsumer.testing"]
    while todo:
        module = todo.pop()
        if module in reached:
            continue
        reached.add(module)
        todo.extend(t for t in graph.get(module, ()) if t.startswith("zkconsumer.testing"))
    shipped = {m for m in modules() if m.startswith("zkconsumer.testing.")}
    assert shipped <= reached, f"not part of LocalCluster: {sorted(shipped - reached)}"
    assert not [p.name for p in files if re.search(r"^\s*(from|import) benchmarks", p.read_text(encoding="utf-8"), re.M)]


def test_the_layer_table_covers_every_module() -> None:
    for module in modules():
        assert layer_of(module) in {name for name, _p, _a in LAYERS} | {"package"}
    assert layer_of("zkconsumer.connector") == "entry"
    assert layer_of("zkconsumer.consumer.connector") == "core"
    assert layer_of("zkconsumer.coordinator.kafka_membership") == "coordinator"
    assert layer_of("zkconsumer.zookeeper.group") == "zookeeper"
    assert layer_of("zkconsumer.metrics.prometheus") == "metrics"
    assert layer_of("zkconsumer.monitoring.lag") == "monitoring"
