"""Character classes: escapes, ``[...]`` with unions, intersections and ranges, ``\\p{...}`` properties, case folding."""

from __future__ import annotations

from typing import Optional, Tuple, Union, cast

from .charsets import (
    ASCII_DIGIT,
    ASCII_SPACE,
    ASCII_WORD,
    CASE_INSENSITIVE,
    CASE_PROPERTIES,
    EMPTY,
    HORIZ_WS,
    UNICODE_CASE,
    UNICODE_CHARACTER_CLASS,
    UNSUPPORTED,
    VERT_WS,
    CharSet,
    case_table,
    categories,
    char_set,
    intersect,
    java_property,
    negate,
    simple_lower,
    simple_upper,
    unicode_binary,
    unicode_posix,
    union,
    white_space,
)
from .scanner import BACKSLASH, Node, Scanner


class ClassParser(Scanner):
    """The parts of Java's grammar that yield sets of code points."""

    def single(self, ch: int) -> CharSet:
        """Java's ``single()``: one character, case-folded as the flags say."""
        if self.has(CASE_INSENSITIVE):
            if self.has(UNICODE_CASE):
                upper = simple_upper(ch)
                lower = simple_lower(upper)
                if upper != lower:
                    return union(char_set(lower), char_set(*(cp for cp, _up, fold in case_table() if fold == lower)))
            elif ch < 0x80 and chr(ch).isalpha():
                return char_set(ord(chr(ch).lower()), ord(chr(ch).upper()))
        return char_set(ch)

    def escape(self, inclass: bool, isrange: bool) -> Union[int, CharSet, Node]:
        """After a backslash: a code point, a class (tuple of ranges) or a node."""
        ch = self.skip()
        c = chr(ch) if ch else "\x00"
        if c == "0":
            return self.octal()
        if c in "123456789" and not inclass:
            return self.ref(ch - 0x30)
        if not inclass:
            if c == "A" or c == "G":
                return Node(r"\A", False)
            if c == "B":
                return self.bound(True)
            if c == "b":
                if self.peek() == ord("{"):
                    raise self.unsupported("\\b{g} (grapheme cluster boundary) has no Python equivalent")
                return self.bound(False)
            if c == "R":
                return Node(r"(?:\r\n|[\n\x0b\x0c\r\x85\u2028\u2029])", False)
            if c == "X":
                raise self.unsupported("\\X (grapheme cluster) has no Python equivalent")
            if c == "Z":
                return self.dollar(False)
            if c == "z":
                return Node(r"\Z", False)
            if c == "k":
                return self.named_ref()
        if c == "d":
            return categories("Nd") if self.has(UNICODE_CHARACTER_CLASS) else ASCII_DIGIT
        if c == "D":
            return negate(categories("Nd") if self.has(UNICODE_CHARACTER_CLASS) else ASCII_DIGIT)
        if c == "s":
            return white_space() if self.has(UNICODE_CHARACTER_CLASS) else ASCII_SPACE
        if c == "S":
            return negate(white_space() if self.has(UNICODE_CHARACTER_CLASS) else ASCII_SPACE)
        if c in "wW":
            if self.has(UNICODE_CHARACTER_CLASS):
                raise self.unsupported("\\w under (?U) needs Unicode's Alphabetic property, which Python lacks")
            return ASCII_WORD if c == "w" else negate(ASCII_WORD)
        if c == "h":
            return HORIZ_WS
        if c == "H":
            return negate(HORIZ_WS)
        if c == "v":
            return 0x0B if isrange else VERT_WS
        if c == "V":
            return negate(VERT_WS)
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

    def clazz(self, consume: bool) -> CharSet:
        """Java's ``clazz()``: union, ``&&`` intersection, nesting and negation, as one set."""
        prev: Optional[CharSet] = None
        curr: Optional[CharSet] = None
        bits: CharSet = EMPTY
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
                prev = curr if prev is None else union(prev, curr)
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
                        right = part if right is None else union(right, part)
                        ch = self.peek()
                    if has_bits:
                        if prev is None:
                            prev = curr = bits
                        else:
                            prev = union(prev, bits)
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
                        prev = intersect(prev, curr)
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
                    prev = union(prev, bits)
                if is_neg:
                    if nested:
                        raise self.unsupported(
                            "a negated class holding a nested class or an intersection: Java 8 and Java 9+ "
                            "read it differently"
                        )
                    return negate(prev)
                return prev
            item = self.range_item()
            if item is None:
                has_bits = True
            else:
                added, into_bits = item
                if into_bits:
                    bits = union(bits, added)
                    has_bits = True
                else:
                    curr = added
                    prev = added if prev is None else union(prev, added)
            ch = self.peek()

    def bits_or_single(self, ch: int) -> Tuple[CharSet, bool]:
        exceptions = (0xFF, 0xB5, 0x49, 0x69, 0x53, 0x73, 0x4B, 0x6B, 0xC5, 0xE5)
        if ch < 256 and not (self.has(CASE_INSENSITIVE) and self.has(UNICODE_CASE) and ch in exceptions):
            members = {ch}
            if self.has(CASE_INSENSITIVE):
                if ch < 0x80:
                    members |= {ord(chr(ch).upper()), ord(chr(ch).lower())}
                elif self.has(UNICODE_CASE):
                    members |= {simple_lower(ch), simple_upper(ch)}
            return char_set(*members), True
        return self.single(ch), False

    def range_item(self) -> Optional[Tuple[CharSet, bool]]:
        """Java's ``range()``: one class member; the flag says whether it went into the bits."""
        ch = self.peek()
        if ch == BACKSLASH:
            ch = self.next_escaped()
            if ch in (ord("p"), ord("P")):
                return self.family_after_p(ch == ord("P")), False
            isrange = self._at(self.cur + 1) == ord("-")
            self.unread()
            value = self.escape(inclass=True, isrange=isrange)
            if isinstance(value, Node):  # pragma: no cover - inclass escapes never build nodes
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
                if m == BACKSLASH:
                    value = self.escape(inclass=True, isrange=True)
                    m = value if isinstance(value, int) else -1
                else:
                    self.next()
                if m < ch:
                    raise self.error("Illegal character range")
                return self.case_range(ch, m), False
        return self.bits_or_single(ch)

    def case_range(self, lo: int, hi: int) -> CharSet:
        base = char_set((lo, hi))
        if not self.has(CASE_INSENSITIVE):
            return base
        if self.has(UNICODE_CASE):
            extra = [cp for cp, up, fold in case_table() if lo <= up <= hi or lo <= fold <= hi]
            return union(base, char_set(*extra))
        extra = []
        for cp in range(0x80):
            c = chr(cp)
            if lo <= ord(c.upper()) <= hi or lo <= ord(c.lower()) <= hi:
                extra.append(cp)
        return union(base, char_set(*extra))

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
        return negate(found) if complement else found

    def property_set(self, name: str) -> CharSet:
        ci = self.has(CASE_INSENSITIVE)
        found: object = None
        checked = name
        if "=" in name:
            key, _, value = name.partition("=")
            key = key.lower()
            if key in ("sc", "script", "blk", "block"):
                raise self.unsupported(f"\\p{{{name}}}: Python has no Unicode script or block data")
            if key in ("gc", "general_category"):
                found, checked = java_property(value), value
            if found is None:
                raise self.error(f"Unknown Unicode property {{name=<{key}>, value=<{value}>}}")
        elif name.startswith("In"):
            raise self.unsupported(f"\\p{{{name}}}: Python has no Unicode block data")
        elif name.startswith("Is"):
            short = name[2:]
            found, checked = unicode_binary(short.upper()), short.upper()
            if found is None:
                found, checked = java_property(short), short
            if found is None:
                raise self.unsupported(f"\\p{{{name}}}: Python has no Unicode script data")
        else:
            if self.has(UNICODE_CHARACTER_CLASS):
                found, checked = unicode_posix(name.upper()), name.upper()
            if found is None:
                found, checked = java_property(name), name
            if found is None:
                raise self.error(f"Unknown character property name {{{name}}}")
        if found is UNSUPPORTED:
            raise self.unsupported(f"\\p{{{name}}} needs Unicode data Python does not have")
        if ci and checked in CASE_PROPERTIES:
            raise self.unsupported(
                f"\\p{{{name}}} under (?i): Java 8 ignores the flag for it, Java 12+ does not"
            )
        return cast(CharSet, found())  # type: ignore[operator]
