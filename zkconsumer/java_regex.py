"""Java regular expressions (``java.util.regex.Pattern``) translated to Python's :mod:`re`.

Kafka's members write their wildcard subscriptions as Java regexes, and every
member evaluates every other member's regex against the topic names: a Python
member must read them exactly as Java does, or it computes a different
assignment than Kafka's members. :func:`translate` parses a pattern with Java's
grammar (Java 9-18, the Java 17 engine as referee) and writes a Python pattern
that matches the same strings; :func:`compile_java_regex` compiles it.

How each construct is carried over (the Python pattern uses no global flags):

* literals and escapes (``\\t \\n \\r \\f \\a \\e \\0ooo \\xhh \\x{h..h} \\uhhhh``,
  surrogate pairs ``\\uD83D\\uDE00``, ``\\cX``, ``\\N{NAME}``) become escaped code
  points; ``\\Q...\\E`` quoting is expanded first, as Java does;
* every character class is computed as an explicit set of code points, so
  unions ``[a-d[m-p]]``, intersections ``[a-z&&[def]]``, subtractions
  ``[a-z&&[^bc]]``, Java's class edge cases (``[]a]``, ``[a-]``, ``[&&a]``) and
  ``\\d \\s \\w \\h \\v \\D \\S \\W \\H \\V`` come out as one Python ``[...]``;
* POSIX ``\\p{Lower} \\p{Upper} \\p{ASCII} \\p{Alpha} \\p{Digit} \\p{Alnum}
  \\p{Punct} \\p{Graph} \\p{Print} \\p{Blank} \\p{Cntrl} \\p{XDigit} \\p{Space}``
  (ASCII, or Unicode under ``(?U)`` where feasible), general categories
  (``\\p{L}``, ``\\p{Lu}``, ``\\p{IsLu}``, ``\\p{gc=Nd}``, ``\\pN``...), the
  binary properties ``\\p{IsLetter}``, ``\\p{IsWhite_Space}``...,
  ``java.lang.Character`` classes (``\\p{javaLowerCase}``, ``\\p{javaDigit}``...)
  and their complements ``\\P{...}``;
* case-insensitivity ``(?i)`` is applied to each literal and range as Java does
  (ASCII only, or Unicode simple case mapping with ``(?iu)``);
* embedded flags ``(?idmsuxcU-idmsuxcU)`` and ``(?flags:X)`` apply from where
  they stand to the end of the enclosing group (across ``|``), as in Java;
  ``.``, ``^``, ``$``, ``\\Z`` follow Java's line terminators
  (``\\n \\r \\r\\n \\u0085 \\u2028 \\u2029``, or ``\\n`` alone with ``(?d)``), ``(?x)``
  skips whitespace and ``#`` comments (also inside classes, as Java does);
* ``\\A``, ``\\G`` (the start, for a whole-string match), ``\\z``, ``\\b``, ``\\B``
  (Java 8-18: a word character is a letter, a digit or ``_``), ``\\R``;
* greedy, reluctant and possessive quantifiers (``X?+ X*+ X++ X{n,m}+``),
  atomic groups ``(?>X)``, lookahead, lookbehind (bounded alternatives of
  different lengths are split), capturing and named groups ``(?<name>X)``,
  back references ``\\n`` (Java's greedy digit rule) and ``\\k<name>``.

Refused with :class:`~zkconsumer.errors.UnsupportedPatternError` (Python has no
equivalent, or Java versions disagree): ``\\X``, ``\\b{g}``, Unicode scripts and
blocks (``\\p{IsLatin}``, ``\\p{InGreek}``, ``\\p{sc=...}``), the properties that
need Unicode data Python lacks (``\\p{javaAlphabetic}``, ``\\p{IsAlphabetic}``,
``\\p{IsIdeographic}``, ``\\w``/``\\b``/``\\p{Alpha}`` under ``(?U)``...), case
properties (``\\p{Lower}``, ``\\p{Lu}``...) under ``(?i)`` (Java 8 ignores the
flag there, Java 12+ does not), a negated class holding a nested class or an
intersection (``[^a[b]]``: its meaning changed in Java 9), a back reference to
a group that is still open or defined later, and a lookbehind Python cannot
bound. A pattern Java itself rejects raises :class:`JavaRegexSyntaxError`.

Exactness: on every string of characters legal in Kafka topic names
(``[a-zA-Z0-9._-]``, the only strings topic filters meet) the translation
matches what Java matches. On arbitrary strings it also does, except that
Unicode tables come from Python's :mod:`unicodedata` (a different Unicode
version than a given JVM's), ``(?iu)`` uses Python's case mappings where they
are single characters, ``\\b`` counts a non-spacing mark as a non-word character
(Java: a word character after a letter or digit), and ``(?c)`` (canonical
equivalence) is not applied.

>>> translate(r"\\p{Lower}+")
'(?:[a-z]+)'
>>> compile_java_regex(r"\\Qa.b\\E|x++").fullmatch("a.b") is not None
True
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .errors import UnsupportedPatternError, ZkConsumerError

__all__ = ["JavaRegexSyntaxError", "compile_java_regex", "translate"]

# ----------------------------------------------------------------------------- code point sets

#: A set of code points: sorted, disjoint, non-adjacent inclusive ranges.
CharSet = Tuple[Tuple[int, int], ...]

MAX_CP = 0x10FFFF
_ALL: CharSet = ((0, MAX_CP),)
_EMPTY: CharSet = ()


def _normalize(ranges: Iterable[Tuple[int, int]]) -> CharSet:
    out: List[List[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def _of(*items: Union[int, Tuple[int, int]]) -> CharSet:
    return _normalize((i, i) if isinstance(i, int) else i for i in items)


def _union(*sets: CharSet) -> CharSet:
    return _normalize(r for s in sets for r in s)


def _negate(s: CharSet) -> CharSet:
    out: List[Tuple[int, int]] = []
    nxt = 0
    for lo, hi in s:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
    return tuple(out)


def _intersect(a: CharSet, b: CharSet) -> CharSet:
    return _negate(_union(_negate(a), _negate(b)))


def _contains(s: CharSet, cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in s)


def _from_predicate(pred: Callable[[int], bool], limit: int = MAX_CP) -> CharSet:
    ranges: List[Tuple[int, int]] = []
    start = -1
    for cp in range(limit + 1):
        if pred(cp):
            if start < 0:
                start = cp
        elif start >= 0:
            ranges.append((start, cp - 1))
            start = -1
    if start >= 0:
        ranges.append((start, limit))
    return tuple(ranges)


#: Regions holding every assigned code point of Python's Unicode data; the rest of planes
#: 4-13 and 14 is unassigned (Cn), planes 15-16 are private use (Co) but for their noncharacters.
_SCANNED = ((0, 0x3FFFF), (0xE0000, 0xE0FFF))


@lru_cache(maxsize=None)
def _categories() -> Dict[str, CharSet]:
    """General category -> code points, from Python's unicodedata (computed once)."""
    found: Dict[str, List[Tuple[int, int]]] = {}
    for first, last in _SCANNED:
        start, current = first, unicodedata.category(chr(first))
        for cp in range(first + 1, last + 2):
            cat = unicodedata.category(chr(cp)) if cp <= last else ""
            if cat != current:
                found.setdefault(current, []).append((start, cp - 1))
                start, current = cp, cat
    found.setdefault("Cn", []).extend([(0x40000, 0xDFFFF), (0xE1000, 0xEFFFF)])
    for plane in (0xF0000, 0x100000):
        found.setdefault("Co", []).append((plane, plane + 0xFFFD))
        found["Cn"].append((plane + 0xFFFE, plane + 0xFFFF))
    return {k: _normalize(v) for k, v in found.items()}


