"""Code point sets (sorted disjoint ranges), the classes and Unicode properties Java knows, and their Python ``[...]`` text."""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import Callable, Dict, Iterable, List, Tuple, Union

# ----------------------------------------------------------------------------- code point sets

#: A set of code points: sorted, disjoint, non-adjacent inclusive ranges.
CharSet = Tuple[Tuple[int, int], ...]

MAX_CP = 0x10FFFF
ALL_CHARS: CharSet = ((0, MAX_CP),)
EMPTY: CharSet = ()


def _normalize(ranges: Iterable[Tuple[int, int]]) -> CharSet:
    out: List[List[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def char_set(*items: Union[int, Tuple[int, int]]) -> CharSet:
    return _normalize((i, i) if isinstance(i, int) else i for i in items)


def union(*sets: CharSet) -> CharSet:
    return _normalize(r for s in sets for r in s)


def negate(s: CharSet) -> CharSet:
    out: List[Tuple[int, int]] = []
    nxt = 0
    for lo, hi in s:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
    return tuple(out)


def intersect(a: CharSet, b: CharSet) -> CharSet:
    return negate(union(negate(a), negate(b)))


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


def categories(*names: str) -> CharSet:
    table = _categories()
    return union(*(table.get(n, EMPTY) for n in names))


@lru_cache(maxsize=None)
def _str_predicate_set(kind: str) -> CharSet:
    if kind == "lower":
        return _from_predicate(lambda cp: chr(cp).islower())
    if kind == "upper":
        return _from_predicate(lambda cp: chr(cp).isupper())
    if kind == "mirrored":
        return _from_predicate(lambda cp: unicodedata.mirrored(chr(cp)) == 1)
    raise KeyError(kind)


def simple_upper(cp: int) -> int:
    u = chr(cp).upper()
    return ord(u) if len(u) == 1 else cp


def simple_lower(cp: int) -> int:
    lo = chr(cp).lower()
    return ord(lo) if len(lo) == 1 else cp


@lru_cache(maxsize=None)
def case_table() -> Tuple[Tuple[int, int, int], ...]:
    """(cp, upper(cp), lower(upper(cp))) for every code point with a case mapping."""
    rows = []
    for cp in range(0x1F000):
        up = simple_upper(cp)
        if up != cp or simple_lower(cp) != cp:
            rows.append((cp, up, simple_lower(up)))
    return tuple(rows)


# ASCII classes (java.util.regex.ASCII)
ASCII_DIGIT = char_set((0x30, 0x39))
_ASCII_UPPER = char_set((0x41, 0x5A))
_ASCII_LOWER = char_set((0x61, 0x7A))
_ASCII_ALPHA = union(_ASCII_UPPER, _ASCII_LOWER)
_ASCII_ALNUM = union(_ASCII_ALPHA, ASCII_DIGIT)
ASCII_WORD = union(_ASCII_ALNUM, char_set(0x5F))
ASCII_SPACE = char_set(0x20, (0x09, 0x0D))
_ASCII_PUNCT = char_set((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E))
_ASCII_GRAPH = char_set((0x21, 0x7E))
_ASCII_CNTRL = char_set((0x00, 0x1F), 0x7F)
_ASCII_XDIGIT = char_set((0x30, 0x39), (0x41, 0x46), (0x61, 0x66))
HORIZ_WS = char_set(0x09, 0x20, 0xA0, 0x1680, 0x180E, (0x2000, 0x200A), 0x202F, 0x205F, 0x3000)
VERT_WS = char_set((0x0A, 0x0D), 0x85, 0x2028, 0x2029)
LINE_TERMINATORS = char_set(0x0A, 0x0D, 0x85, 0x2028, 0x2029)
_HEX_EXTRA = char_set((0x30, 0x39), (0x41, 0x46), (0x61, 0x66), (0xFF10, 0xFF19), (0xFF21, 0xFF26), (0xFF41, 0xFF46))

#: java.util.regex.Pattern's flags, with Java's values.
CASE_INSENSITIVE, UNIX_LINES, MULTILINE, DOTALL = 1, 2, 4, 8
UNICODE_CASE, COMMENTS, CANON_EQ, UNICODE_CHARACTER_CLASS = 16, 32, 64, 128
FLAG_LETTERS = {
    "i": CASE_INSENSITIVE, "d": UNIX_LINES, "m": MULTILINE, "s": DOTALL, "u": UNICODE_CASE, "x": COMMENTS,
    "c": CANON_EQ, "U": UNICODE_CHARACTER_CLASS | UNICODE_CASE,
}

UNSUPPORTED = object()  # a property Java knows but Python has no data for


def white_space() -> CharSet:
    return union(categories("Zs", "Zl", "Zp"), char_set((0x09, 0x0D), 0x85))


def _graph() -> CharSet:
    return negate(categories("Zs", "Zl", "Zp", "Cc", "Cs", "Cn"))


def _blank() -> CharSet:
    return union(categories("Zs"), char_set(0x09))


def _print() -> CharSet:
    return intersect(union(_graph(), _blank()), negate(categories("Cc")))


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
CASE_PROPERTIES = frozenset(
    {"Lu", "Ll", "Lt", "Lower", "Upper", "javaLowerCase", "javaUpperCase", "javaTitleCase",
     "LOWERCASE", "UPPERCASE", "TITLECASE", "LOWER", "UPPER"}
)


def java_property(name: str) -> object:
    """Kafka's ``CharPredicates.forProperty`` names: a CharSet, UNSUPPORTED, or None (unknown)."""
    if name in _SINGLE_CATEGORIES:
        return lambda: categories(name)
    if name in _CATEGORY_GROUPS:
        return lambda: categories(*_CATEGORY_GROUPS[name])
    table: Dict[str, Callable[[], CharSet]] = {
        "L1": lambda: char_set((0, 0xFF)),
        "all": lambda: ALL_CHARS,
        "ASCII": lambda: char_set((0, 0x7F)),
        "Alnum": lambda: _ASCII_ALNUM,
        "Alpha": lambda: _ASCII_ALPHA,
        "Blank": lambda: char_set(0x20, 0x09),
        "Cntrl": lambda: _ASCII_CNTRL,
        "Digit": lambda: ASCII_DIGIT,
        "Graph": lambda: _ASCII_GRAPH,
        "Lower": lambda: _ASCII_LOWER,
        "Print": lambda: char_set((0x20, 0x7E)),
        "Punct": lambda: _ASCII_PUNCT,
        "Space": lambda: ASCII_SPACE,
        "Upper": lambda: _ASCII_UPPER,
        "XDigit": lambda: _ASCII_XDIGIT,
        "javaLowerCase": lambda: _str_predicate_set("lower"),
        "javaUpperCase": lambda: _str_predicate_set("upper"),
        "javaTitleCase": lambda: categories("Lt"),
        "javaDigit": lambda: categories("Nd"),
        "javaDefined": lambda: negate(categories("Cn")),
        "javaLetter": lambda: categories("Lu", "Ll", "Lt", "Lm", "Lo"),
        "javaLetterOrDigit": lambda: categories("Lu", "Ll", "Lt", "Lm", "Lo", "Nd"),
        "javaSpaceChar": lambda: categories("Zs", "Zl", "Zp"),
        "javaWhitespace": lambda: union(
            intersect(categories("Zs", "Zl", "Zp"), negate(char_set(0xA0, 0x2007, 0x202F))), char_set((0x09, 0x0D), (0x1C, 0x1F))
        ),
        "javaISOControl": lambda: char_set((0x00, 0x1F), (0x7F, 0x9F)),
        "javaMirrored": lambda: _str_predicate_set("mirrored"),
        "javaJavaIdentifierStart": lambda: categories("Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Sc", "Pc"),
        "javaJavaIdentifierPart": lambda: union(
            categories("Lu", "Ll", "Lt", "Lm", "Lo", "Sc", "Pc", "Nd", "Nl", "Mc", "Mn", "Cf"),
            char_set((0x00, 0x08), (0x0E, 0x1B), (0x7F, 0x9F)),
        ),
        "javaIdentifierIgnorable": lambda: union(categories("Cf"), char_set((0x00, 0x08), (0x0E, 0x1B), (0x7F, 0x9F))),
    }
    if name in table:
        return table[name]
    if name in ("javaAlphabetic", "javaIdeographic", "javaUnicodeIdentifierStart", "javaUnicodeIdentifierPart"):
        return UNSUPPORTED
    return None


def unicode_posix(name: str) -> object:
    """``CharPredicates`` POSIX names in their Unicode meaning (``(?U)``, ``\\p{IsAlpha}``); upper-cased name."""
    table: Dict[str, Callable[[], CharSet]] = {
        "LOWER": lambda: _str_predicate_set("lower"),
        "UPPER": lambda: _str_predicate_set("upper"),
        "SPACE": white_space,
        "PUNCT": lambda: categories(*_CATEGORY_GROUPS["P"]),
        "XDIGIT": lambda: union(categories("Nd"), _HEX_EXTRA),
        "CNTRL": lambda: categories("Cc"),
        "DIGIT": lambda: categories("Nd"),
        "BLANK": _blank,
        "GRAPH": _graph,
        "PRINT": _print,
    }
    if name in table:
        return table[name]
    if name in ("ALPHA", "ALNUM"):
        return UNSUPPORTED
    return None


def unicode_binary(name: str) -> object:
    """``CharPredicates.forUnicodeProperty`` names (upper-cased), then the Unicode POSIX names."""
    table: Dict[str, Callable[[], CharSet]] = {
        "ASSIGNED": lambda: negate(categories("Cn")),
        "CONTROL": lambda: categories("Cc"),
        "HEXDIGIT": lambda: union(categories("Nd"), _HEX_EXTRA),
        "HEX_DIGIT": lambda: union(categories("Nd"), _HEX_EXTRA),
        "JOINCONTROL": lambda: char_set(0x200C, 0x200D),
        "JOIN_CONTROL": lambda: char_set(0x200C, 0x200D),
        "LETTER": lambda: categories("Lu", "Ll", "Lt", "Lm", "Lo"),
        "LOWERCASE": lambda: _str_predicate_set("lower"),
        "UPPERCASE": lambda: _str_predicate_set("upper"),
        "TITLECASE": lambda: categories("Lt"),
        "NONCHARACTERCODEPOINT": lambda: union(
            char_set((0xFDD0, 0xFDEF)), _normalize((p | 0xFFFE, p | 0xFFFF) for p in range(0, MAX_CP + 1, 0x10000))
        ),
        "PUNCTUATION": lambda: categories(*_CATEGORY_GROUPS["P"]),
        "WHITESPACE": white_space,
        "WHITE_SPACE": white_space,
    }
    table["NONCHARACTER_CODE_POINT"] = table["NONCHARACTERCODEPOINT"]
    if name in table:
        return table[name]
    if name in ("ALPHABETIC", "IDEOGRAPHIC", "WORD", "EMOJI", "EMOJI_PRESENTATION", "EMOJI_MODIFIER",
                "EMOJI_MODIFIER_BASE", "EMOJI_COMPONENT", "EXTENDED_PICTOGRAPHIC"):
        return UNSUPPORTED
    return unicode_posix(name)


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


def class_text(s: CharSet) -> str:
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

