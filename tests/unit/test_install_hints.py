"""Every install hint works as written: nothing tells a user to install zkconsumer from the index.

No package named zkconsumer is published (and anyone could publish one under that name), so a
hint installs from a built wheel (``dist/zkconsumer-...whl``), a source tree (``.``), or names the
third-party distributions themselves (``pip install 'pyspark>=4.0,<5'``), with setup.cfg's
requirements. The README is also the package's long description, shown by an index away from
this repository: its links must be absolute (there is no public home to point at, so it has none).
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[2]
#: `pip install` followed by a requirement naming this project: from the index, never installable.
FROM_INDEX = re.compile(r"pip install\s+(?:-[-\w]+\s+)*['\"]?zkconsumer\b")


def texts() -> Dict[str, str]:
    paths: List[Path] = [ROOT / "README.md", ROOT / "RELEASING.md", ROOT / "setup.cfg"]
    for folder, pattern in (("docs", "*.md"), ("zkconsumer", "*.py"), ("spark_integration", "*.py"),
                            ("tests", "*.py"), ("scripts", "*"), ("benchmarks", "*.py")):
        paths += [p for p in (ROOT / folder).rglob(pattern) if p.is_file() and "__pycache__" not in p.parts]
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8", errors="replace") for p in paths if p.exists()}


def test_no_hint_installs_zkconsumer_from_the_index() -> None:
    offenders = [f"{name}: {m.group(0)}" for name, text in texts().items() for m in FROM_INDEX.finditer(text)
                 if name != "tests/unit/test_install_hints.py"]
    assert not offenders, offenders


def test_the_spark_import_error_names_setup_cfgs_requirements() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    spark_extra = [line.split("#")[0].strip() for line in config["options.extras_require"]["spark"].splitlines()]
    source = (ROOT / "spark_integration" / "__init__.py").read_text()
    for name in ("pyspark", "pyarrow"):
        requirement = next(r for r in spark_extra if re.match(rf"{name}\b", r))
        assert f'"{name}": "{requirement}"' in source, (name, requirement)


def test_the_readme_has_no_relative_links() -> None:
    """Relative links break on a package index page, where the README is the long description."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", readme) + re.findall(r"^\[[^\]]+\]:\s*(\S+)", readme, re.M)
    relative = [t for t in targets if not re.match(r"[a-z][a-z+.-]*://", t)]
    assert not relative, relative
