"""The documentation site, built strict by ``scripts/docs`` and opened in a real headless browser.

The site is built once per session into a temporary directory. Debian's ``chromium``
(installed by ``scripts/setup-env``) then loads three pages from disk, with a fresh profile and
every background service off, and the DOM it rendered (``--dump-dom``, after the page's
scripts ran) must show:

* the home page: its title and the navigation with every top-level section;
* the API page of ``ZookeeperConsumerConnector``: the class heading and its documented methods;
* the configuration page: a table row for every property in ``zkconsumer.config.PROPERTIES``.

Served over HTTP on loopback and driven by Playwright (the same chromium), the site must also
let a reader search (``commit_offsets`` finds the connector's API page), fit its widest tables
and longest code lines in a 1280 px window (measured in the browser: nothing is cut off at the
edge), show the version in every page's footer and each API object's source, and format long
signatures over several lines.

Each page's screenshot is kept as a test artefact in ``build/test-artifacts/docs/``
(``$ZKCONSUMER_TEST_ARTIFACTS/docs/`` when set): ``home.png``, ``api-connector.png``,
``configuration.png``, ``search.png``, ``wide-tables.png``. Besides: the API reference documents exactly the names each package's
``__all__`` exports (read from the built ``objects.inv``), and no built page loads anything
from another host.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1280,1600", "--virtual-time-budget=5000"]
BROWSER_TIMEOUT_S = 120
BUILD_TIMEOUT_S = 600


def artefact_dir() -> Path:
    base = Path(os.environ.get("ZKCONSUMER_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))
    path = base / "docs"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strict by scripts/docs (the command CI runs) into a temporary directory."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(["bash", str(ROOT / "scripts" / "docs"), "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, f"scripts/docs failed:\n{done.stdout}\n{done.stderr}"
    return out


def chromium() -> str:
    path = shutil.which("chromium")
    assert path, "Debian's chromium is missing: run scripts/setup-env (it installs the apt package chromium)"
    return path


def browse(page: Path, profile: Path, *action: str) -> "subprocess.CompletedProcess[str]":
    """Run headless chromium on ``page`` with ``action`` (``--dump-dom`` or ``--screenshot=F``)."""
    done = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *action, page.as_uri()],
                          capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)
    assert done.returncode == 0, f"chromium failed on {page}:\n{done.stderr[-3000:]}"
    return done


def png_size(data: bytes) -> Tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.fixture
def render(site: Path, tmp_path: Path) -> Iterator[Callable[[str, str], str]]:
    """``render(path, name)``: the DOM chromium rendered for the site page, its screenshot kept as ``name``.png."""

    def _render(relative: str, name: str) -> str:
        page = site / relative
        assert page.exists(), page
        dom = browse(page, tmp_path / f"profile-{name}-dom", "--dump-dom").stdout
        shot = artefact_dir() / f"{name}.png"
        shot.unlink(missing_ok=True)
        browse(page, tmp_path / f"profile-{name}-shot", f"--screenshot={shot}")
        data = shot.read_bytes()
        assert png_size(data) == (1280, 1600)
        # A blank or unstyled page compresses to a few kilobytes; a rendered page with text is far larger.
        assert len(data) > 30_000, f"{shot} is {len(data)} bytes: nothing rendered?"
        return dom

    yield _render


def test_the_home_page_renders_with_its_navigation(render: Callable[[str, str], str]) -> None:
    dom = render("index.html", "home")
    assert re.search(r"<h1[^>]*>zkconsumer", dom)
    for section in ("Getting started", "Consumer guide", "Spark", "Operations", "Monitoring",
                    "Guarantees under faults", "Performance", "Migration from Kafka", "Architecture",
                    "API reference"):
        assert section in dom, section
    assert "create_message_streams" in dom  # the example code block


def test_the_connector_api_page_renders_the_class_and_its_methods(render: Callable[[str, str], str]) -> None:
    dom = render("reference/connector/index.html", "api-connector")
    assert 'id="zkconsumer.ZookeeperConsumerConnector"' in dom
    for method in ("create_message_streams", "create_message_streams_by_filter", "commit_offsets", "shutdown",
                   "metrics_snapshot"):
        assert f'id="zkconsumer.ZookeeperConsumerConnector.{method}"' in dom, method
    assert "A member of a consumer group" in dom  # the class docstring


def test_the_configuration_page_renders_a_row_per_property(render: Callable[[str, str], str]) -> None:
    from zkconsumer.config import PROPERTIES

    dom = render("configuration/index.html", "configuration")
    rows = re.findall(r"<tr>\s*<td><code>([a-z.]+)</code></td>", dom)
    assert sorted(rows) == sorted(PROPERTIES)
    assert "<th>default</th>" in dom


def inventory(site: Path) -> Set[str]:
    """Python object names in the site's ``objects.inv`` (Sphinx inventory v2)."""
    data = (site / "objects.inv").read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = data.index(b"\n", header_end) + 1
    lines = zlib.decompress(data[header_end:]).decode().splitlines()
    return {line.split(" ", 1)[0] for line in lines if " py:" in line}


@pytest.mark.parametrize("package", ["zkconsumer", "spark_integration", "zkconsumer.testing"])
def test_the_api_reference_documents_exactly_each_packages_all(site: Path, package: str) -> None:
    init = ROOT / package.replace(".", "/") / "__init__.py"
    tree = ast.parse(init.read_text())
    exported = next(set(ast.literal_eval(node.value)) for node in tree.body if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets))
    depth = package.count(".") + 1
    documented = {name.rsplit(".", 1)[1] for name in inventory(site)
                  if name.startswith(package + ".") and name.count(".") == depth}
    assert exported == documented


