"""Every Python example of README.md and the documentation is run by a test or says why not.

The examples are run against a real cluster by ``tests/integration/test_doc_examples.py``; this
pure check keeps the list honest without a JVM: a runnable example parses and uses no name
beyond the documented placeholders (``doc_examples.PLACEHOLDERS``), and a marked one gives a
reason. See ``tests/docs/doc_examples.py`` for the marker and how the placeholders are filled.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_examples import PLACEHOLDERS, Example, collect, filled, free_names  # noqa: E402


def test_every_example_is_run_or_marked_with_a_reason() -> None:
    examples = collect()
    assert len(examples) >= 25, [e.id for e in examples]
    problems = []
    for example in examples:
        if example.not_run is not None:
            if len(example.not_run.split()) < 3:
                problems.append(f"{example.id}: say why it is not run, in words: {example.not_run!r}")
            continue
        try:
            unknown = free_names(example.code) - set(PLACEHOLDERS)
        except SyntaxError as exc:
            problems.append(f"{example.id}: not Python ({exc}); complete it or mark it not run")
            continue
        if unknown:
            problems.append(f"{example.id}: uses {sorted(unknown)} without defining them; define them, "
                            f"or mark the example <!-- example: not run: REASON -->")
    run = sum(e.not_run is None for e in examples)
    print(f"{len(examples)} examples: {run} run, {len(examples) - run} marked not run")
    assert not problems, "\n".join(problems)


def test_placeholders_become_the_clusters_address_and_a_group_of_the_examples_own() -> None:
    code = ('props = {"zookeeper.connect": "zk1:2181,zk2:2181/kafka", "group.id": "billing"}\n'
            'df = spark.readStream.option("zookeeper.connect", "zk:2181/kafka").option("group.id", "billing")\n'
            'handle(1)\n')
    program = filled(Example("docs/x.md", 3, code, None), "127.0.0.1:3181", "ex7")
    assert "zk1:2181" not in program and "zk:2181" not in program
    assert program.count('"127.0.0.1:3181"') == 2 and program.count('"ex7-billing"') == 2
    assert "def handle(" in program and "SparkSession.builder" in program and program.endswith("spark.stop()\n")
    ast.parse(program)


def test_free_names_are_what_an_example_reads_without_binding() -> None:
    code = ("import json\nfrom x import y as z\ndef f(a):\n    return a + b\n"
            "for i in range(3):\n    z(json, i, c)\ntry:\n    pass\nexcept ValueError as e:\n    print(e)\n")
    assert free_names(code) == {"b", "c"}