def _cats(*names: str) -> CharSet:
    table = _categories()
    return _union(*(table.get(n, _EMPTY) for n in names))


@lru_cache(maxsize=None)
def _str_predicate_set(kind: str) -> CharSet:
    if kind == "lower":
        return _from_predicate(lambda cp: chr(cp).islower())
    if kind == "upper":
        return _from_predicate(lambda cp: chr(cp).isupper())
    if kind == "mirrored":
        return _from_predicate(lambda cp: unicodedata.mirrored(chr(cp)) == 1)
    raise KeyError(kind)


def _simple_upper(cp: int) -> int:
    u = chr(cp).upper()
    return ord(u) if len(u) == 1 else cp


def _simple_lower(cp: int) -> int:
    lo = chr(cp).lower()
    return ord(lo) if len(lo) == 1 else cp


@lru_cache(maxsize=None)
def _cased() -> Tuple[Tuple[int, int, int], ...]:
    """(cp, upper(cp), lower(upper(cp))) for every code point with a case mapping."""
    rows = []
    for cp in range(0x1F000):
        up = _simple_upper(cp)
        if up != cp or _simple_lower(cp) != cp:
            rows.append((cp, up, _simple_lower(up)))
    return tuple(rows)


# ASCII classes (java.util.regex.ASCII)
_ASCII_DIGIT = _of((0x30, 0x39))
_ASCII_UPPER = _of((0x41, 0x5A))
_ASCII_LOWER = _of((0x61, 0x7A))
_ASCII_ALPHA = _union(_ASCII_UPPER, _ASCII_LOWER)
_ASCII_ALNUM = _union(_ASCII_ALPHA, _ASCII_DIGIT)
_ASCII_WORD = _union(_ASCII_ALNUM, _of(0x5F))
_ASCII_SPACE = _of(0x20, (0x09, 0x0D))
_ASCII_PUNCT = _of((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E))
_ASCII_GRAPH = _of((0x21, 0x7E))
_ASCII_CNTRL = _of((0x00, 0x1F), 0x7F)
_ASCII_XDIGIT = _of((0x30, 0x39), (0x41, 0x46), (0x61, 0x66))
_HORIZ_WS = _of(0x09, 0x20, 0xA0, 0x1680, 0x180E, (0x2000, 0x200A), 0x202F, 0x205F, 0x3000)
_VERT_WS = _of((0x0A, 0x0D), 0x85, 0x2028, 0x2029)
_LINE_TERMINATORS = _of(0x0A, 0x0D, 0x85, 0x2028, 0x2029)
_HEX_EXTRA = _of((0x30, 0x39), (0x41, 0x46), (0x61, 0x66), (0xFF10, 0xFF19), (0xFF21, 0xFF26), (0xFF41, 0xFF46))

