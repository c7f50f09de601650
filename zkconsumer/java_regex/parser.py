"""The recursive-descent parser of Java's regex grammar: sequences, groups, flags and quantifiers, emitting Python text."""

from __future__ import annotations

import re
import sys
from typing import List, Optional, Sequence

from .charsets import (
    ALL_CHARS,
    DOTALL,
    FLAG_LETTERS,
    LINE_TERMINATORS,
    MULTILINE,
    UNIX_LINES,
    CharSet,
    char_set,
    class_text,
    negate,
)
from .classes import ClassParser
from .scanner import BACKSLASH, Node

#: Python's :mod:`re` has possessive quantifiers and atomic groups since 3.11.
RE_HAS_ATOMIC = sys.version_info >= (3, 11)
NEEDS_ATOMIC = ("possessive quantifiers (X*+, X++, X?+, X{n,m}+) and atomic groups (?>X) need Python 3.11 "
                "or later (its re module has them)")


class Parser(ClassParser):
    """A recursive-descent parser of Java's regex grammar emitting Python pattern text."""

    #: set when the pattern has a possessive quantifier or an atomic group
    uses_atomic = False

    def translate(self) -> str:
        body = self.expr()
        if self.cur != self.n:
            if self.peek() == ord(")"):
                raise self.error("Unmatched closing ')'")
            raise self.error("Unexpected internal error")
        for ref in self.pending_refs:
            if ref < self.group_count:
                raise self.unsupported(f"back reference \\{ref} to a group defined after it")
        if self.uses_atomic and not RE_HAS_ATOMIC:
            raise self.unsupported(NEEDS_ATOMIC)
        return f"(?:{body})"

    def expr(self) -> str:
        return "|".join(self.alternatives())

    def alternatives(self) -> List[str]:
        branches = []
        while True:
            branches.append(self.sequence())
            if self.peek() != ord("|"):
                return branches
            self.next()

    def sequence(self) -> str:
        parts: List[str] = []
        while True:
            ch = self.peek()
            node: Optional[Node]
            if ch == ord("("):
                node = self.group0()
                if node is not None:
                    parts.append(node.text)
                continue
            if ch == ord("["):
                node = self.set_node(self.clazz(True))
            elif ch == BACKSLASH:
                ch = self.next_escaped()
                if ch in (ord("p"), ord("P")):
                    node = self.set_node(self.family_after_p(ch == ord("P")))
                else:
                    self.unread()
                    node = self.atom()
            elif ch == ord("^"):
                self.next()
                node = self.caret()
            elif ch == ord("$"):
                self.next()
                node = self.dollar(self.has(MULTILINE))
            elif ch == ord("."):
                self.next()
                if self.has(DOTALL):
                    node = self.set_node(ALL_CHARS)
                elif self.has(UNIX_LINES):
                    node = self.set_node(negate(char_set(0x0A)))
                else:
                    node = self.set_node(negate(LINE_TERMINATORS))
            elif ch in (ord("|"), ord(")")):
                break
            elif ch in (ord("?"), ord("*"), ord("+")):
                self.next()
                raise self.error(f"Dangling meta character '{chr(ch)}'")
            elif ch == 0 and self.cur >= self.n:
                break
            else:
                node = self.atom()
            parts.append(self.closure(node))
        return "".join(parts)

    def set_node(self, s: CharSet) -> Node:
        return Node(class_text(s), True)

    def atom(self) -> Node:
        """One literal character, one escape, or (before ``{``) the empty slice."""
        ch = self.peek()
        if ch in (ord("*"), ord("+"), ord("?"), ord("{")):
            return Node("(?:)", True)
        if ch == BACKSLASH:
            value = self.escape(inclass=False, isrange=False)
            if isinstance(value, Node):
                return value
            if isinstance(value, tuple):
                return self.set_node(value)
            return self.set_node(self.single(value))
        if ch == 0 and self.cur >= self.n:
            return Node("(?:)", True)
        self.next()
        return self.set_node(self.single(ch))

    def add_flags(self) -> None:
        ch = self.peek()
        while True:
            c = chr(ch) if ch else ""
            if c and c in FLAG_LETTERS:
                self.flags |= FLAG_LETTERS[c]
            elif c == "-":
                ch = self.next()
                self.sub_flags()
                return
            else:
                return
            ch = self.next()

    def sub_flags(self) -> None:
        ch = self.peek()
        while True:
            c = chr(ch) if ch else ""
            if c and c in FLAG_LETTERS:
                self.flags &= ~FLAG_LETTERS[c]
            else:
                return
            ch = self.next()

    def group0(self) -> Optional[Node]:
        saved = self.flags
        ch = self.next()
        text: str
        if ch == ord("?"):
            ch = self.skip()
            c = chr(ch) if ch else ""
            if c == ":":
                text = f"(?:{self.expr()})"
            elif c in ("=", "!"):
                text = f"(?{c}{self.expr()})"
            elif c == ">":
                self.uses_atomic = True
                text = f"(?>{self.expr()})"
            elif c == "<":
                ch = self.read()
                if ch not in (ord("="), ord("!")):
                    name = self.group_name(ch)
                    if name in self.named:
                        raise self.error(f"Named capturing group <{name}> is already defined")
                    number = self.group_count
                    self.group_count += 1
                    self.named[name] = number
                    body = self.expr()
                    self.closed.add(number)
                    text = f"(?P<{name}>{body})"
                else:
                    text = self.lookbehind(chr(ch), self.alternatives())
            elif c in ("$", "@"):
                raise self.error("Unknown group type")
            else:
                self.unread()
                self.add_flags()
                ch = self.read()
                if ch == ord(")"):
                    return None  # flags only: they stay set to the end of the enclosing group
                if ch != ord(":"):
                    raise self.error("Unknown inline modifier")
                text = f"(?:{self.expr()})"
        else:
            number = self.group_count
            self.group_count += 1
            body = self.expr()
            self.closed.add(number)
            text = f"({body})"
        self.accept(ord(")"), "Unclosed group")
        self.flags = saved
        return Node(self.closure(Node(text, True)), False)

    def lookbehind(self, kind: str, branches: Sequence[str]) -> str:
        whole = f"(?<{kind}{'|'.join(branches)})"
        if self._compiles(whole):
            return whole
        parts = [f"(?<{kind}{b})" for b in branches]
        if len(parts) > 1 and all(self._compiles(p) for p in parts):
            return f"(?:{'|'.join(parts)})" if kind == "=" else "".join(parts)
        raise self.unsupported("a look-behind whose length is not fixed (Python needs a fixed width)")

    @staticmethod
    def _compiles(text: str) -> bool:
        try:
            re.compile(text)
        except re.error:
            return False
        return True

    def qtype(self) -> str:
        ch = self.next()
        if ch == ord("?"):
            self.next()
            return "?"
        if ch == ord("+"):
            self.next()
            self.uses_atomic = True
            return "+"
        return ""

    def closure(self, node: Node) -> str:
        ch = self.peek()
        operand = node.text if node.simple else f"(?:{node.text})"
        if ch == ord("?"):
            return operand + "?" + self.qtype()
        if ch == ord("*"):
            return operand + "*" + self.qtype()
        if ch == ord("+"):
            return operand + "+" + self.qtype()
        if ch != ord("{"):
            return node.text
        ch = self.skip()
        if not (0x30 <= ch <= 0x39):
            raise self.error("Illegal repetition")
        cmin = 0
        while True:
            cmin = cmin * 10 + (ch - 0x30)
            if cmin > 0x7FFFFFFF:
                raise self.error("Illegal repetition range")
            ch = self.read()
            if not (0x30 <= ch <= 0x39):
                break
        if ch == ord(","):
            ch = self.read()
            if ch == ord("}"):
                self.unread()
                return operand + "{%d,}" % cmin + self.qtype()
            cmax = 0
            while 0x30 <= ch <= 0x39:
                cmax = cmax * 10 + (ch - 0x30)
                if cmax > 0x7FFFFFFF:
                    raise self.error("Illegal repetition range")
                ch = self.read()
        else:
            cmax = cmin
        if ch != ord("}"):
            raise self.error("Unclosed counted closure")
        if cmax < cmin:
            raise self.error("Illegal repetition range")
        self.unread()
        return operand + "{%d,%d}" % (cmin, cmax) + self.qtype()
