"""The built wheel and sdist install into a fresh virtualenv and work there, away from the source tree.

``python -m build`` (as CI runs it, but ``--no-isolation`` so the test needs no download) makes
an sdist and, from it, a wheel; ``check-wheel-contents`` must pass on the wheel. Each is then
installed with pip into its own new virtualenv and exercised from a directory outside the
checkout, with no ``PYTHONPATH``:

* ``import zkconsumer`` comes from the virtualenv, at the version ``zkconsumer --version`` and
  the distribution's metadata report, with ``py.typed`` in both packages;
* both C extensions (``zkconsumer.wire._speedups``, ``zkconsumer.zookeeper._heartbeat``) are
  built into it and loaded (the decoder reports itself accelerated);
* ``zkconsumer --help`` works, and ``zkconsumer consume`` reads messages produced to a topic of
  the session's cluster (the ``cluster`` fixture);
* without the ``spark`` extra, ``import spark_integration`` raises ImportError naming
  the ``pip install 'pyspark>=4.0,<5' 'pyarrow>=14'`` that installs them.

pip resolves the dependencies with ``--no-index`` (no download) against a view of this
checkout's ``.venv``: a directory of links to its installed distributions, minus this project
(the editable install) and the ``spark`` extra's pyspark and pyarrow, put on the fresh
virtualenv's path by a ``.pth`` file. So the test proves the wheel's own contents and its
declared requirements, not the source tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

from zkconsumer import __version__

ROOT = Path(__file__).resolve().parents[2]
#: Left out of the dependency view: this project itself, and what only the `spark` extra brings.
HIDDEN_PREFIXES = ("zkconsumer", "spark_integration", "__editable__", "_zkconsumer", "pyspark", "pyarrow", "py4j")
BUILD_TIMEOUT_S = 600
INSTALL_TIMEOUT_S = 600


def run(argv: List[str], cwd: Path, timeout: float = 120, env: Optional[Dict[str, str]] = None) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def clean_env() -> Dict[str, str]:
    """This environment without anything that would put the checkout or its .venv on a child's path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """``{"wheel": ..., "sdist": ...}`` built from this checkout, the wheel checked by check-wheel-contents."""
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)], ROOT, BUILD_TIMEOUT_S)
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    run([str(Path(sys.executable).parent / "check-wheel-contents"), "--config", str(ROOT / "pyproject.toml"),
         str(wheels[0])], ROOT)
    return {"wheel": wheels[0], "sdist": sdists[0]}


def test_the_license_travels_in_the_wheel_and_the_sdist(dists: Dict[str, Path]) -> None:
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0" in license_text
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        found = [n for n in wheel.namelist() if n.endswith("LICENSE") and ".dist-info/" in n]
        assert found and wheel.read(found[0]).decode() == license_text
        metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-File: LICENSE" in metadata
    with tarfile.open(dists["sdist"]) as sdist:
        assert any(m.name.endswith("/LICENSE") and m.name.count("/") == 1 for m in sdist.getmembers())


def dependency_view(target: Path) -> Path:
    """A directory of links to this .venv's installed distributions, without HIDDEN_PREFIXES and .pth files."""
    site_packages = Path(sysconfig.get_paths()["purelib"])
    target.mkdir()
    for entry in site_packages.iterdir():
        if entry.name.lower().startswith(HIDDEN_PREFIXES) or entry.suffix == ".pth":
            continue
        (target / entry.name).symlink_to(entry)
    return target