# Java flag bits (values are private to this module)
_I, _D, _M, _S, _U, _X, _C, _UC = 1, 2, 4, 8, 16, 32, 64, 128
_FLAG_LETTERS = {"i": _I, "d": _D, "m": _M, "s": _S, "u": _U, "x": _X, "c": _C, "U": _UC | _U}

_UNSUPPORTED = object()  # a property Java knows but Python has no data for


def _white_space() -> CharSet:
    return _union(_cats("Zs", "Zl", "Zp"), _of((0x09, 0x0D), 0x85))


def _graph() -> CharSet:
    return _negate(_cats("Zs", "Zl", "Zp", "Cc", "Cs", "Cn"))


def _blank() -> CharSet:
    return _union(_cats("Zs"), _of(0x09))


def _print() -> CharSet:
    return _intersect(_union(_graph(), _blank()), _negate(_cats("Cc")))


_CATEGORY_GROUPS: Dict[str, Tuple[str, ...]] = {
    "L": ("Lu", "Ll", "Lt", "Lm", "Lo"),
    "M": ("Mn", "Me", "Mc"),
    "N": ("Nd", "Nl", "No"),
    "Z": ("Zs", "Zl", "Zp"),
    "C": ("Cc", "Cf", "Co", "Cs", "Cn"),
    "P": ("Pd", "Ps", "Pe", "Pc", "Po", "Pi", "Pf"),
    "S": ("Sm", "Sc", "Sk", "So"),
    "LC": ("Lu", "Ll", "Lt"),
    "LD": ("Lu", "Ll", "Lt", "Lm", "Lo", "Nd"),
}
_SINGLE_CATEGORIES = (
    "Cn Lu Ll Lt Lm Lo Mn Me Mc Nd Nl No Zs Zl Zp Cc Cf Co Cs Pd Ps Pe Pc Po Sm Sc Sk So Pi Pf".split()
)
#: Properties whose meaning under (?i) changed between Java 8 (flag ignored) and Java 12+.
_CASE_PROPERTIES = frozenset(
    {"Lu", "Ll", "Lt", "Lower", "Upper", "javaLowerCase", "javaUpperCase", "javaTitleCase",
     "LOWERCASE", "UPPERCASE", "TITLECASE", "LOWER", "UPPER"}
)


def _java_property(name: str) -> object:
    """Kafka's ``CharPredicates.forProperty`` names: a CharSet, _UNSUPPORTED, or None (unknown)."""
    if name in _SINGLE_CATEGORIES:
        return lambda: _cats(name)
    if name in _CATEGORY_GROUPS:
        return lambda: _cats(*_CATEGORY_GROUPS[name])
    table: Dict[str, Callable[[], CharSet]] = {
        "L1": lambda: _of((0, 0xFF)),
        "all": lambda: _ALL,
        "ASCII": lambda: _of((0, 0x7F)),
        "Alnum": lambda: _ASCII_ALNUM,
        "Alpha": lambda: _ASCII_ALPHA,
        "Blank": lambda: _of(0x20, 0x09),
        "Cntrl": lambda: _ASCII_CNTRL,
        "Digit": lambda: _ASCII_DIGIT,
        "Graph": lambda: _ASCII_GRAPH,
        "Lower": lambda: _ASCII_LOWER,
        "Print": lambda: _of((0x20, 0x7E)),
        "Punct": lambda: _ASCII_PUNCT,
        "Space": lambda: _ASCII_SPACE,
        "Upper": lambda: _ASCII_UPPER,
        "XDigit": lambda: _ASCII_XDIGIT,
        "javaLowerCase": lambda: _str_predicate_set("lower"),
        "javaUpperCase": lambda: _str_predicate_set("upper"),
        "javaTitleCase": lambda: _cats("Lt"),
        "javaDigit": lambda: _cats("Nd"),
        "javaDefined": lambda: _negate(_cats("Cn")),
        "javaLetter": lambda: _cats("Lu", "Ll", "Lt", "Lm", "Lo"),
        "javaLetterOrDigit": lambda: _cats("Lu", "Ll", "Lt", "Lm", "Lo", "Nd"),
        "javaSpaceChar": lambda: _cats("Zs", "Zl", "Zp"),
        "javaWhitespace": lambda: _union(
            _intersect(_cats("Zs", "Zl", "Zp"), _negate(_of(0xA0, 0x2007, 0x202F))), _of((0x09, 0x0D), (0x1C, 0x1F))
        ),
        "javaISOControl": lambda: _of((0x00, 0x1F), (0x7F, 0x9F)),
        "javaMirrored": lambda: _str_predicate_set("mirrored"),
        "javaJavaIdentifierStart": lambda: _cats("Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Sc", "Pc"),
        "javaJavaIdentifierPart": lambda: _union(
            _cats("Lu", "Ll", "Lt", "Lm", "Lo", "Sc", "Pc", "Nd", "Nl", "Mc", "Mn", "Cf"),
            _of((0x00, 0x08), (0x0E, 0x1B), (0x7F, 0x9F)),
        ),
        "javaIdentifierIgnorable": lambda: _union(_cats("Cf"), _of((0x00, 0x08), (0x0E, 0x1B), (0x7F, 0x9F))),
    }
    if name in table:
        return table[name]
    if name in ("javaAlphabetic", "javaIdeographic", "javaUnicodeIdentifierStart", "javaUnicodeIdentifierPart"):
        return _UNSUPPORTED
    return None


