"""A griffe extension for the documentation site: the docstrings' reStructuredText prose, as Markdown.

The project's docstrings are written for Sphinx-style readers: cross-references as roles
(``:class:`~zkconsumer.errors.ZkConsumerError```, ``:meth:`shutdown```) and literal blocks
introduced by ``::``. mkdocstrings renders docstrings as Markdown, where both would show
as stray punctuation. Before a docstring is parsed this rewrites:

* a role to inline code with the name as a reader writes it (``~a.b.C`` -> ``C``,
  ``.module`` -> ``module``);
* a paragraph ending in ``::`` and the indented block after it to the paragraph ending in
  ``:`` and a fenced code block (a lone ``::`` line is dropped).

Everything else is left as written (Markdown and reStructuredText agree on paragraphs,
bullet lists and double-backquoted code). Loaded by ``mkdocs.yml``
(``extensions: scripts/docs_griffe.py:RestructuredTextProse``).
"""

from __future__ import annotations

import re
from typing import Any, List

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|data|attr|exc|obj|const|term|ref):`([^`]+)`")


def _role_text(match: "re.Match[str]") -> str:
    target = match.group(1).strip()
    if "<" in target and target.endswith(">"):  # :ref:`text <target>`
        target = target.split("<", 1)[0].strip()
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    target = target.lstrip(".")
    return f"``{target}``"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def to_markdown(text: str) -> str:
    """``text`` (a docstring's value) with roles as inline code and ``::`` blocks fenced."""
    text = _ROLE.sub(_role_text, text)
    lines = text.split("\n")
    out: List[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::") and i + 1 < len(lines) and not lines[i + 1].strip():
            stripped = line.rstrip()
            base = _indent(line)
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and _indent(lines[j]) > base:
                block: List[str] = []
                while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
                    block.append(lines[j])
                    j += 1
                while block and not block[-1].strip():
                    block.pop()
                depth = min(_indent(b) for b in block if b.strip())
                head = stripped[:-2].rstrip()
                if head.strip():
                    out.append(head + ":")
                    out.append("")
                pad = " " * base
                out.append(pad + "```")
                out.extend(pad + b[depth:] if b.strip() else "" for b in block)
                out.append(pad + "```")
                out.append("")
                i = j
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


class RestructuredTextProse(griffe.Extension):
    """Rewrites every loaded object's docstring with :func:`to_markdown`."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:  # noqa: D401 - griffe's hook name
        docstring = getattr(obj, "docstring", None)
        if docstring is not None:
            docstring.value = to_markdown(docstring.value)
