"""MkDocs hook of the documentation site: the tables that must not drift from the code, generated at build time.

A page asks for a table with an HTML comment on a line of its own, replaced before the
page is rendered:

``<!-- generated: config -->``
    every consumer property from :data:`zkconsumer.config.PROPERTIES` (Kafka's, then zkconsumer's);
``<!-- generated: cli -->``
    every ``zkconsumer`` command, its usage and options, from :func:`zkconsumer.cli.build_parser`;
``<!-- generated: metrics consumer -->`` / ``<!-- generated: metrics exporter -->``
    the metric families a consumer / the lag exporter exposes, read from the source of
    ``zkconsumer/metrics/prometheus.py`` / ``exporter.py`` (name, type, labels, help);
``<!-- generated: results NAME -->``
    the kept benchmark run ``benchmarks/results/NAME.json`` (written by ``scripts/bench-keep``):
    its tables (throughput, latency with CPU per message, or sessions through a freeze), then its
    command, commit, date, machine, load and steal.

Every page's footer shows the version the site documents (``setup.cfg``'s, by :func:`on_config`).

An unknown marker or a missing result file fails the build (``PluginError``), so a page
cannot silently lose a table. Loaded by ``mkdocs.yml`` (``hooks:``); ``scripts/docs`` builds.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
MARKER = re.compile(r"^<!-- generated: ([a-z-]+)(?: ([A-Za-z0-9_.-]+))? -->$", re.MULTILINE)


def _cell(text: str) -> str:
    """``text`` safe in a Markdown table cell: no column breaks, links or HTML tags."""
    return (text.replace("|", "\\|").replace("[", "\\[").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\n", " "))


# --------------------------------------------------------------------------- configuration

def config_table() -> str:
    """Two Markdown tables: Kafka 0.8.2.2's consumer properties, then zkconsumer's own."""
    from zkconsumer.config import PROPERTIES

    def kind(prop: Any) -> str:
        if prop.choices:
            return " \\| ".join(f"`{c}`" for c in prop.choices)
        return prop.type

    out: List[str] = []
    for title, kafka in (("Kafka 0.8.2.2's consumer properties", True), ("zkconsumer's own properties", False)):
        out += [f"### {title}", "", "| property | type | default | meaning |", "|---|---|---|---|"]
        for prop in PROPERTIES.values():
            if prop.kafka == kafka:
                out.append(f"| `{prop.name}` | {kind(prop)} | `{_cell(prop.default_text)}` | {_cell(prop.doc)} |")
        out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------- command line

def _subcommands(parser: argparse.ArgumentParser) -> Iterator[Tuple[str, argparse.ArgumentParser, str]]:
    """(full name, parser, help) of every leaf command under ``parser``, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                nested = list(_subcommands(sub))
                if nested:
                    yield from ((f"{name} {n}", p, h) for n, p, h in nested)
                else:
                    yield name, sub, helps.get(name, "")


def _option_row(action: argparse.Action) -> Optional[str]:
    if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
        return None
    if action.option_strings:
        names = ", ".join(f"`{s}`" for s in action.option_strings)
    else:
        names = f"`{action.metavar or action.dest}`"
    value = ""
    if action.nargs != 0:
        if action.choices is not None:
            value = " \\| ".join(f"`{c}`" for c in action.choices)
        else:
            metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
            value = f"`{metavar}`"
    default = ""
    if action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0:
        default = f"`{action.default}`"
    required = "yes" if action.required else ""
    help_text = (action.help or "").replace("%(default)s", str(action.default)).replace("%%", "%")
    return f"| {names} | {value} | {default} | {required} | {_cell(help_text)} |"


def cli_reference() -> str:
    """One section per ``zkconsumer`` command: its help, usage and an options table."""
    from zkconsumer.cli import build_parser

    parser = build_parser()
    out: List[str] = []
    for name, sub, help_text in _subcommands(parser):
        sub.prog = f"zkconsumer {name}"
        usage = sub.format_usage().replace("usage: ", "", 1).strip()
        out += [f"### `zkconsumer {name}`", "", _cell(help_text or sub.description or ""), "",
                "```", usage, "```", "",
                "| option | value | default | required | meaning |", "|---|---|---|---|---|"]
        out += [row for row in (_option_row(a) for a in sub._actions) if row]
        out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------- metrics

_FAMILY_TYPES = {"GaugeMetricFamily": "gauge", "CounterMetricFamily": "counter", "Histogram": "histogram",
                 "HistogramMetricFamily": "histogram", "SummaryMetricFamily": "summary",
                 "EventCounter": "counter"}  # a row of zkconsumer.metrics.consumer.EVENT_COUNTERS