def _unicode_posix(name: str) -> object:
    """``CharPredicates`` POSIX names in their Unicode meaning (``(?U)``, ``\\p{IsAlpha}``); upper-cased name."""
    table: Dict[str, Callable[[], CharSet]] = {
        "LOWER": lambda: _str_predicate_set("lower"),
        "UPPER": lambda: _str_predicate_set("upper"),
        "SPACE": _white_space,
        "PUNCT": lambda: _cats(*_CATEGORY_GROUPS["P"]),
        "XDIGIT": lambda: _union(_cats("Nd"), _HEX_EXTRA),
        "CNTRL": lambda: _cats("Cc"),
        "DIGIT": lambda: _cats("Nd"),
        "BLANK": _blank,
        "GRAPH": _graph,
        "PRINT": _print,
    }
    if name in table:
        return table[name]
    if name in ("ALPHA", "ALNUM"):
        return _UNSUPPORTED
    return None


def _unicode_binary(name: str) -> object:
    """``CharPredicates.forUnicodeProperty`` names (upper-cased), then the Unicode POSIX names."""
    table: Dict[str, Callable[[], CharSet]] = {
        "ASSIGNED": lambda: _negate(_cats("Cn")),
        "CONTROL": lambda: _cats("Cc"),
        "HEXDIGIT": lambda: _union(_cats("Nd"), _HEX_EXTRA),
        "HEX_DIGIT": lambda: _union(_cats("Nd"), _HEX_EXTRA),
        "JOINCONTROL": lambda: _of(0x200C, 0x200D),
        "JOIN_CONTROL": lambda: _of(0x200C, 0x200D),
        "LETTER": lambda: _cats("Lu", "Ll", "Lt", "Lm", "Lo"),
        "LOWERCASE": lambda: _str_predicate_set("lower"),
        "UPPERCASE": lambda: _str_predicate_set("upper"),
        "TITLECASE": lambda: _cats("Lt"),
        "NONCHARACTERCODEPOINT": lambda: _union(
            _of((0xFDD0, 0xFDEF)), _normalize((p | 0xFFFE, p | 0xFFFF) for p in range(0, MAX_CP + 1, 0x10000))
        ),
        "PUNCTUATION": lambda: _cats(*_CATEGORY_GROUPS["P"]),
        "WHITESPACE": _white_space,
        "WHITE_SPACE": _white_space,
    }
    table["NONCHARACTER_CODE_POINT"] = table["NONCHARACTERCODEPOINT"]
    if name in table:
        return table[name]
    if name in ("ALPHABETIC", "IDEOGRAPHIC", "WORD", "EMOJI", "EMOJI_PRESENTATION", "EMOJI_MODIFIER",
                "EMOJI_MODIFIER_BASE", "EMOJI_COMPONENT", "EXTENDED_PICTOGRAPHIC"):
        return _UNSUPPORTED
    return _unicode_posix(name)


# ----------------------------------------------------------------------------- Python text


def _cp(cp: int) -> str:
    """One code point as Python pattern text, valid inside and outside a class, flag-independent."""
    if cp < 0x80 and (chr(cp).isalnum() or cp == 0x5F):
        return chr(cp)
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def _class_text(s: CharSet) -> str:
    if not s:
        return "(?!)"
    if len(s) == 1 and s[0][0] == s[0][1]:
        return _cp(s[0][0])
    parts = []
    for lo, hi in s:
        if lo == hi:
            parts.append(_cp(lo))
        elif hi == lo + 1:
            parts.append(_cp(lo) + _cp(hi))
        else:
            parts.append(f"{_cp(lo)}-{_cp(hi)}")
    return "[" + "".join(parts) + "]"


