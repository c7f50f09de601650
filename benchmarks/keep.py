"""Keep a benchmark run as a result file: its command, commit, date and machine beside what it measured.

Usage (always under the machine's benchmark lock, so two benchmarks never overlap)::

    flock /tmp/zkconsumer-bench.lock scripts/bench-keep NAME -- scripts/bench --rounds 3 ...

runs the command from the checkout's root. Where the command writes its measurements to a
file, an argument ``{json}`` stands for that file (``... --json {json}``); ``scripts/bench`` gets
``--json FILE`` appended without it. Otherwise the last stdout line that parses as a JSON object
is the data (``scripts/bench-rebalance`` and ``scripts/chaos`` print one). It then writes ``benchmarks/results/NAME.json``:

``command``
    the command line as given, from the checkout's root;
``commit``, ``uncommitted``
    ``git rev-parse HEAD`` and the files under the measured code (``zkconsumer/``,
    ``spark_integration/``, ``benchmarks/``, ``scripts/``, ``setup.py``) that differed from it
    when the run started (empty for a clean run);
``started``, ``finished``, ``elapsed_seconds``
    UTC ISO-8601 times of the run;
``machine``
    CPU model and count, memory, kernel and Python version;
``load``, ``steal_pct``
    the 1/5/15-minute load averages before and after, and the machine's CPU steal over the run;
``report``
    the command's stdout (its Markdown tables);
``data``
    the measurements.

The documentation's performance page is generated from these files (``scripts/docs_hooks.py``), so a
figure on it always names the run it came from. A command that fails leaves no result file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from .report import read_cpu_times, steal_percent

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
MEASURED_PATHS = ("zkconsumer", "spark_integration", "benchmarks", "scripts", "setup.py")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def uncommitted() -> List[str]:
    """Files of the measured code that differ from HEAD (result files themselves excluded)."""
    lines = _git("status", "--porcelain", "--", *MEASURED_PATHS).splitlines()
    return sorted(p for p in (line[3:] for line in lines) if not p.startswith("benchmarks/results/"))


def machine() -> Dict[str, Any]:
    """What the figures depend on: CPU model and count, memory, kernel, Python."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib: Optional[float] = None
    try:
        kib = int(Path("/proc/meminfo").read_text().split("MemTotal:", 1)[1].split()[0])
        memory_gib = round(kib / 1024 / 1024, 1)
    except (OSError, IndexError, ValueError):
        pass
    return {"cpu_model": model, "cpus": os.cpu_count(), "memory_gib": memory_gib,
            "kernel": platform.release(), "python": platform.python_version(),
            "shared": "a shared machine: other engineers' JVMs and tests may run beside the benchmark"}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def last_json_line(text: str) -> Any:
    """The last line of ``text`` that parses as a JSON object; ValueError if there is none."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise ValueError("the command printed no JSON object line")


def keep(name: str, command: Sequence[str]) -> Path:
    """Run ``command`` from the checkout's root and write ``benchmarks/results/<name>.json``; returns its path.

    Raises RuntimeError when the command exits non-zero (nothing is written then).
    """
    RESULTS.mkdir(parents=True, exist_ok=True)
    record: Dict[str, Any] = {
        "name": name, "command": " ".join(command), "commit": _git("rev-parse", "HEAD").strip(),
        "uncommitted": uncommitted(), "started": _now(), "machine": machine(),
        "load": {"before": list(os.getloadavg())},
    }
    cpu_before, began = read_cpu_times(), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-keep-") as tmp:
        json_file = Path(tmp) / "results.json"
        argv = [str(json_file) if arg == "{json}" else arg for arg in command]
        uses_json_flag = "{json}" in command
        if Path(argv[0]).name == "bench" and not uses_json_flag:
            argv += ["--json", str(json_file)]
            uses_json_flag = True
        done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.stdout.write(done.stdout)
            raise RuntimeError(f"{record['command']} exited with {done.returncode}; no result file written")
        data = json.loads(json_file.read_text()) if uses_json_flag else last_json_line(done.stdout)
    record.update({
        "finished": _now(), "elapsed_seconds": round(time.monotonic() - began, 1),
        "steal_pct": steal_percent(cpu_before, read_cpu_times()), "report": done.stdout, "data": data,
    })
    record["load"]["after"] = list(os.getloadavg())
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-keep", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("name", help="the result file's name: benchmarks/results/NAME.json")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the benchmark command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    try:
        print(keep(args.name, command))
    except RuntimeError as error:
        print(f"bench-keep: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
