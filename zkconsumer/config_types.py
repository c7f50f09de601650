"""Writes ``config_attributes.py``: :class:`~zkconsumer.config.ConsumerConfig`'s typed attributes, from the table.

The table in ``config.py`` (:data:`~zkconsumer.config.PROPERTIES`) is the one place a property
is declared; ``mypy --strict`` cannot read it, so this module renders it as a class of typed,
read-only attributes that ``ConsumerConfig`` inherits. After adding or changing a property::

    python -m zkconsumer.config_types --write   # rewrite zkconsumer/config_attributes.py
    python -m zkconsumer.config_types --check   # exit status 1 while it is stale

``tests/unit/core/test_config_types.py`` fails, naming the first command, while the file and the
table disagree.

Types: ``int``, ``bool``, ``str``; an enum is the ``Literal`` of its choices. A property is
``Optional`` when it may be unset: not required, no default, and not derived from a property
that is always set (``client.id`` follows the required ``group.id``, so it is ``str``).

May import: config.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import List, Mapping, Optional, Sequence

from .config import PROPERTIES, Property

#: The generated module, beside this one.
TARGET = Path(__file__).with_name("config_attributes.py")
#: What the failure message of the agreement test and ``--check`` tell the reader to run.
REGENERATE = "python -m zkconsumer.config_types --write"

_HEADER = f'''"""ConsumerConfig's property attributes, typed. GENERATED from the table in config.py: do not edit.

Regenerate with ``{REGENERATE}`` after changing the table
(``tests/unit/core/test_config_types.py`` fails while the two disagree).

May import: the standard library only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional


class PropertyAttributes:
    """One read-only attribute per property (its dotted name with underscores), as ConsumerConfig parses it.

    Declarations for the type checker only: at run time ``ConsumerConfig.__getattr__`` answers.
    """

    __slots__ = ()

    if TYPE_CHECKING:
'''


def may_be_unset(prop: Property, properties: Mapping[str, Property] = PROPERTIES) -> bool:
    """Whether the property's value may be ``None`` (not set)."""
    if prop.required or prop.default is not None or prop.default_fn is not None:
        return False
    if prop.derived_from is not None:
        return may_be_unset(properties[prop.derived_from], properties)
    return True


def annotation(prop: Property, properties: Mapping[str, Property] = PROPERTIES) -> str:
    """The attribute's type as source text: ``int``, ``Optional[str]``, ``Literal['range', 'roundrobin']``..."""
    if prop.type == "enum":
        base = f"Literal[{', '.join(repr(choice) for choice in prop.choices)}]"
    elif prop.type in ("int", "bool", "str"):
        base = prop.type
    else:
        raise ValueError(f"{prop.name}: no Python type for property type {prop.type!r}")
    return f"Optional[{base}]" if may_be_unset(prop, properties) else base


def render(properties: Mapping[str, Property] = PROPERTIES) -> str:
    """The whole text of ``config_attributes.py`` for ``properties``."""
    lines: List[str] = [_HEADER]
    for prop in properties.values():
        doc = f"``{prop.name}`` (default {prop.default_text}): {prop.doc}"
        lines.append(textwrap.indent(textwrap.fill(doc, width=110), " " * 8 + "#: ") + "\n")
        lines.append(f"        @property\n        def {prop.attribute}(self) -> {annotation(prop, properties)}: ...\n\n")
    return "".join(lines).rstrip("\n") + "\n"


def stale(path: Path = TARGET) -> Optional[str]:
    """``None`` if ``path`` holds exactly what :func:`render` writes, else why not (one line)."""
    try:
        current = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return f"{path.name} is missing"
    if current == render():
        return None
    return f"{path.name} does not match the property table in config.py"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zkconsumer.config_types", description=__doc__.split("\n", 1)[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help=f"rewrite {TARGET.name} from the table")
    action.add_argument("--check", action="store_true", help=f"exit 1 if {TARGET.name} is stale")
    args = parser.parse_args(argv)
    if args.write:
        TARGET.write_text(render(), encoding="utf-8")
        print(f"wrote {TARGET}")
        return 0
    problem = stale()
    if problem:
        print(f"{problem}; run: {REGENERATE}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
