"""``scripts/bench --compare``: other checkouts' perf rows in the same rounds, each importing its own tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.throughput import TOOLS, compared, parse_args
from benchmarks.tools import tree_env

ROOT = Path(__file__).resolve().parents[3]


def test_compare_adds_each_perf_tool_once_per_tree_and_nothing_else() -> None:
    tools = [t for t in TOOLS if t.key in ("kafka", "perf", "perf-batch")]
    out = compared(tools, [f"old={ROOT}"])
    assert [t.key for t in out] == ["kafka", "perf", "perf-batch", "perf@old", "perf-batch@old"]
    assert [t.tree for t in out[3:]] == [str(ROOT)] * 2
    assert all(t.tree is None for t in out[:3])
    assert out[3].kind == "perf" and out[4].kind == "perf-batch"
    assert out[3].label.startswith("zkconsumer perf (per message) @ old (")


@pytest.mark.parametrize("spec, problem", [("old", "expected NAME=PATH"), ("=x", "expected NAME=PATH"),
                                           ("old=/nonexistent", "not a zkconsumer checkout")])
def test_a_bad_compare_spec_is_refused_with_its_problem(spec: str, problem: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--compare", spec])
    assert problem in capsys.readouterr().err


def test_tree_env_makes_a_child_import_that_trees_package(tmp_path: Path) -> None:
    fake = tmp_path / "other"
    (fake / "zkconsumer").mkdir(parents=True)
    (fake / "zkconsumer" / "__init__.py").write_text("")
    env = tree_env(dict(os.environ, PYTHONPATH=str(ROOT)), str(fake))
    where = subprocess.run([sys.executable, "-c", "import zkconsumer; print(zkconsumer.__file__)"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where) == fake / "zkconsumer" / "__init__.py"


def test_tree_env_refuses_a_directory_without_the_package(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a zkconsumer checkout"):
        tree_env({}, str(tmp_path))


def test_compare_rows_get_a_ratio_to_the_same_consumer_of_this_checkout() -> None:
    from benchmarks.throughput import tables

    tools = compared([t for t in TOOLS if t.key == "perf"], [f"old={ROOT}"])

    def run(rate: float) -> dict:
        return {"messages": 10, "msgs_per_sec": rate, "mb_per_sec": 1.0, "seconds": 1.0, "cpu_seconds": 1.0,
                "peak_rss_mb": 1.0, "steal_pct": 0.0}

    rounds = [{"perf": run(100.0), "perf@old": run(90.0)}, {"perf": run(100.0), "perf@old": run(110.0)},
              {"perf": run(100.0), "perf@old": run(95.0)}]
    text, rows = tables(rounds, tools, "t", scaling=False)
    assert "× this checkout" in text
    old_row = next(r for r in rows if r["tool"] == "perf@old")
    assert old_row["ratios"]["× this checkout"]["median"] == pytest.approx(0.95)
