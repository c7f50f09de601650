"""The Java regex cursor (Java's ``Pattern`` primitives), code point escapes, anchors, back references; the syntax error."""

from __future__ import annotations

import unicodedata
from typing import Dict, List, Optional, Set

from ..errors import UnsupportedPatternError, ZkConsumerError
from .charsets import (
    CASE_INSENSITIVE,
    COMMENTS,
    MAX_CP,
    MULTILINE,
    UNICODE_CASE,
    UNICODE_CHARACTER_CLASS,
    UNIX_LINES,
    categories,
    char_set,
    class_text,
    union,
)


class JavaRegexSyntaxError(ZkConsumerError, ValueError):
    """The pattern is not a valid Java regex (``Pattern.compile`` would throw); not retriable.

    ``pattern`` is the regex, ``index`` the position Java's parser stopped at.
    """

    def __init__(self, pattern: str, message: str, index: int) -> None:
        self.pattern, self.index = pattern, index
        super().__init__(f"{message} near index {index}: {pattern}")


class Node:
    """Translated Python text; ``simple`` means a quantifier may follow it directly."""

    __slots__ = ("text", "simple")

    def __init__(self, text: str, simple: bool) -> None:
        self.text, self.simple = text, simple


BACKSLASH, _Q, _E = ord("\\"), ord("Q"), ord("E")


def _remove_qe_quoting(cps: List[int]) -> List[int]:
    """Java's ``\\Q...\\E`` pre-pass: quoted characters become escapes, before parsing."""
    n = len(cps)
    i = 0
    while i < n - 1:
        if cps[i] != BACKSLASH:
            i += 1
        elif cps[i + 1] != _Q:
            i += 2
        else:
            break
    if i >= n - 1:
        return cps
    out = cps[:i]
    i += 2
    in_quote = begin_quote = True
    while i < n:
        c = cps[i]
        i += 1
        if c >= 0x80 or chr(c).isalpha():
            out.append(c)
        elif 0x30 <= c <= 0x39:
            if begin_quote:  # \x3 keeps a preceding escape from absorbing the digit
                out += [BACKSLASH, ord("x"), ord("3")]
            out.append(c)
        elif c != BACKSLASH:
            if in_quote:
                out.append(BACKSLASH)
            out.append(c)
        elif in_quote:
            if i < n and cps[i] == _E:
                i += 1
                in_quote = False
            else:
                out += [BACKSLASH, BACKSLASH]
        else:
            if i < n and cps[i] == _Q:
                i += 1
                in_quote = begin_quote = True
                continue
            out.append(c)
            if i != n:
                out.append(cps[i])
                i += 1
        begin_quote = False
    return out



