"""Benchmarks, fault drills and the harnesses they and the tests share (not part of the shipped package), driven by scripts/."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def use_project_venv(script: str) -> None:
    """Re-run ``script`` under the checkout's ``.venv`` (made by scripts/setup-env) if this interpreter is another.

    The benchmark scripts start with ``#!/usr/bin/env python3``; the consumers they measure
    and the LocalCluster they start need the project's dependencies.
    """
    venv_python = ROOT / ".venv" / "bin" / "python"
    if venv_python.exists() and Path(sys.prefix).resolve() != venv_python.parent.parent.resolve():
        os.execv(str(venv_python), [str(venv_python), script, *sys.argv[1:]])
