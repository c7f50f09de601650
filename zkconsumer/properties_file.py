"""Java ``.properties`` text as Kafka's tools read it: :func:`parse_properties`.

Follows JDK 9+'s ``java.util.Properties.load`` (``LineReader``) character by
character: comments, continuation lines, escapes and the key/value separators,
so that a file shared by zkconsumer and Kafka's Scala members means the same to
both. :meth:`zkconsumer.config.ConsumerConfig.from_properties` reads files with it.

May import: errors.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Tuple

from .errors import ConfigurationError

__all__ = ["parse_properties"]


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_WHITESPACE = " \t\f"


def _logical_lines(text: str) -> Iterator[Tuple[str, int]]:
    """Java ``Properties`` logical lines, following JDK 9+'s ``LineReader`` character by character.

    Leading whitespace (space, tab, form feed) of every natural line is skipped.
    While a logical line is still empty, ``#`` or ``!`` starts a comment that runs
    to the end of the natural line, and blank lines are skipped. A line ending in
    an odd number of backslashes continues on the next natural line. At the end of
    the text a pending logical line is returned without its trailing backslash
    (it may then be empty: Java then stores an empty key). Each line comes with the offset in
    ``text`` of its first character.
    """
    n = len(text)
    off = 0
    while True:
        buf: List[str] = []
        start = off
        skip_ws, appended_begin, preceding_bs = True, False, False
        line: Optional[str] = None
        while line is None:
            if off >= n:
                if not buf:
                    return
                line = "".join(buf[:-1] if preceding_bs else buf)
                break
            c = text[off]
            off += 1
            if skip_ws:
                if c in _WHITESPACE or (not appended_begin and c in "\r\n"):
                    continue
                skip_ws = appended_begin = False
            if not buf and c in "#!":  # a comment: skip to the end of the natural line
                while off < n and text[off] not in "\r\n":
                    off += 1
                if off >= n:
                    return
                off += 1
                skip_ws = True
                continue
            if c not in "\r\n":
                if not buf:
                    start = off - 1
                buf.append(c)
                preceding_bs = (not preceding_bs) if c == "\\" else False
            elif not buf:
                skip_ws = True
            elif off >= n:
                line = "".join(buf[:-1] if preceding_bs else buf)
            elif preceding_bs:  # continuation: drop the backslash, join the next line
                buf.pop()
                skip_ws, appended_begin, preceding_bs = True, True, False
                if c == "\r" and text[off] == "\n":
                    off += 1
            else:
                line = "".join(buf)
        yield line, start


def _unescape(text: str, key: str) -> str:
    out: List[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        i += 1
        if ch != "\\" or i >= len(text):
            if ch != "\\":
                out.append(ch)
            continue
        ch = text[i]
        i += 1
        if ch == "u":
            digits = text[i : i + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigurationError(key or "(properties file)", f"malformed \\uxxxx escape: \\u{digits}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(ch, ch))
    return "".join(out)


def _split_key_value(line: str) -> Tuple[str, str]:
    i, n = 0, len(line)
    while i < n:
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch in _WHITESPACE:
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def parse_properties(text: str) -> Dict[str, str]:
    """Parse Java ``.properties`` text as ``java.util.Properties.load`` does.

    Lines whose first non-blank character is ``#`` or ``!`` are comments. A key
    ends at the first unescaped ``=``, ``:`` or whitespace; one ``=``/``:`` and the
    whitespace around it separate key and value. A line ending in an odd number
    of backslashes continues on the next line (whose leading whitespace is
    dropped). Escapes ``\\t \\n \\r \\f \\uXXXX`` are decoded and ``\\x`` means
    ``x``. The last occurrence of a key wins. Trailing whitespace stays part of
    the value, as in Java (Kafka 0.8.2's consumer sees it, and refuses
    ``"true "`` for a boolean); :class:`ConsumerConfig` decides what it means.

    >>> parse_properties('''# comment
    ... group.id = g1
    ... zookeeper.connect: zk1:2181,\\\\
    ...     zk2:2181/kafka
    ... consumer.timeout.ms 5000
    ... ''')
    {'group.id': 'g1', 'zookeeper.connect': 'zk1:2181,zk2:2181/kafka', 'consumer.timeout.ms': '5000'}
    """
    return {key: value for key, (value, _line) in parse_properties_with_lines(text).items()}


def parse_properties_with_lines(text: str) -> Dict[str, Tuple[str, int]]:
    """:func:`parse_properties`, each value with the number (from 1) of the line its key is on.

    >>> parse_properties_with_lines("# c\\na=1\\n\\nb = 2\\n")
    {'a': ('1', 2), 'b': ('2', 4)}
    """
    result: Dict[str, Tuple[str, int]] = {}
    for line, start in _logical_lines(text):
        raw_key, raw_value = _split_key_value(line)
        key = _unescape(raw_key, "")
        result[key] = (_unescape(raw_value, key), _line_number(text, start))
    return result


def _line_number(text: str, offset: int) -> int:
    """The number (from 1) of the line ``offset`` is on; ``\\r\\n``, ``\\r`` and ``\\n`` each end a line, as in Java.

    >>> _line_number("a\\r\\nb\\rc\\nd", 7)
    4
    """
    return text.count("\n", 0, offset) + text.count("\r", 0, offset) - text.count("\r\n", 0, offset) + 1
