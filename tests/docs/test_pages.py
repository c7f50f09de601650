"""What the pages claim, checked against the repository (pure: nothing is built or started).

- the README fits on a screen or two (at most 150 lines);
- every figure in the README's comparison with Kafka's consumer is a figure of the kept run
  it names (``benchmarks/results/throughput.json``), as the performance page prints it;
- every test the guarantees page names exists;
- the docstring converter of the API reference turns reST roles and literal blocks into Markdown;
- ``benchmarks.keep`` finds the JSON line a benchmark prints last.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterator, Set

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
sys.path.insert(0, str(ROOT / "scripts"))

from docs_griffe import to_markdown  # noqa: E402

from benchmarks.keep import last_json_line  # noqa: E402


def test_the_readme_fits_on_a_screen_or_two() -> None:
    assert len(README.read_text().splitlines()) <= 150


def _numbers(value: Any) -> Iterator[float]:
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield float(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)


def _renderings(value: float) -> Set[str]:
    return {f"{value:,.0f}", f"{value:.2f}", f"{value:.1f}", f"{value:,.1f}", f"{value:.0f}",
            f"{value / 1e6:.1f}", f"{value / 1e6:.2f}"}


def test_the_readmes_figures_come_from_the_kept_run() -> None:
    text = README.read_text()
    section = text.split("## Compared with Kafka's own consumer", 1)[1].split("\n## ", 1)[0]
    record = json.loads((ROOT / "benchmarks" / "results" / "throughput.json").read_text())
    allowed: Set[str] = set()
    for number in _numbers(record["data"]):
        allowed |= _renderings(number)
    allowed |= {str(n) for n in range(0, 11)}  # counts in prose: "3 rounds", "1 broker"
    allowed |= set(re.findall(r"[0-9][0-9,.]*", record["command"])) | set(re.findall(r"[0-9]+", record["started"]))
    allowed |= _renderings(record["steal_pct"]) | {x for v in record["load"]["before"] + record["load"]["after"]
                                                   for x in _renderings(v)}
    figures = [f.rstrip(".,") for f in re.findall(r"(?<![\w.`])[0-9][0-9,.]*", re.sub(r"`[^`]*`", "", section))]
    assert figures, "the comparison quotes no figure"
    unsupported = [f for f in figures if f not in allowed and f.replace(",", "") not in allowed]
    assert not unsupported, f"README figures not in benchmarks/results/throughput.json: {unsupported}"
    assert "docs/performance.md" in section


def test_every_test_the_guarantees_page_names_exists() -> None:
    page = (ROOT / "docs" / "guarantees.md").read_text()
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", page)
    assert len(named) >= 20
    for path, name in named:
        functions = {n.name for n in ast.walk(ast.parse((ROOT / path).read_text())) if isinstance(n, ast.FunctionDef)}
        assert name in functions, f"{path}::{name}"


def test_roles_and_literal_blocks_become_markdown() -> None:
    text = ("Raises :class:`~zkconsumer.errors.ConfigurationError` (see :mod:`.config`).\n\n"
            "Example::\n\n    with X() as x:\n        x.run()\n\nAfter.")
    assert to_markdown(text) == ("Raises ``ConfigurationError`` (see ``config``).\n\nExample:\n\n"
                                 "```\nwith X() as x:\n    x.run()\n```\n\nAfter.")


def test_the_last_json_object_line_is_the_data() -> None:
    assert last_json_line('table\n{"a": 1}\nverdict: PASS\n{"b": 2}\n') == {"b": 2}


def test_the_packages_name_pages_a_wheel_user_has_not_repository_files() -> None:
    """Docstrings and messages of the installed packages point to the documentation's pages by
    name: a wheel has no ``docs/`` folder, so ``docs/MONITORING.md`` would lead nowhere."""
    found = []
    for package in ("zkconsumer", "spark_integration"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"\bdocs/|\b[\w-]+\.md\b", line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "repository paths where a page name belongs:\n" + "\n".join(found)


def _message_fragments() -> Set[str]:
    """The literal parts of every string the packages hold (f-string pieces, ``%`` formats split off)."""
    fragments: Set[str] = set()
    for package in ("zkconsumer", "spark_integration"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    fragments.update(re.split(r"%[-+ #0-9.]*[sdrfx]", node.value))
    return fragments


def test_the_troubleshooting_page_quotes_messages_the_code_writes() -> None:
    """Each message quoted on the page (a bold code span, or the code span after ``SomeError`:``),
    with ``<...>`` standing for what varies and ``...`` for a list, is made of text the packages'
    own strings hold: a message reworded in the code must be reworded on the page."""
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    quotes = re.findall(r"\*\*`([^`]+)`\*\*", page) + re.findall(r"\w+Error`: `([^`]+)`", page)
    quotes = [q for q in quotes if not re.fullmatch(r"[\w.]+", q)]  # a bare class name is not a message
    assert len(quotes) >= 25
    fragments = _message_fragments()
    missing = []
    for quote in quotes:
        for piece in re.split(r"<[^>]*>|\.\.\.|[:;] ", quote):  # what varies, a list, where messages join
            piece = piece.strip(" '\"()[],")
            if len(piece) >= 4 and not any(piece in fragment for fragment in fragments):
                missing.append(f"{piece!r} (in {quote!r})")
    assert not missing, "quoted on docs/troubleshooting.md but written nowhere in the code:\n" + "\n".join(missing)