#: What ``labels=names`` (the collector's common labels) stands for in each module.
_COMMON_LABELS = {"consumer": ["group", "client_id", "consumer_id"], "exporter": []}
_MODULES = {"consumer": ("zkconsumer/metrics/prometheus.py", "zkconsumer/metrics/consumer.py"),
            "exporter": ("zkconsumer/monitoring/exporter.py",)}


def _value(node: ast.AST, env: Dict[str, Any]) -> Any:
    """A string, list of strings or f-string built from constants and ``env``; None if not static."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.List):
        items = [_value(e, env) for e in node.elts]
        return None if any(i is None for i in items) else items
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _value(node.left, env), _value(node.right, env)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "list" and node.args:
        return _value(node.args[0], env)
    if isinstance(node, ast.JoinedStr):
        parts = [_value(v.value if isinstance(v, ast.FormattedValue) else v, env) for v in node.values]
        return None if any(p is None for p in parts) else "".join(parts)
    return None


def metric_families(kind: str) -> List[Dict[str, Any]]:
    """(name, type, labels, help) of each metric family the modules of ``kind`` build, sorted by name."""
    env: Dict[str, Any] = {"names": _COMMON_LABELS[kind], "base": _COMMON_LABELS[kind]}
    trees = {module: ast.parse((ROOT / module).read_text()) for module in _MODULES[kind]}
    for tree in trees.values():  # module constants, shared: one module imports another's prefix
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value = _value(node.value, env)
                if value is not None:
                    env[node.targets[0].id] = value
    families: List[Dict[str, Any]] = []
    for module, tree in trees.items():
        families += _module_families(kind, module, tree, env)
    families.sort(key=lambda f: f["name"])
    return families


def _module_families(kind: str, module: str, tree: ast.Module, env: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The families one module builds: in its functions, and in module-level tables (``EventCounter(...)``
    rows). A family built from a table row (``CounterMetricFamily(row.name, row.help)``) is the table's."""
    families: List[Dict[str, Any]] = []
    tables = [n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))]
    scopes: List[ast.AST] = [ast.Module(body=list(tables), type_ignores=[])]
    scopes += [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for function in scopes:
        local = dict(env)
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value = _value(node.value, local)
                if value is not None and node.targets[0].id not in ("names",):
                    local[node.targets[0].id] = value
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            kind_name = call.func.id if isinstance(call.func, ast.Name) else None
            if kind_name not in _FAMILY_TYPES or len(call.args) < 2 or isinstance(call.args[0], ast.Attribute):
                continue
            name, help_text = _value(call.args[0], local), _value(call.args[1], local)
            labels: List[str] = []
            for keyword in call.keywords:
                if keyword.arg in ("labels", "labelnames"):
                    labels = _value(keyword.value, local) or []
            if name is None or help_text is None:
                raise PluginError(f"{module}:{call.lineno}: cannot read the metric's name or help statically")
            mtype = _FAMILY_TYPES[kind_name]
            families.append({"name": name + ("_total" if mtype == "counter" else ""), "type": mtype,
                             "labels": [x for x in labels if x not in _COMMON_LABELS[kind]], "help": help_text})
    return families


def metrics_table(kind: str) -> str:
    """The Markdown table of :func:`metric_families`."""
    if kind not in _MODULES:
        raise PluginError(f"unknown metrics table {kind!r} (known: {', '.join(_MODULES)})")
    common = _COMMON_LABELS[kind]
    lines = []
    if common:
        lines += ["Every series also has the labels " + ", ".join(f"`{c}`" for c in common) + ".", ""]
    lines += ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for f in metric_families(kind):
        labels = ", ".join(f"`{x}`" for x in f["labels"])
        lines.append(f"| `{f['name']}` | {f['type']} | {labels} | {_cell(f['help'])} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- kept benchmark results

def _range(values: Sequence[float]) -> str:
    return f"{min(values):.2f}–{max(values):.2f}" if len(values) > 1 else ""


def _throughput_tables(data: Dict[str, Any]) -> List[str]:
    runs = [m for topic in data["topics"] for r in topic["rounds"] for m in r.values()]
    loads = [x for m in runs for x in m.get("load", [])]
    steals = [m["steal_pct"] for m in runs if m.get("steal_pct") is not None]
    out: List[str] = []
    if loads:
        out += [f"Over its {len(runs)} timed runs: 1-minute load average {min(loads):.1f} to {max(loads):.1f}"
                + (f", CPU steal {min(steals):.1f} to {max(steals):.1f} % per run." if steals else "."), ""]
    reference = "× 1 stream" if data.get("scaling") else "× confluent"
    for topic in data["topics"]:
        out += [f"**{topic['size']}-byte messages, compression {topic['codec']}, N = {topic['messages']:,}**", "",
                f"| consumer | msgs/s, median (min–max) | × Kafka, median (range) | {reference} | CPU s per M msgs "
                "| peak RSS MB | timed s | steal % |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for row in topic["rows"]:
            ratios = row.get("ratios", {})

            def ratio(col: str, ratios: Dict[str, Any] = ratios) -> str:
                r = ratios.get(col)
                if not r:
                    return "–"
                spread = _range(r["rounds"])
                return f"{r['median']:.2f}" + (f" ({spread})" if spread else "")

            short = " †" if row["seconds"] < 10 else ""
            steal = "–" if row.get("steal_pct") is None else f"{row['steal_pct']:.1f}"
            out.append(f"| {row['label']} | {row['msgs_per_sec']:,.0f} ({row['msgs_per_sec_min']:,.0f}–"
                       f"{row['msgs_per_sec_max']:,.0f}) | {ratio('× Kafka')} | {ratio(reference)} | "
                       f"{row['cpu_per_million']:.2f} | {row['peak_rss_mb']:.0f} | {row['seconds']:.1f}{short} | "
                       f"{steal} |")
        out.append("")
        if any(row["seconds"] < 10 for row in topic["rows"]):
            out += ["† a timed window under 10 s: not a steady-state figure.", ""]
    return out


_LATENCY_KINDS = ("zkconsumer", "zkconsumer-batch", "kafka", "confluent", "floor")


def _latency_table(data: Dict[str, Any]) -> List[str]:
    """One row per rate, setting and consumer of ``scripts/bench-latency``: latency, the floor of its phase
    beside it, and CPU (seconds per million messages; at rate 0, the idle phase, the share of one core)."""
    rows = []
    for ph in data["phases"]:
        floor = next((r for r in ph["results"] if r["kind"] == "floor"), {})
        for r in ph["results"]:
            if r["kind"] != "floor" or len(ph["results"]) == 1:
                order = _LATENCY_KINDS.index(r["kind"]) if r["kind"] in _LATENCY_KINDS else len(_LATENCY_KINDS)
                rows.append(((ph["rate"], ph["setting"], order, ph["position"]), ph, r, floor))
    out = ["| rate (msg/s) | setting | consumer | p50 ms | p99 ms | max ms | floor p99 ms | CPU | load |",
           "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for _, ph, r, floor in sorted(rows, key=lambda row: row[0]):
        if ph["rate"] == 0:
            cpu = "–" if r.get("cpu_s") is None else f"{100.0 * r['cpu_s'] / ph['seconds']:.2f} % of a core"
        else:
            cpu = "–" if r.get("cpu_s_per_m") is None else f"{r['cpu_s_per_m']:.1f} s/M"

        def ms(key: str, row: Dict[str, Any] = r) -> str:
            return "–" if row.get(key) is None else f"{row[key]:.1f}"

        out.append(f"| {ph['rate']:,} | {ph['setting']} | {r['kind']} | {ms('p50_ms')} | {ms('p99_ms')} | "
                   f"{ms('max_ms')} | {ms('p99_ms', floor)} | {cpu} | {ph['load'][1]} |")
    return out + [""]


_HEADER_KEYS = {"name", "benchmark", "command", "commit", "uncommitted", "started", "finished", "date",
                "elapsed_seconds", "machine", "load", "load_average", "steal_pct", "report", "data"}


def _provenance(name: str, record: Dict[str, Any]) -> List[str]:
    """Command, commit, date, machine, load and steal of a kept run.

    Reads ``scripts/bench-keep``'s records and the plainer form some benchmarks write themselves
    (``date``, ``load_average``, ``machine.platform``); a record without command, commit, date or
    machine fails the build.
    """
    missing = [k for k in ("command", "commit", "machine") if k not in record]
    if missing or not ("started" in record or "date" in record):
        raise PluginError(f"benchmarks/results/{name}.json lacks {', '.join(missing) or 'a date'}")
    m = record["machine"]
    dirty = record.get("uncommitted") or []
    lines = [f"Command: `{record['command']}`  ",
             f"Commit: `{record['commit'][:12]}`" + (f" plus uncommitted changes to {', '.join(dirty)}" if dirty
                                                     else "") + "  "]
    if "started" in record:
        lines.append(f"Run: {record['started']} to {record['finished']} ({record['elapsed_seconds'] / 60:.0f} min)  ")
    else:
        lines.append(f"Run: {record['date']}  ")
    if "cpu_model" in m:
        lines.append(f"Machine: {m['cpus']} × {m['cpu_model'] or 'CPU'}, {m['memory_gib']} GiB, Linux {m['kernel']}, "
                     f"Python {m['python']}; {m['shared']}  ")
    else:
        lines.append("Machine: " + ", ".join(f"{k} {v}" for k, v in m.items()) + "  ")
    steal = "unknown" if record.get("steal_pct") is None else f"{record['steal_pct']:.1f} %"
    load = record.get("load")
    if isinstance(load, dict):
        lines.append(f"Load average (1/5/15 min) before {' / '.join(f'{x:.1f}' for x in load['before'])}, after "
                     f"{' / '.join(f'{x:.1f}' for x in load['after'])}; CPU steal over the run {steal}  ")
    elif "load_average" in record:
        lines.append(f"Load average (1 min) {record['load_average']:.1f}; CPU steal over the run {steal}  ")
    lines += [f"Result file: `benchmarks/results/{name}.json`", ""]
    return lines


def _freeze_table(record: Dict[str, Any]) -> List[str]:
    """``lost`` and ``tried`` per kind and freeze length (``scripts/bench-freeze``)."""
    freezes = sorted({f for per_kind in record["tried"].values() for f in per_kind}, key=float)
    out = ["| sessions lost / tried | " + " | ".join(f"frozen {f} s" for f in freezes) + " |",
           "|---|" + "---:|" * len(freezes)]
    for kind, tried in record["tried"].items():
        lost = record["lost"].get(kind, {})
        out.append(f"| {kind} | " + " | ".join(f"{lost.get(f, '–')} / {tried.get(f, '–')}" for f in freezes) + " |")
    return out + [""]


def results_section(name: str) -> str:
    """The kept run ``benchmarks/results/<name>.json``: what it measured, then where it came from."""
    path = RESULTS / f"{name}.json"
    if not path.exists():
        raise PluginError(f"no kept result {path.relative_to(ROOT)} (make it with scripts/bench-keep)")
    record = json.loads(path.read_text())
    provenance = ["Measured on:", ""] + _provenance(name, record)  # checked first: a record without it fails
    lines: List[str] = []
    data = record.get("data")
    if isinstance(data, dict) and "topics" in data:
        lines += _throughput_tables(data)
    elif isinstance(data, dict) and "phases" in data:
        lines += _latency_table(data)
    elif "report" in record:
        report = "\n".join(line for line in record["report"].splitlines() if not line.lstrip().startswith("{"))
        lines += ["The command's report:", "", "```", report.strip("\n"), "```", ""]
    elif "lost" in record and "tried" in record:
        lines += _freeze_table(record)
    else:  # a form this page has no table for yet: its measurements as kept
        rest = {k: v for k, v in record.items() if k not in _HEADER_KEYS}
        lines += ["The measurements as kept:", "", "```json", json.dumps(rest, indent=1), "```", ""]
    return "\n".join(lines + provenance)  # the figures first, then the machine, load and command behind them


# --------------------------------------------------------------------------- the hook

def render(kind: str, argument: Optional[str]) -> str:
    """The Markdown a marker stands for; PluginError for an unknown one."""
    if kind == "config":
        return config_table()
    if kind == "cli":
        return cli_reference()
    if kind == "metrics" and argument:
        return metrics_table(argument)
    if kind == "results" and argument:
        return results_section(argument)
    raise PluginError(f"unknown generated table {kind!r} {argument or ''}")


def project_version() -> str:
    """``zkconsumer.__version__``, which ``setup.cfg`` builds the wheel and the sdist as (read, not imported)."""
    found = re.search(r'^__version__ = "([^"]+)"', (ROOT / "zkconsumer" / "__init__.py").read_text(), re.MULTILINE)
    if found is None:
        raise PluginError("zkconsumer/__init__.py declares no __version__")
    return found.group(1)


def on_config(config: Any, **kwargs: Any) -> Any:
    """The footer of every page: the version documented, its license, and where its source is."""
    config["copyright"] = (f"zkconsumer {project_version()} · Apache License 2.0 · the source is in the sdist "
                           "(zkconsumer-*.tar.gz) and shown under each object of the API reference")
    return config


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """MkDocs hook: each marker replaced by its table."""
    return MARKER.sub(lambda m: render(m.group(1), m.group(2)), markdown)
