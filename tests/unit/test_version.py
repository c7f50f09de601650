"""One version source: ``zkconsumer.__version__``, read by the build (setup.cfg) and printed by ``zkconsumer --version``."""

from __future__ import annotations

import configparser
import importlib.metadata
from pathlib import Path

import pytest

import zkconsumer
from zkconsumer.cli import run

ROOT = Path(__file__).resolve().parents[2]


def test_setup_cfg_takes_the_version_from_the_package() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    assert config["metadata"]["version"].strip() == "attr: zkconsumer.__version__"
    assert importlib.metadata.version("zkconsumer") == zkconsumer.__version__


def test_the_command_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"zkconsumer {zkconsumer.__version__}"


def test_both_packages_ship_type_information() -> None:
    assert (ROOT / "zkconsumer" / "py.typed").is_file()
    assert (ROOT / "spark_integration" / "py.typed").is_file()