def fresh_venv(where: Path) -> Path:
    """A new virtualenv at ``where`` that sees the dependency view; returns its bin directory."""
    run([sys.executable, "-m", "venv", str(where / "venv")], where, INSTALL_TIMEOUT_S, clean_env())
    bindir = where / "venv" / "bin"
    venv_site = Path(run([str(bindir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         where, env=clean_env()).strip())
    view = dependency_view(where / "deps")
    (venv_site / "zz_dependency_view.pth").write_text(f"{view}\n")
    return bindir


PROBE = r"""
import importlib, importlib.metadata, json, pathlib, sys
import zkconsumer
from zkconsumer.wire import messageset
speedups = importlib.import_module("zkconsumer.wire._speedups")
heartbeat = importlib.import_module("zkconsumer.zookeeper._heartbeat")
try:
    import spark_integration
    spark_error = None
except ImportError as error:
    spark_error = str(error)
package = pathlib.Path(zkconsumer.__file__).parent
print(json.dumps({
    "file": zkconsumer.__file__, "version": zkconsumer.__version__,
    "metadata_version": importlib.metadata.version("zkconsumer"),
    "speedups": speedups.__file__, "heartbeat": heartbeat.__file__, "accelerated": messageset.ACCELERATED,
    "typed": [(package / "py.typed").is_file(),
              (package.parent / "spark_integration" / "py.typed").is_file()],
    "spark_error": spark_error, "path": sys.path,
}))
"""


def check_installation(bindir: Path, workdir: Path, cluster: object, make_topic: Callable[..., str], group_id: str) -> None:
    """Everything the module docstring lists, run from ``workdir`` with the virtualenv at ``bindir``."""
    import json

    env = clean_env()
    facts = json.loads(run([str(bindir / "python"), "-c", PROBE], workdir, env=env))
    venv = bindir.parent.resolve()
    assert Path(facts["file"]).resolve().is_relative_to(venv), facts["file"]
    assert not any(p and Path(p).resolve() == ROOT for p in facts["path"]), facts["path"]
    assert facts["version"] == facts["metadata_version"] == __version__
    for extension in ("speedups", "heartbeat"):
        assert Path(facts[extension]).resolve().is_relative_to(venv) and facts[extension].endswith(".so"), facts
    assert facts["accelerated"] is True
    assert facts["typed"] == [True, True]
    assert facts["spark_error"] and "pip install 'pyspark>=4.0,<5' 'pyarrow>=14'" in facts["spark_error"], facts["spark_error"]

    assert "consume" in run([str(bindir / "zkconsumer"), "--help"], workdir, env=env)
    assert run([str(bindir / "zkconsumer"), "--version"], workdir, env=env).strip() == f"zkconsumer {__version__}"

    topic = make_topic(partitions=2)
    values = [f"installed-{i}".encode() for i in range(20)]
    cluster.produce(topic, values)  # type: ignore[attr-defined]
    out = run([str(bindir / "zkconsumer"), "consume", "--zookeeper", cluster.zk_connect,  # type: ignore[attr-defined]
               "--group", group_id, "--topic", topic, "--from-beginning", "--max-messages", str(len(values)),
               "--timeout-ms", "60000"], workdir, timeout=180, env=env)
    assert sorted(out.encode().splitlines()) == sorted(values)


def test_the_wheel_installs_into_a_fresh_virtualenv_and_consumes(dists: Dict[str, Path], tmp_path: Path, cluster: object,
                                                                  make_topic: Callable[..., str], group_id: str) -> None:
    bindir = fresh_venv(tmp_path)
    run([str(bindir / "pip"), "install", "--no-index", str(dists["wheel"])], tmp_path, INSTALL_TIMEOUT_S, clean_env())
    check_installation(bindir, tmp_path, cluster, make_topic, group_id)


def test_the_sdist_builds_and_installs_into_a_fresh_virtualenv_and_consumes(
        dists: Dict[str, Path], tmp_path: Path, cluster: object, make_topic: Callable[..., str], group_id: str) -> None:
    bindir = fresh_venv(tmp_path)
    # --no-build-isolation: the build uses setuptools and wheel from the dependency view, not a download.
    run([str(bindir / "pip"), "install", "--no-index", "--no-build-isolation", str(dists["sdist"])], tmp_path,
        INSTALL_TIMEOUT_S, clean_env())
    check_installation(bindir, tmp_path, cluster, make_topic, group_id)
