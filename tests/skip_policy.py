"""The suite's skip policy: a run cannot pass by skipping (registered by ``tests/conftest.py``).

A skipped test is evidence that never ran, so every run lists its skips with their reasons
at the end, beside the allow-list, and two switches (both set by ``.ci/run``) make them fatal:

``ZKCONSUMER_SKIP_ALLOWLIST=FILE``
    Any skip (of a test, or of a whole module at collection) whose node id does not start
    with an entry of FILE fails the run (exit 1), however the tests themselves did. FILE
    holds one ``NODE-ID-PREFIX  REASON`` per line (``#`` starts a comment line); an entry
    without its reason is refused, so the list says why each skip is accepted.

``ZKCONSUMER_REQUIRE_EXTENSIONS=1``
    The session refuses to start if a C extension (:data:`EXTENSIONS`) cannot be imported,
    instead of letting every test of the C paths skip.

Without them (a developer's machine without tmux or a JDK, say) skips are listed, not fatal.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple, Union

import pytest

#: The C extensions that ``ZKCONSUMER_REQUIRE_EXTENSIONS=1`` requires (the heartbeat one is Linux-only).
EXTENSIONS: Tuple[str, ...] = ("zkconsumer.wire._speedups",) + (
    ("zkconsumer.zookeeper._heartbeat",) if sys.platform.startswith("linux") else ())


@dataclass(frozen=True)
class AllowEntry:
    """One line of the allow-list: skips of node ids starting with ``prefix`` are accepted, for ``reason``."""

    prefix: str
    reason: str


@dataclass(frozen=True)
class Skip:
    nodeid: str
    reason: str
    allowed_by: Optional[AllowEntry]


def read_allowlist(path: Path) -> List[AllowEntry]:
    """The entries of ``path``; raises ``pytest.UsageError`` for an entry without a reason."""
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        prefix, _, reason = line.partition(" ")
        if not reason.strip():
            raise pytest.UsageError(f"{path}:{number}: allow-list entry {prefix!r} has no reason; "
                                    "write `NODE-ID-PREFIX  WHY IT MAY SKIP`")
        entries.append(AllowEntry(prefix, reason.strip()))
    return entries


def skip_reason(report: Union[pytest.TestReport, pytest.CollectReport]) -> str:
    """The reason pytest recorded for a skip (``longrepr`` is ``(path, line, "Skipped: why")``)."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class SkipPolicy:
    """The pytest plugin: records skips, prints them, and fails the run on one not allowed."""

    def __init__(self, allowlist_path: Optional[Path], require_extensions: bool,
                 extensions: Tuple[str, ...] = EXTENSIONS) -> None:
        self.allowlist_path = allowlist_path
        self.allowlist: List[AllowEntry] = read_allowlist(allowlist_path) if allowlist_path else []
        self.require_extensions = require_extensions
        self.extensions = extensions
        self.skips: List[Skip] = []

    @classmethod
    def from_environment(cls, rootdir: Path) -> "SkipPolicy":
        name = os.environ.get("ZKCONSUMER_SKIP_ALLOWLIST", "")
        path = (rootdir / name) if name else None
        if path is not None and not path.is_file():
            raise pytest.UsageError(f"ZKCONSUMER_SKIP_ALLOWLIST={name}: no such file under {rootdir}")
        return cls(path, os.environ.get("ZKCONSUMER_REQUIRE_EXTENSIONS", "") not in ("", "0"))

    def _allowed_by(self, nodeid: str) -> Optional[AllowEntry]:
        return next((e for e in self.allowlist if nodeid.startswith(e.prefix)), None)

    def _record(self, report: Union[pytest.TestReport, pytest.CollectReport]) -> None:
        if report.skipped:
            self.skips.append(Skip(report.nodeid, skip_reason(report), self._allowed_by(report.nodeid)))

    def not_allowed(self) -> List[Skip]:
        return [s for s in self.skips if s.allowed_by is None] if self.allowlist_path else []

    def pytest_sessionstart(self, session: Optional[pytest.Session]) -> None:
        if not self.require_extensions:
            return
        missing: List[Tuple[str, str]] = []
        for module in self.extensions:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                missing.append((module, str(exc)))
        if missing:
            raise pytest.UsageError(
                "ZKCONSUMER_REQUIRE_EXTENSIONS=1 but these C extensions cannot be imported: "
                + "; ".join(f"{m} ({why})" for m, why in missing)
                + ". Build them (bash scripts/setup-env, which needs a C compiler and Python.h) "
                  "rather than let their tests skip.")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._record(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._record(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.not_allowed() and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: "pytest.TerminalReporter") -> None:
        if not self.skips and not self.allowlist_path:
            return
        write = terminalreporter.write_line
        where = f"allow-list {self.allowlist_path.name}" if self.allowlist_path else "no allow-list: skips not enforced"
        terminalreporter.section(f"skip policy ({len(self.skips)} skipped; {where})", sep="=")
        for skip in self.skips:
            verdict = "allowed" if skip.allowed_by else ("NOT ALLOWED" if self.allowlist_path else "skipped")
            write(f"SKIP {verdict}: {skip.nodeid}: {skip.reason}")
        if self.allowlist_path:
            write(f"allow-list ({len(self.allowlist)} entries):" if self.allowlist else "allow-list: empty")
            for entry in self.allowlist:
                write(f"  {entry.prefix}  ({entry.reason})")
        bad = self.not_allowed()
        if bad:
            terminalreporter.write_line(
                f"skip policy: {len(bad)} test(s) skipped without an allow-list entry: the run fails. "
                "Install what they need (bash scripts/setup-env) or fix the test.", red=True, bold=True)
