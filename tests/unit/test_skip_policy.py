"""tests/skip_policy.py: the allow-list's format, which skips it accepts, and the C-extension check."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest
from skip_policy import AllowEntry, SkipPolicy, read_allowlist


def allowlist(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "allow.txt"
    path.write_text(text)
    return path


def test_repository_allowlist_is_empty() -> None:
    """No test may skip in CI: every tool is installed (the Docker engine included). A new entry
    must come with its reason, and this test changes with it."""
    assert read_allowlist(Path(__file__).resolve().parents[1] / "skip_allowlist.txt") == []


def test_entries_need_a_reason_and_comments_are_ignored(tmp_path: Path) -> None:
    path = allowlist(tmp_path, "# a comment\n\ntests/a.py  no engine here\n")
    assert read_allowlist(path) == [AllowEntry("tests/a.py", "no engine here")]
    with pytest.raises(pytest.UsageError, match="has no reason"):
        read_allowlist(allowlist(tmp_path, "tests/b.py\n"))


class Report:
    """The fields of a pytest report the policy reads."""

    def __init__(self, nodeid: str, skipped: bool, reason: Optional[str] = None) -> None:
        self.nodeid, self.skipped = nodeid, skipped
        self.longrepr = (nodeid, 1, f"Skipped: {reason}") if skipped else None


def test_only_skips_outside_the_allowlist_fail_and_only_when_it_is_set(tmp_path: Path) -> None:
    policy = SkipPolicy(allowlist(tmp_path, "tests/integration/test_docker.py  no engine\n"), False)
    for report in (Report("tests/integration/test_docker.py::test_up", True, "no Docker engine"),
                   Report("tests/unit/test_java_regex.py::test_agree", True, "no JDK"),
                   Report("tests/unit/test_ok.py::test_ok", False)):
        policy.pytest_runtest_logreport(report)  # type: ignore[arg-type]
    assert [(s.nodeid, s.reason) for s in policy.not_allowed()] == [("tests/unit/test_java_regex.py::test_agree",
                                                                     "no JDK")]
    unenforced = SkipPolicy(None, False)
    unenforced.pytest_runtest_logreport(Report("tests/unit/x.py::t", True, "why"))  # type: ignore[arg-type]
    assert len(unenforced.skips) == 1 and unenforced.not_allowed() == []


def test_required_extensions_must_import() -> None:
    SkipPolicy(None, True, extensions=("json",)).pytest_sessionstart(None)
    SkipPolicy(None, False, extensions=("no_such_extension_xyz",)).pytest_sessionstart(None)
    with pytest.raises(pytest.UsageError, match="no_such_extension_xyz"):
        SkipPolicy(None, True, extensions=("no_such_extension_xyz",)).pytest_sessionstart(None)