def test_no_page_loads_anything_from_another_host(site: Path) -> None:
    external: Dict[str, List[str]] = {}
    for page in site.rglob("*.html"):
        html = page.read_text()
        loads = re.findall(r'<(?:script|img|iframe)\b[^>]*src="((?:https?:)?//[^"]+)"', html)
        loads += re.findall(r'<link\b[^>]*rel="stylesheet"[^>]*href="((?:https?:)?//[^"]+)"', html)
        if loads:
            external[str(page.relative_to(site))] = loads
    assert not external


# ------------------------------------------------ the site as a reader uses it: served, searched, read


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on loopback (search's worker cannot load its index from a file:
    URL): its base URL."""
    import functools
    import http.server
    import threading

    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        assert not thread.is_alive()


class QuietHandler(__import__("http.server").server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Debian's chromium driven by Playwright (the Python package; no browser is downloaded)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium(), args=[
            flag for flag in CHROMIUM_FLAGS if flag not in ("--headless",) and not flag.startswith(("--window-size",
                                                                                                    "--virtual-time"))])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    """A fresh page of a 1280 x 1600 window."""
    context = browser.new_context(viewport={"width": 1280, "height": 1600})  # type: ignore[attr-defined]
    try:
        yield context.new_page()
    finally:
        context.close()


OVERFLOW = """() => {
  const wide = [];
  document.querySelectorAll('.md-typeset table, .md-typeset pre > code').forEach((element) => {
    const box = element.tagName === 'TABLE' ? (element.closest('.md-typeset__scrollwrap') || element.parentElement)
                                            : element;
    if (element.scrollWidth > box.clientWidth + 1) {
      wide.push(`${element.tagName} ${element.scrollWidth}px in ${box.clientWidth}px: `
                + element.textContent.trim().slice(0, 60));
    }
  });
  return wide;
}"""


#: True once the search shows its result count and at least one result.
SEARCH_ANSWERED = """() => {
  const meta = document.querySelector('.md-search-result__meta');
  return !!meta && /\\d+ matching documents?/.test(meta.textContent)
         && !!document.querySelector('.md-search-result__item');
}"""


def test_search_finds_a_method_by_name(served: str, page: object) -> None:
    """Typed again every 5 s until answered (60 s at most): a query typed while the search index
    is still loading (a busy machine) is not always taken up once it is ready."""
    page.goto(served)  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while True:
        page.fill("input.md-search__input", "")  # type: ignore[attr-defined]
        page.fill("input.md-search__input", "commit_offsets")  # type: ignore[attr-defined]
        try:
            page.wait_for_function(SEARCH_ANSWERED, timeout=5_000)  # type: ignore[attr-defined]
            break
        except Exception as exc:  # playwright's TimeoutError
            if time.monotonic() > deadline:
                page.screenshot(path=str(artefact_dir() / "search-unanswered.png"))  # type: ignore[attr-defined]
                meta = page.eval_on_selector_all(".md-search-result__meta", "m => m.map(e => e.textContent)")  # type: ignore[attr-defined]
                raise AssertionError(f"no search result for commit_offsets within 60 s; the result line says {meta}") from exc
    meta = page.inner_text(".md-search-result__meta")  # type: ignore[attr-defined]
    assert re.match(r"\d+ matching documents?", meta), meta
    links = page.eval_on_selector_all(".md-search-result__item a", "links => links.map(a => a.href)")  # type: ignore[attr-defined]
    assert any("reference/connector/" in link for link in links), links
    page.screenshot(path=str(artefact_dir() / "search.png"))  # type: ignore[attr-defined]


@pytest.mark.parametrize("path", ["latency/", "MONITORING/", "operations/", "performance/", "configuration/",
                                  "reference/connector/"])
def test_wide_tables_and_long_code_lines_fit_a_1280_px_window(served: str, page: object, path: str) -> None:
    """Nothing is cut off at the window's edge: every table fits its box, and every code block its
    width (long lines wrap). The metrics, CLI-option and performance tables are the widest."""
    page.goto(served + path)  # type: ignore[attr-defined]
    assert page.evaluate(OVERFLOW) == []  # type: ignore[attr-defined]
    if path == "latency/":
        page.screenshot(path=str(artefact_dir() / "wide-tables.png"))  # type: ignore[attr-defined]


def test_every_page_shows_the_version_and_api_pages_show_the_source(served: str, page: object) -> None:
    from zkconsumer import __version__

    for path in ("", "consumer/", "reference/connector/"):
        page.goto(served + path)  # type: ignore[attr-defined]
        assert f"zkconsumer {__version__}" in page.inner_text("footer")  # type: ignore[attr-defined]
    assert page.locator("details.mkdocstrings-source summary", has_text="Source code in").count() > 0  # type: ignore[attr-defined]


def test_long_signatures_are_formatted_over_several_lines(served: str, page: object) -> None:
    """The signatures mkdocstrings renders are formatted (by ruff, in the docs extra), not one
    clipped line: the connector's ``__init__`` takes several parameters, one per line."""
    page.goto(served + "reference/connector/")  # type: ignore[attr-defined]
    signatures = page.eval_on_selector_all(".doc-signature", "nodes => nodes.map(n => n.innerText)")  # type: ignore[attr-defined]
    assert signatures
    assert any(len(s.strip().splitlines()) > 2 for s in signatures), signatures[:3]