class Scanner:
    """Java's ``Pattern`` parser state and primitives: cursor, flags, numeric escapes, anchors, references."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        cps = _remove_qe_quoting([ord(c) for c in pattern])
        self.n = len(cps)
        self.t = cps + [0, 0, 0, 0]
        self.cur = 0
        self.flags = 0
        self.group_count = 1  # Java's capturingGroupCount: group 0 counts
        self.closed: Set[int] = set()
        self.named: Dict[str, int] = {}
        self.pending_refs: List[int] = []

    def error(self, message: str) -> JavaRegexSyntaxError:
        return JavaRegexSyntaxError(self.pattern, message, max(0, self.cur - 1))

    def unsupported(self, message: str) -> UnsupportedPatternError:
        return UnsupportedPatternError(self.pattern, message)

    def has(self, flag: int) -> bool:
        return bool(self.flags & flag)

    def _at(self, i: int) -> int:
        return self.t[i] if i < len(self.t) else 0

    def _is_space(self, ch: int) -> bool:
        return ch in (0x20, 0x09, 0x0A, 0x0B, 0x0C, 0x0D)

    def _is_line_sep(self, ch: int) -> bool:
        if self.has(UNIX_LINES):
            return ch == 0x0A
        return ch in (0x0A, 0x0D, 0x85, 0x2028, 0x2029)

    def _peek_past_line(self) -> int:
        self.cur += 1
        ch = self._at(self.cur)
        while ch != 0 and not self._is_line_sep(ch):
            self.cur += 1
            ch = self._at(self.cur)
        if ch == 0 and self.cur > self.n:
            self.cur = self.n
            ch = self._at(self.cur)
        return ch

    def _peek_past_ws(self, ch: int) -> int:
        while self._is_space(ch) or ch == 0x23:
            while self._is_space(ch):
                self.cur += 1
                ch = self._at(self.cur)
            if ch == 0x23:
                ch = self._peek_past_line()
        return ch

    def _parse_past_line(self) -> int:
        ch = self._at(self.cur)
        self.cur += 1
        while ch != 0 and not self._is_line_sep(ch):
            ch = self._at(self.cur)
            self.cur += 1
        if ch == 0 and self.cur > self.n:
            self.cur = self.n
            ch = self._at(self.cur)
            self.cur += 1
        return ch

    def _parse_past_ws(self, ch: int) -> int:
        while self._is_space(ch) or ch == 0x23:
            while self._is_space(ch):
                ch = self._at(self.cur)
                self.cur += 1
            if ch == 0x23:
                ch = self._parse_past_line()
        return ch

    def peek(self) -> int:
        ch = self._at(self.cur)
        return self._peek_past_ws(ch) if self.has(COMMENTS) else ch

    def read(self) -> int:
        ch = self._at(self.cur)
        self.cur += 1
        return self._parse_past_ws(ch) if self.has(COMMENTS) else ch

    def next(self) -> int:
        self.cur += 1
        ch = self._at(self.cur)
        return self._peek_past_ws(ch) if self.has(COMMENTS) else ch

    def next_escaped(self) -> int:
        self.cur += 1
        return self._at(self.cur)

    def skip(self) -> int:
        ch = self._at(self.cur + 1)
        self.cur += 2
        return ch

    def unread(self) -> None:
        self.cur -= 1

    def accept(self, ch: int, message: str) -> None:
        test = self._at(self.cur)
        self.cur += 1
        if self.has(COMMENTS):
            test = self._parse_past_ws(test)
        if test != ch:
            raise self.error(message)

    def octal(self) -> int:
        n = self.read()
        if 0x30 <= n <= 0x37:
            m = self.read()
            if 0x30 <= m <= 0x37:
                o = self.read()
                if 0x30 <= o <= 0x37 and 0x30 <= n <= 0x33:
                    return (n - 0x30) * 64 + (m - 0x30) * 8 + (o - 0x30)
                self.unread()
                return (n - 0x30) * 8 + (m - 0x30)
            self.unread()
            return n - 0x30
        raise self.error("Illegal octal escape sequence")

    @staticmethod
    def _hex_digit(ch: int) -> Optional[int]:
        c = chr(ch) if ch else ""
        return int(c, 16) if c and c in "0123456789abcdefABCDEF" else None

    def hex(self) -> int:
        n = self.read()
        if self._hex_digit(n) is not None:
            m = self.read()
            if self._hex_digit(m) is not None:
                return self._hex_digit(n) * 16 + self._hex_digit(m)  # type: ignore[operator]
        elif n == ord("{") and self._hex_digit(self.peek()) is not None:
            value = 0
            while True:
                n = self.read()
                digit = self._hex_digit(n)
                if digit is None:
                    break
                value = value * 16 + digit
                if value > MAX_CP:
                    raise self.error("Hexadecimal codepoint is too big")
            if n != ord("}"):
                raise self.error("Unclosed hexadecimal escape sequence")
            return value
        raise self.error("Illegal hexadecimal escape sequence")

    def _uxxxx(self) -> int:
        value = 0
        for _ in range(4):
            digit = self._hex_digit(self.read())
            if digit is None:
                raise self.error("Illegal Unicode escape sequence")
            value = value * 16 + digit
        return value

    def unicode_escape(self) -> int:
        n = self._uxxxx()
        if 0xD800 <= n <= 0xDBFF:
            saved = self.cur
            if self.read() == BACKSLASH and self.read() == ord("u"):
                n2 = self._uxxxx()
                if 0xDC00 <= n2 <= 0xDFFF:
                    return 0x10000 + ((n - 0xD800) << 10) + (n2 - 0xDC00)
            self.cur = saved
        return n

    def named_char(self) -> int:
        if self.read() != ord("{"):
            raise self.error("Illegal character name escape sequence")
        start = self.cur
        while self.read() != ord("}"):
            if self.cur >= self.n:
                raise self.error("Unclosed character name escape sequence")
        name = "".join(chr(c) for c in self.t[start : self.cur - 1]).strip()
        try:
            return ord(unicodedata.lookup(name))
        except KeyError:
            raise self.unsupported(f"character name \\N{{{name}}} is unknown to Python's Unicode data") from None

    def group_name(self, ch: int) -> str:
        if not (ch < 0x80 and chr(ch).isalpha()):
            raise self.error("capturing group name does not start with a Latin letter")
        name = []
        while True:
            name.append(chr(ch))
            ch = self.read()
            if not (ch < 0x80 and chr(ch).isalnum()):
                break
        if ch != ord(">"):
            raise self.error("named capturing group is missing trailing '>'")
        return "".join(name)

    def case_scope(self, text: str) -> str:
        if not self.has(CASE_INSENSITIVE):
            return text
        return f"(?i:{text})" if self.has(UNICODE_CASE) else f"(?ai:{text})"

    def caret(self) -> Node:
        if not self.has(MULTILINE):
            return Node(r"\A", False)
        if self.has(UNIX_LINES):
            return Node(r"(?=[\s\S])(?:\A|(?<=\n))", False)
        return Node(r"(?=[\s\S])(?:\A|(?<=[\n\x85\u2028\u2029])|(?<=\r)(?!\n))", False)

    def dollar(self, multiline: bool) -> Node:
        if self.has(UNIX_LINES):
            return Node(r"(?:\Z|(?=\n))" if multiline else r"(?=\n?\Z)", False)
        if multiline:
            return Node(r"(?:\Z|(?<!\r)(?=\n)|(?=[\r\x85\u2028\u2029]))", False)
        return Node(r"(?:\Z|(?=\r\n\Z)|(?<!\r)(?=\n\Z)|(?=[\r\x85\u2028\u2029]\Z))", False)

    def bound(self, negated: bool) -> Node:
        if self.has(UNICODE_CHARACTER_CLASS):
            raise self.unsupported("\\b and \\B under (?U) need Unicode's Alphabetic property, which Python lacks")
        word = class_text(union(categories("Lu", "Ll", "Lt", "Lm", "Lo", "Nd"), char_set(0x5F)))
        if negated:
            return Node(f"(?:(?<={word})(?={word})|(?<!{word})(?!{word}))", False)
        return Node(f"(?:(?<={word})(?!{word})|(?<!{word})(?={word}))", False)

    def backref(self, number: int) -> Node:
        if number in self.closed:
            text = f"(?:\\{number})"
        elif number < self.group_count:
            raise self.unsupported(f"back reference \\{number} inside the group it refers to")
        else:
            self.pending_refs.append(number)
            return Node("(?!)", False)
        return Node(self.case_scope(text), True)

    def ref(self, number: int) -> Node:
        while True:
            ch = self.peek()
            if 0x30 <= ch <= 0x39:
                candidate = number * 10 + (ch - 0x30)
                if self.group_count - 1 < candidate:
                    break
                number = candidate
                self.read()
            else:
                break
        return self.backref(number)

    def named_ref(self) -> Node:
        if self.read() != ord("<"):
            raise self.error("\\k is not followed by '<' for named capturing group")
        name = self.group_name(self.read())
        number = self.named.get(name)
        if number is None:
            raise self.error(f"named capturing group <{name}> does not exist")
        if number not in self.closed:
            raise self.unsupported(f"back reference \\k<{name}> inside the group it refers to")
        return Node(self.case_scope(f"(?P={name})"), True)