class JavaRegexSyntaxError(ZkConsumerError, ValueError):
    """The pattern is not a valid Java regex (``Pattern.compile`` would throw); not retriable.

    ``pattern`` is the regex, ``index`` the position Java's parser stopped at.
    """

    def __init__(self, pattern: str, message: str, index: int) -> None:
        self.pattern, self.index = pattern, index
        super().__init__(f"{message} near index {index}: {pattern}")


class _Node:
    """Translated Python text; ``simple`` means a quantifier may follow it directly."""

    __slots__ = ("text", "simple")

    def __init__(self, text: str, simple: bool) -> None:
        self.text, self.simple = text, simple


_BACKSLASH, _Q, _E = ord("\\"), ord("Q"), ord("E")


def _remove_qe_quoting(cps: List[int]) -> List[int]:
    """Java's ``\\Q...\\E`` pre-pass: quoted characters become escapes, before parsing."""
    n = len(cps)
    i = 0
    while i < n - 1:
        if cps[i] != _BACKSLASH:
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
                out += [_BACKSLASH, ord("x"), ord("3")]
            out.append(c)
        elif c != _BACKSLASH:
            if in_quote:
                out.append(_BACKSLASH)
            out.append(c)
        elif in_quote:
            if i < n and cps[i] == _E:
                i += 1
                in_quote = False
            else:
                out += [_BACKSLASH, _BACKSLASH]
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


