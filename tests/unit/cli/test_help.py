"""Every option of every command says what it is for in ``--help``."""

from __future__ import annotations

import argparse
from typing import Iterator, List, Tuple

from zkconsumer.cli import build_parser


def _options(parser: argparse.ArgumentParser, path: str) -> Iterator[Tuple[str, List[str], object]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{path} {name}")
        elif action.option_strings and action.dest != "help":
            yield path, action.option_strings, action.help


def test_every_option_has_help_text() -> None:
    missing = [f"{path} {'/'.join(flags)}" for path, flags, text in _options(build_parser(), "zkconsumer") if not text]
    assert missing == []
