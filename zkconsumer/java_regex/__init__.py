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
  atomic groups ``(?>X)`` (both on Python 3.11 and later only: older :mod:`re`
  has neither, and they raise :class:`~zkconsumer.errors.UnsupportedPatternError`), lookahead, lookbehind (bounded alternatives of
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

May import: errors.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..errors import UnsupportedPatternError
from .parser import Parser
from .scanner import JavaRegexSyntaxError

__all__ = ["JavaRegexSyntaxError", "compile_java_regex", "translate"]


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
    text = Parser(pattern).translate()
    try:
        re.compile(text)
    except (re.error, OverflowError, RecursionError) as exc:
        raise UnsupportedPatternError(pattern, f"no Python equivalent was found ({exc})") from None
    return text


def compile_java_regex(pattern: str) -> "re.Pattern[str]":
    """:func:`translate` then compile; use ``fullmatch`` for Java's ``String.matches``."""
    return re.compile(translate(pattern))
