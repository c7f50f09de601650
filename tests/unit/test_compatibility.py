"""What the package claims to support is what CI tests (docs/compatibility.md).

The Python versions of setup.cfg's classifiers and ``python_requires``, of scripts/test-pythons'
matrix (plus the .venv's 3.11, which runs the whole suite), of scripts/build-wheels and of the
compatibility page are the same; kafka-python's range in setup.cfg has both ends tested (the
lower by a pinned entry of the matrix, the upper is what every other environment installs) and
is the range the page states.
"""

from __future__ import annotations

import configparser
import importlib.metadata
import re
from pathlib import Path
from typing import List, Set, Tuple

ROOT = Path(__file__).resolve().parents[2]
FULL_SUITE_PYTHON = "3.11"  # the .venv (scripts/setup-env) runs every test


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def bash_array(script: str, name: str) -> List[str]:
    match = re.search(rf"^{name}=\(([^)]*)\)", (ROOT / "scripts" / script).read_text(), re.M)
    assert match, f"no {name}=(...) in scripts/{script}"
    return [item.strip('"') for item in match.group(1).split()]


def classifier_pythons() -> Set[str]:
    classifiers = setup_cfg()["metadata"]["classifiers"].split("\n")
    return {m.group(1) for c in classifiers if (m := re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c.strip()))}


def kafka_python_range() -> Tuple[str, str]:
    requires = setup_cfg()["options"]["install_requires"]
    match = re.search(r"^\s*kafka-python>=([\d.]+),<=([\d.]+)\s*$", requires, re.M)
    assert match, "kafka-python must be capped at the newest tested release: kafka-python>=LOW,<=HIGH"
    return match.group(1), match.group(2)


def key(version: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_classifiers_python_requires_ci_and_wheels_name_the_same_pythons() -> None:
    matrix = bash_array("test-pythons", "MATRIX")
    tested = {entry.split(":")[0] for entry in matrix} | {FULL_SUITE_PYTHON}
    assert classifier_pythons() == tested == set(bash_array("build-wheels", "PYTHONS"))
    assert setup_cfg()["options"]["python_requires"].strip() == f">={min(tested, key=key)}"
    page = (ROOT / "docs" / "compatibility.md").read_text()
    assert "CPython " + ", ".join(sorted(tested, key=key)) in page


def test_both_ends_of_the_kafka_python_range_are_tested_and_documented() -> None:
    low, high = kafka_python_range()
    assert f"3.9:kafka-python=={low}" in bash_array("test-pythons", "MATRIX")
    assert f"`kafka-python>={low},<={high}`" in (ROOT / "docs" / "compatibility.md").read_text()
    # this environment is one of the tested ends: the pinned lowest, or the newest (every other one)
    assert importlib.metadata.version("kafka-python") in (low, high)