class _Parser:
    """A recursive-descent parser of Java's regex grammar emitting Python pattern text."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        cps = _remove_qe_quoting([ord(c) for c in pattern])
        self.n = len(cps)
        self.t = cps + [0, 0, 0, 0]
        self.cur = 0
        self.flags = 0
        self.group_count = 1  # Java's capturingGroupCount: group 0 counts
        self.closed: set = set()
        self.named: Dict[str, int] = {}
        self.pending_refs: List[int] = []

    # -------------------------------------------------------------- errors

    def error(self, message: str) -> JavaRegexSyntaxError:
        return JavaRegexSyntaxError(self.pattern, message, max(0, self.cur - 1))

    def unsupported(self, message: str) -> UnsupportedPatternError:
        return UnsupportedPatternError(self.pattern, message)

    # -------------------------------------------------------------- cursor (Java's primitives)

    def has(self, flag: int) -> bool:
        return bool(self.flags & flag)

    def _at(self, i: int) -> int:
        return self.t[i] if i < len(self.t) else 0

    def _is_space(self, ch: int) -> bool:
        return ch in (0x20, 0x09, 0x0A, 0x0B, 0x0C, 0x0D)

    def _is_line_sep(self, ch: int) -> bool:
        if self.has(_D):
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
        return self._peek_past_ws(ch) if self.has(_X) else ch

    def read(self) -> int:
        ch = self._at(self.cur)
        self.cur += 1
        return self._parse_past_ws(ch) if self.has(_X) else ch

    def next(self) -> int:
        self.cur += 1
        ch = self._at(self.cur)
        return self._peek_past_ws(ch) if self.has(_X) else ch

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
        if self.has(_X):
            test = self._parse_past_ws(test)
        if test != ch:
            raise self.error(message)

    # -------------------------------------------------------------- top level

    def translate(self) -> str:
        body = self.expr()
        if self.cur != self.n:
            if self.peek() == ord(")"):
                raise self.error("Unmatched closing ')'")
            raise self.error("Unexpected internal error")
        for ref in self.pending_refs:
            if ref < self.group_count:
                raise self.unsupported(f"back reference \\{ref} to a group defined after it")
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
            node: Optional[_Node]
            if ch == ord("("):
                node = self.group0()
                if node is not None:
                    parts.append(node.text)
                continue
            if ch == ord("["):
                node = self.set_node(self.clazz(True))
            elif ch == _BACKSLASH:
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
                node = self.dollar(self.has(_M))
            elif ch == ord("."):
                self.next()
                if self.has(_S):
                    node = self.set_node(_ALL)
                elif self.has(_D):
                    node = self.set_node(_negate(_of(0x0A)))
                else:
                    node = self.set_node(_negate(_LINE_TERMINATORS))
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

    def set_node(self, s: CharSet) -> _Node:
        return _Node(_class_text(s), True)

    # -------------------------------------------------------------- atoms

    def atom(self) -> _Node:
        """One literal character, one escape, or (before ``{``) the empty slice."""
        ch = self.peek()
        if ch in (ord("*"), ord("+"), ord("?"), ord("{")):
            return _Node("(?:)", True)
        if ch == _BACKSLASH:
            value = self.escape(inclass=False, isrange=False)
            if isinstance(value, _Node):
                return value
            if isinstance(value, tuple):
                return self.set_node(value)
            return self.set_node(self.single(value))
        if ch == 0 and self.cur >= self.n:
            return _Node("(?:)", True)
        self.next()
        return self.set_node(self.single(ch))

    def single(self, ch: int) -> CharSet:
        """Java's ``single()``: one character, case-folded as the flags say."""
        if self.has(_I):
            if self.has(_U):
                upper = _simple_upper(ch)
                lower = _simple_lower(upper)
                if upper != lower:
                    return _union(_of(lower), _of(*(cp for cp, _up, fold in _cased() if fold == lower)))
            elif ch < 0x80 and chr(ch).isalpha():
                return _of(ord(chr(ch).lower()), ord(chr(ch).upper()))
        return _of(ch)

    def caret(self) -> _Node:
        if not self.has(_M):
            return _Node(r"\A", False)
        if self.has(_D):
            return _Node(r"(?=[\s\S])(?:\A|(?<=\n))", False)
        return _Node(r"(?=[\s\S])(?:\A|(?<=[\n\x85\u2028\u2029])|(?<=\r)(?!\n))", False)

    def dollar(self, multiline: bool) -> _Node:
        if self.has(_D):
            return _Node(r"(?:\Z|(?=\n))" if multiline else r"(?=\n?\Z)", False)
        if multiline:
            return _Node(r"(?:\Z|(?<!\r)(?=\n)|(?=[\r\x85\u2028\u2029]))", False)
        return _Node(r"(?:\Z|(?=\r\n\Z)|(?<!\r)(?=\n\Z)|(?=[\r\x85\u2028\u2029]\Z))", False)

    def bound(self, negated: bool) -> _Node:
        if self.has(_UC):
            raise self.unsupported("\\b and \\B under (?U) need Unicode's Alphabetic property, which Python lacks")
        word = _class_text(_union(_cats("Lu", "Ll", "Lt", "Lm", "Lo", "Nd"), _of(0x5F)))
        if negated:
            return _Node(f"(?:(?<={word})(?={word})|(?<!{word})(?!{word}))", False)
        return _Node(f"(?:(?<={word})(?!{word})|(?<!{word})(?={word}))", False)

    def backref(self, number: int) -> _Node:
        if number in self.closed:
            text = f"(?:\\{number})"
        elif number < self.group_count:
            raise self.unsupported(f"back reference \\{number} inside the group it refers to")
        else:
            self.pending_refs.append(number)
            return _Node("(?!)", False)
        return _Node(self.case_scope(text), True)

    def case_scope(self, text: str) -> str:
        if not self.has(_I):
            return text
        return f"(?i:{text})" if self.has(_U) else f"(?ai:{text})"

    def ref(self, number: int) -> _Node:
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

    def escape(self, inclass: bool, isrange: bool) -> Union[int, CharSet, _Node]:
        """After a backslash: a code point, a class (tuple of ranges) or a node."""
        ch = self.skip()
        c = chr(ch) if ch else "\x00"
        if c == "0":
            return self.octal()
        if c in "123456789" and not inclass:
            return self.ref(ch - 0x30)
        if not inclass:
            if c == "A" or c == "G":
                return _Node(r"\A", False)
            if c == "B":
                return self.bound(True)
            if c == "b":
                if self.peek() == ord("{"):
                    raise self.unsupported("\\b{g} (grapheme cluster boundary) has no Python equivalent")
                return self.bound(False)
            if c == "R":
                return _Node(r"(?:\r\n|[\n\x0b\x0c\r\x85\u2028\u2029])", False)
            if c == "X":
                raise self.unsupported("\\X (grapheme cluster) has no Python equivalent")
            if c == "Z":
                return self.dollar(False)
            if c == "z":
                return _Node(r"\Z", False)
            if c == "k":
                return self.named_ref()
        if c == "d":
            return _cats("Nd") if self.has(_UC) else _ASCII_DIGIT
        if c == "D":
            return _negate(_cats("Nd") if self.has(_UC) else _ASCII_DIGIT)
        if c == "s":
            return _white_space() if self.has(_UC) else _ASCII_SPACE
        if c == "S":
            return _negate(_white_space() if self.has(_UC) else _ASCII_SPACE)
        if c in "wW":
            if self.has(_UC):
                raise self.unsupported("\\w under (?U) needs Unicode's Alphabetic property, which Python lacks")
            return _ASCII_WORD if c == "w" else _negate(_ASCII_WORD)
        if c == "h":
            return _HORIZ_WS
        if c == "H":
            return _negate(_HORIZ_WS)
        if c == "v":
            return 0x0B if isrange else _VERT_WS
        if c == "V":
            return _negate(_VERT_WS)
        simple = {"a": 0x07, "e": 0x1B, "f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09}
        if c in simple:
            return simple[c]
        if c == "c":
            if self.cur < self.n:
                return self.read() ^ 64
            raise self.error("Illegal control escape sequence")
        if c == "x":
            return self.hex()
        if c == "u":
            return self.unicode_escape()
        if c == "N":
            return self.named_char()
        if ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9"):
            raise self.error("Illegal/unsupported escape sequence")
        return ch

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
            if self.read() == _BACKSLASH and self.read() == ord("u"):
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

    def named_ref(self) -> _Node:
        if self.read() != ord("<"):
            raise self.error("\\k is not followed by '<' for named capturing group")
        name = self.group_name(self.read())
        number = self.named.get(name)
        if number is None:
            raise self.error(f"named capturing group <{name}> does not exist")
        if number not in self.closed:
            raise self.unsupported(f"back reference \\k<{name}> inside the group it refers to")
        return _Node(self.case_scope(f"(?P={name})"), True)

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

    # -------------------------------------------------------------- classes

    def clazz(self, consume: bool) -> CharSet:
        """Java's ``clazz()``: union, ``&&`` intersection, nesting and negation, as one set."""
        prev: Optional[CharSet] = None
        curr: Optional[CharSet] = None
        bits: CharSet = _EMPTY
        has_bits = False
        is_neg = False
        nested = False
        ch = self.next()
        if ch == ord("^") and self._at(self.cur - 1) == ord("["):
            ch = self.next()
            is_neg = True
        while True:
            if ch == ord("["):
                nested = True
                curr = self.clazz(True)
                prev = curr if prev is None else _union(prev, curr)
                ch = self.peek()
                continue
            if ch == ord("&"):
                ch = self.next()
                if ch == ord("&"):
                    nested = True
                    ch = self.next()
                    right: Optional[CharSet] = None
                    while ch not in (ord("]"), ord("&")):
                        if ch == ord("["):
                            part = self.clazz(True)
                        else:
                            self.unread()
                            part = self.clazz(False)
                        right = part if right is None else _union(right, part)
                        ch = self.peek()
                    if has_bits:
                        if prev is None:
                            prev = curr = bits
                        else:
                            prev = _union(prev, bits)
                        has_bits = False
                    if right is not None:
                        curr = right
                    if prev is None:
                        if right is None:
                            raise self.error("Bad class syntax")
                        prev = right
                    else:
                        if curr is None:
                            raise self.error("Bad intersection syntax")
                        prev = _intersect(prev, curr)
                    continue
                self.unread()  # a literal '&'
            elif ch == 0 and self.cur >= self.n:
                raise self.error("Unclosed character class")
            elif ch == ord("]") and (prev is not None or has_bits):
                if consume:
                    self.next()
                if prev is None:
                    prev = bits
                elif has_bits:
                    prev = _union(prev, bits)
                if is_neg:
                    if nested:
                        raise self.unsupported(
                            "a negated class holding a nested class or an intersection: Java 8 and Java 9+ "
                            "read it differently"
                        )
                    return _negate(prev)
                return prev
            item = self.range_item()
            if item is None:
                has_bits = True
            else:
                added, into_bits = item
                if into_bits:
                    bits = _union(bits, added)
                    has_bits = True
                else:
                    curr = added
                    prev = added if prev is None else _union(prev, added)
            ch = self.peek()

    def bits_or_single(self, ch: int) -> Tuple[CharSet, bool]:
        exceptions = (0xFF, 0xB5, 0x49, 0x69, 0x53, 0x73, 0x4B, 0x6B, 0xC5, 0xE5)
        if ch < 256 and not (self.has(_I) and self.has(_U) and ch in exceptions):
            members = {ch}
            if self.has(_I):
                if ch < 0x80:
                    members |= {ord(chr(ch).upper()), ord(chr(ch).lower())}
                elif self.has(_U):
                    members |= {_simple_lower(ch), _simple_upper(ch)}
            return _of(*members), True
        return self.single(ch), False

    def range_item(self) -> Optional[Tuple[CharSet, bool]]:
        """Java's ``range()``: one class member; the flag says whether it went into the bits."""
        ch = self.peek()
        if ch == _BACKSLASH:
            ch = self.next_escaped()
            if ch in (ord("p"), ord("P")):
                return self.family_after_p(ch == ord("P")), False
            isrange = self._at(self.cur + 1) == ord("-")
            self.unread()
            value = self.escape(inclass=True, isrange=isrange)
            if isinstance(value, _Node):  # pragma: no cover - inclass escapes never build nodes
                raise self.error("Illegal/unsupported escape sequence")
            if isinstance(value, tuple):
                return value, False
            ch = value
        else:
            self.next()
        if self.peek() == ord("-"):
            end_range = self._at(self.cur + 1)
            if end_range == ord("["):
                return self.bits_or_single(ch)
            if end_range != ord("]"):
                self.next()
                m = self.peek()
                if m == _BACKSLASH:
                    value = self.escape(inclass=True, isrange=True)
                    m = value if isinstance(value, int) else -1
                else:
                    self.next()
                if m < ch:
                    raise self.error("Illegal character range")
                return self.case_range(ch, m), False
        return self.bits_or_single(ch)

    def case_range(self, lo: int, hi: int) -> CharSet:
        base = _of((lo, hi))
        if not self.has(_I):
            return base
        if self.has(_U):
            extra = [cp for cp, up, fold in _cased() if lo <= up <= hi or lo <= fold <= hi]
            return _union(base, _of(*extra))
        extra = []
        for cp in range(0x80):
            c = chr(cp)
            if lo <= ord(c.upper()) <= hi or lo <= ord(c.lower()) <= hi:
                extra.append(cp)
        return _union(base, _of(*extra))

    def family_after_p(self, complement: bool) -> CharSet:
        """After ``\\p``/``\\P`` (cursor on the letter): Java's ``family()``."""
        ch = self.next()
        one_letter = ch != ord("{")
        if one_letter:
            self.unread()
        self.next()
        if one_letter:
            name = chr(self._at(self.cur))
            self.read()
        else:
            start = self.cur
            while True:
                c = self._at(self.cur)
                self.cur += 1
                if c == ord("}") or self.cur > self.n:
                    break
            if self.cur > self.n:
                raise self.error("Unclosed character family")
            if start + 1 >= self.cur:
                raise self.error("Empty character family")
            name = "".join(chr(c) for c in self.t[start : self.cur - 1])
        found = self.property_set(name)
        return _negate(found) if complement else found

    def property_set(self, name: str) -> CharSet:
        ci = self.has(_I)
        found: object = None
        checked = name
        if "=" in name:
            key, _, value = name.partition("=")
            key = key.lower()
            if key in ("sc", "script", "blk", "block"):
                raise self.unsupported(f"\\p{{{name}}}: Python has no Unicode script or block data")
            if key in ("gc", "general_category"):
                found, checked = _java_property(value), value
            if found is None:
                raise self.error(f"Unknown Unicode property {{name=<{key}>, value=<{value}>}}")
        elif name.startswith("In"):
            raise self.unsupported(f"\\p{{{name}}}: Python has no Unicode block data")
        elif name.startswith("Is"):
            short = name[2:]
            found, checked = _unicode_binary(short.upper()), short.upper()
            if found is None:
                found, checked = _java_property(short), short
            if found is None:
                raise self.unsupported(f"\\p{{{name}}}: Python has no Unicode script data")
        else:
            if self.has(_UC):
                found, checked = _unicode_posix(name.upper()), name.upper()
            if found is None:
                found, checked = _java_property(name), name
            if found is None:
                raise self.error(f"Unknown character property name {{{name}}}")
        if found is _UNSUPPORTED:
            raise self.unsupported(f"\\p{{{name}}} needs Unicode data Python does not have")
        if ci and checked in _CASE_PROPERTIES:
            raise self.unsupported(
                f"\\p{{{name}}} under (?i): Java 8 ignores the flag for it, Java 12+ does not"
            )
        return found()  # type: ignore[operator]

    # -------------------------------------------------------------- groups and quantifiers

    def add_flags(self) -> None:
        ch = self.peek()
        while True:
            c = chr(ch) if ch else ""
            if c and c in _FLAG_LETTERS:
                self.flags |= _FLAG_LETTERS[c]
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
            if c and c in _FLAG_LETTERS:
                self.flags &= ~_FLAG_LETTERS[c]
            else:
                return
            ch = self.next()

    def group0(self) -> Optional[_Node]:
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
        return _Node(self.closure(_Node(text, True)), False)

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
            return "+"
        return ""

    def closure(self, node: _Node) -> str:
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


@lru_cache(maxsize=256)
def translate(pattern: str) -> str:
    """The Python :mod:`re` pattern text matching exactly what Java's ``pattern`` matches.

    Capturing groups keep Java's numbering (named groups keep their names).
    Raises :class:`JavaRegexSyntaxError` if Java rejects the pattern and
    :class:`~zkconsumer.errors.UnsupportedPatternError` if it uses Java syntax with
    no Python equivalent (see the module docstring).
    """
    if not isinstance(pattern, str):
        raise TypeError(f"a Java regex must be a string, not {type(pattern).__name__}")
    text = _Parser(pattern).translate()
    try:
        re.compile(text)
    except (re.error, OverflowError, RecursionError) as exc:
        raise UnsupportedPatternError(pattern, f"no Python equivalent was found ({exc})") from None
    return text


def compile_java_regex(pattern: str) -> "re.Pattern[str]":
    """:func:`translate` then compile; use ``fullmatch`` for Java's ``String.matches``."""
    return re.compile(translate(pattern))
