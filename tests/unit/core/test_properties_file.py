"""zkconsumer.properties_file: Java ``.properties`` text read as ``java.util.Properties.load`` reads it."""

from __future__ import annotations

from typing import Dict, Tuple

import pytest

from zkconsumer.errors import ConfigurationError
from zkconsumer.properties_file import parse_properties, parse_properties_with_lines

# Expected dicts produced by Java 17's java.util.Properties.load (values trimmed, as Kafka does).
JAVA_PROPERTIES_VECTORS = [
    ("a=b\nc : d\ne f\n  g\th\n", {"a": "b", "c": "d", "e": "f", "g": "h"}),
    ("# c\n! c2\n  #c3\nkey = value with spaces  \n", {"key": "value with spaces  "}),  # Java keeps trailing blanks
    ("multi = one,\\\n    two,\\\n\tthree\n", {"multi": "one,two,three"}),
    ("even = ends with two \\\\\nnext = x\n", {"even": "ends with two \\", "next": "x"}),
    ("k\\=ey = v\\:al\\ ue\nsp\\ ace\\ key=1\n", {"k=ey": "v:al ue", "sp ace key": "1"}),
    ("uni = \\u00e9t\\u00E9\ntab=a\\tb\\nc\n", {"tab": "a\tb\nc", "uni": "\u00e9t\u00e9"}),
    ("empty=\nonlykey\n   \n\n:novalkey\n=noKey\n", {"": "noKey", "empty": "", "onlykey": ""}),
    ("cont_at_eof = abc\\", {"cont_at_eof": "abc"}),
    ("dup=1\ndup=2\n", {"dup": "2"}),
    ("# comment \\\nnot.a.continuation = yes\n", {"not.a.continuation": "yes"}),
    ("a = b = c\nx:y:z\nq  =  : r\n", {"a": "b = c", "q": ": r", "x": "y:z"}),
    ("win = 1\r\nmac = 2\rnix = 3\n", {"mac": "2", "nix": "3", "win": "1"}),
    ("k = \\\n\n j = after blank\n", {"j": "after blank", "k": ""}),
    ("\\#notcomment = 1\n  \\!x=2\n", {"!x": "2", "#notcomment": "1"}),
    ("k=v\\\n# not a comment\n", {"k": "v# not a comment"}),
    ("\\\n# a comment after an empty continuation\nz=1\n", {"z": "1"}),
]


@pytest.mark.parametrize("text,expected", JAVA_PROPERTIES_VECTORS)
def test_parse_properties_like_java(text: str, expected: Dict[str, str]) -> None:
    assert parse_properties(text) == expected


def test_a_malformed_unicode_escape_names_its_key() -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_properties("bad = x\\u12G4\n")
    assert info.value.property == "bad" and "\\uxxxx" in str(info.value)


def test_a_malformed_unicode_escape_in_a_key_names_the_file_not_a_property() -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_properties("b\\u00zz = 1\n")
    assert info.value.property == "(properties file)" and "\\u00zz" in str(info.value)


def test_empty_blank_and_comment_only_texts_hold_nothing() -> None:
    assert parse_properties("") == {} and parse_properties("\n \t\n\f\n") == {}
    assert parse_properties("# a\n! b\n   # c \\\n") == {}


LINE_VECTORS = [
    ("# c\na=1\n\nb = 2\n", {"a": ("1", 2), "b": ("2", 4)}),
    # a continued value is on the line its key starts on
    ("x=1\nlong = one,\\\n  two\ny=2\n", {"long": ("one,two", 2), "x": ("1", 1), "y": ("2", 4)}),
    # the last occurrence wins, with its own line
    ("k=1\nother=x\nk=2\n", {"k": ("2", 3), "other": ("x", 2)}),
    # Windows and old Mac line ends count as one line each
    ("a=1\r\nb=2\rc=3\n", {"a": ("1", 1), "b": ("2", 2), "c": ("3", 3)}),
    # leading blanks and an indented key
    ("\n\n   indented = v\n", {"indented": ("v", 3)}),
]


@pytest.mark.parametrize("text, expected", LINE_VECTORS)
def test_each_value_comes_with_the_line_of_its_key(text: str, expected: Dict[str, Tuple[str, int]]) -> None:
    assert parse_properties_with_lines(text) == expected


@pytest.mark.parametrize("text, _expected", LINE_VECTORS)
def test_parse_properties_is_the_values_without_their_lines(text: str, _expected: object) -> None:
    assert parse_properties(text) == {k: v for k, (v, _line) in parse_properties_with_lines(text).items()}
