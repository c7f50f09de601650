"""The Python examples of README.md and docs/**/*.md, and how a test fills their placeholders to run them.

Every fenced ```` ```python ```` block is an example. It is either run by
``tests/integration/test_doc_examples.py`` or marked as not runnable by an HTML comment on the
line just before the fence, which the site does not show::

    <!-- example: not run: REASON -->

A runnable example is run as a program of its own (a fresh interpreter, the checkout on its
path) against a ``LocalCluster`` whose topics ``events`` (JSON messages over 4 partitions) and
``clicks`` exist, after these
placeholders are filled:

* the value given for ``zookeeper.connect`` (``"zookeeper.connect": "zk1:2181/kafka"`` in a
  dict, or ``.option("zookeeper.connect", "...")``) becomes the cluster's address;
* the value given for ``group.id`` becomes a group of the example's own (each reads from the
  start, whatever the others committed);
* names the example uses without defining them must be among :data:`PLACEHOLDERS`, and are
  defined before it runs: ``handle(...)`` and ``process(...)`` (your code: they do nothing),
  ``spark`` and ``sc`` (a ``local[2]`` SparkSession and its context), ``out`` and
  ``checkpoint`` (fresh directories).

Pure: parsing only, nothing is started here.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Set

ROOT = Path(__file__).resolve().parents[2]

#: What an example may use without defining it, and the code that defines it before it runs.
PLACEHOLDERS: Dict[str, str] = {
    "handle": "def handle(*args, **kwargs):\n    return None\n",
    "process": "def process(*args, **kwargs):\n    return None\n",
    "spark": ("from pyspark.sql import SparkSession\n"
              "spark = SparkSession.builder.master('local[2]').appName('doc-example').getOrCreate()\n"),
    "sc": "sc = spark.sparkContext\n",
    "out": "import tempfile as _tempfile\nout = _tempfile.mkdtemp() + '/out'\n",
    "checkpoint": "import tempfile as _tempfile\ncheckpoint = _tempfile.mkdtemp() + '/checkpoint'\n",
}

MARKER = re.compile(r"^<!-- example: not run: (?P<reason>.+?) -->$")
FENCE = re.compile(r"^```python\s*$")
_VALUE = r"""(?P<head>["']{key}["']\s*[:,]\s*)(?P<quote>["'])(?P<value>[^"']*)(?P=quote)"""


@dataclass(frozen=True)
class Example:
    """One ```` ```python ```` block: ``path`` (relative to the repository) and ``line`` of its fence."""

    path: str
    line: int
    code: str
    not_run: Optional[str]  #: the marker's reason, or ``None``: the example is run

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def starts_spark(self) -> bool:
        """Whether running it starts a Spark session (its own, or the ``spark``/``sc`` placeholders')."""
        return "SparkSession" in self.code or bool({"spark", "sc"} & free_names(self.code))


def pages() -> List[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def collect() -> List[Example]:
    """Every Python example of the README and the documentation pages, in page order."""
    found: List[Example] = []
    for page in pages():
        lines = page.read_text().splitlines()
        i = 0
        while i < len(lines):
            if not FENCE.match(lines[i]):
                i += 1
                continue
            start = i
            previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            marker = MARKER.match(previous.strip())
            i += 1
            body: List[str] = []
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            found.append(Example(str(page.relative_to(ROOT)), start + 1, "\n".join(body) + "\n",
                                 marker.group("reason") if marker else None))
            i += 1
    return found


def free_names(code: str) -> Set[str]:
    """Names ``code`` reads but never binds (imports, assignments, defs, parameters), builtins aside."""
    tree = ast.parse(code)
    bound: Set[str] = set(dir(builtins))
    loaded: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound


def filled(example: Example, zk_connect: str, group: str) -> str:
    """The program that runs ``example``: placeholders defined, addresses and group filled in."""
    code = re.sub(_VALUE.format(key=re.escape("zookeeper.connect")),
                  lambda m: f"{m['head']}{m['quote']}{zk_connect}{m['quote']}", example.code)
    code = re.sub(_VALUE.format(key=re.escape("group.id")),
                  lambda m: f"{m['head']}{m['quote']}{group}-{m['value']}{m['quote']}", code)
    needed = free_names(example.code)
    prelude = "".join(PLACEHOLDERS[name] for name in PLACEHOLDERS if name in needed or
                      (name == "spark" and "sc" in needed))
    epilogue = "\nspark.stop()\n" if "spark" in needed or "sc" in needed else ""
    return prelude + code + epilogue
