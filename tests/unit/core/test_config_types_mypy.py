"""ConsumerConfig's typed attributes as mypy --strict reads them (the lint toolchain of the test
extra: scripts/test-pythons's minimal virtualenvs leave this file out, see tests/unit/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zkconsumer import config_types


def test_mypy_reads_the_typed_attributes_not_getattr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``config.<property>`` has the table's type under mypy --strict, and a misspelt one is an error."""
    api = pytest.importorskip("mypy.api")
    monkeypatch.chdir(Path(config_types.__file__).parents[1])  # mypy finds this checkout's zkconsumer from here
    program = tmp_path / "uses_config.py"
    program.write_text(
        "from zkconsumer.config import ConsumerConfig\n"
        "def f(config: ConsumerConfig) -> None:\n"
        "    reveal_type(config.consumer_id)\n"
        "    reveal_type(config.offsets_storage)\n"
        "    config.group_idd\n"
        "    config.group_id = 'g2'\n"
    )
    stdout, _stderr, status = api.run(["--strict", "--no-error-summary", "--cache-dir", str(tmp_path / "cache"),
                                       "--follow-imports", "silent", str(program)])
    lines = [line.split(": ", 1)[1].replace("builtins.", "") for line in stdout.splitlines()
             if line.startswith(str(program))]
    assert status == 1 and lines == [
        'note: Revealed type is "str | None"',
        "note: Revealed type is \"Literal['zookeeper'] | Literal['kafka']\"",
        'error: "ConsumerConfig" has no attribute "group_idd"  [attr-defined]',
        'error: Property "group_id" defined in "PropertyAttributes" is read-only  [misc]',
    ], stdout
