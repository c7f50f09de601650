"""The rebalancer's pure decisions (zkconsumer.rebalance.decisions): their import boundary and answers."""

from __future__ import annotations

import ast
import doctest
from pathlib import Path

from zkconsumer.rebalance import decisions as decide

#: The standard library's typing and enum, and the shared value types (themselves standard library only).
ALLOWED = {"__future__", "typing", "enum", "..structs"}


def test_the_decisions_import_nothing_but_typing_enum_and_the_shared_value_types() -> None:
    tree = ast.parse(Path(decide.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or "").split(".")[0])
    assert imported <= ALLOWED, imported - ALLOWED


def test_the_examples_in_the_docstrings_hold() -> None:
    assert doctest.testmod(decide).failed == 0


def test_what_moves_what_is_released_and_what_is_kept() -> None:
    owned = {("t", 0): "c-0", ("t", 1): "c-0", ("t", 2): "c-1"}
    mine = {("t", 0): "c-0", ("t", 2): "c-0", ("t", 3): "c-1"}  # t-1 leaves, t-2 changes stream, t-3 is new
    assert decide.moving(owned, mine, owned) == [("t", 1), ("t", 2)]
    assert decide.leaving(set(owned), mine) == [("t", 1)]
    assert decide.retained(mine, set(owned), owned) == {("t", 0)}
    assert decide.carried({("t", 1): 7, ("t", 2): 9}, mine, owned) == [(("t", 2), 9)]
    assert decide.next_step(mine, owned, True, set(owned), False) is decide.Step.MOVE
    assert decide.next_step(owned, owned, True, set(owned), False) is decide.Step.NOTHING
    assert decide.next_step(owned, owned, True, set(owned), True) is decide.Step.CONFIRM
    assert decide.next_step(owned, owned, False, set(owned), False) is decide.Step.MOVE  # not fetching yet


def test_superseding_is_bounded_and_only_when_something_would_change() -> None:
    a, b = {("t", 0): "c-0"}, {("t", 0): "c-1"}
    assert decide.supersede(True, 0, 5, a, b)
    assert not decide.supersede(True, 5, 5, a, b)  # the sixth acts anyway
    assert not decide.supersede(True, 0, 5, a, a)  # nothing would change: act (a no-op)
    assert not decide.supersede(False, 0, 5, a, b)


def test_giving_up_and_waiting() -> None:
    assert not decide.gives_up(False, 2, 4) and decide.gives_up(False, 3, 4) and not decide.gives_up(True, 9, 4)
    assert decide.claim_deadline(10.0, 2.0, 4) == 18.0
