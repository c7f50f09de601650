"""Every Python command under scripts/ and every example program starts: ``--help`` exits 0.

Catches a driver left importing a module that moved (nothing else imports the drivers: ruff
does not resolve imports, and mypy checks only the shipped packages).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parents[3]


def python_commands() -> List[Path]:
    scripts = [p for p in sorted((ROOT / "scripts").iterdir())
               if p.is_file() and p.read_text(errors="replace").startswith("#!/usr/bin/env python3")]
    examples = sorted((ROOT / "examples").glob("spark_*.py"))
    return scripts + examples


def test_the_drivers_are_found() -> None:
    names = {p.name for p in python_commands()}
    assert {"bench", "bench-decode", "bench-kerberos", "spark_create_rdd.py"} <= names, names


@pytest.mark.parametrize("command", python_commands(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_python_command_prints_its_help(command: Path) -> None:
    result = subprocess.run([sys.executable, str(command), "--help"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, f"{command.name} --help exited {result.returncode}:\n{result.stderr[-3000:]}"
    assert "usage" in result.stdout.lower(), result.stdout[-2000:]
