"""The Java -> Python regex translator, checked against java.util.regex itself where a JDK is installed.

Issue "Correct under faults", item 5: another member's wildcard using Java-only syntax must be read
as Java reads it (or refused loudly), never skipped or read differently.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from typing import Dict, List, Optional, Tuple

import pytest

from zkconsumer.errors import UnsupportedPatternError
from zkconsumer.java_regex import JavaRegexSyntaxError, compile_java_regex, translate
from zkconsumer.java_regex.parser import NEEDS_ATOMIC, RE_HAS_ATOMIC


def refused_before_311(pattern: str) -> bool:
    """True on Python < 3.11 when ``pattern`` has a possessive quantifier or an atomic group.

    Python's re has neither before 3.11, so the translation refuses such a pattern there with
    UnsupportedPatternError naming Python 3.11 (zkconsumer/java_regex/parser.py); 3.11+ always False.
    """
    if RE_HAS_ATOMIC:
        return False
    try:
        translate(pattern)
    except UnsupportedPatternError as error:
        return NEEDS_ATOMIC in str(error)
    return False


TOPICS = ["events", "Events", "EVENTS", "logs", "logs-2024", "a.b", "a_b", "aXb", "x", "", "metrics.cpu", "abc"]

# (Java regex, inputs). Every pair is checked with String.matches in the JVM and with the translation.
CASES: List[Tuple[str, List[str]]] = [
    # POSIX classes (ASCII)
    (r"\p{Lower}+", ["events", "Events", "é", ""]),
    (r"\p{Upper}\p{Lower}*", ["Events", "events", "EVENTS"]),
    (r"\p{ASCII}*", ["events", "é", "a\x7f"]),
    (r"\p{Alpha}+[0-9]", ["logs2", "logs-2", "é2"]),
    (r"\p{Digit}{2,4}", ["12", "12345", "١٢"]),
    (r"\p{Alnum}+", ["aB3", "a_b", "é"]),
    (r"\p{Punct}+", [".-_", "!~", "a"]),
    (r"\p{Graph}+", ["a.b", "a b", "\x7f"]),
    (r"\p{Print}+", ["a b", "a\tb"]),
    (r"a\p{Blank}b", ["a b", "a\tb", "a\nb"]),
    (r"\p{Cntrl}", ["\x01", "\x7f", "a"]),
    (r"\p{XDigit}+", ["0aF", "0aG"]),
    (r"a\p{Space}b", ["a b", "a\x0bb", "a\u00a0b"]),
    (r"\P{Lower}+", ["ABC", "aBC", "123"]),
    (r"[\p{Lower}&&[^aeiou]]+", ["xyz", "xaz"]),
    # java.lang.Character classes and Unicode categories
    (r"\p{javaLowerCase}+", ["abc", "aBc", "ß"]),
    (r"\p{javaUpperCase}+", ["ABC", "AbC"]),
    (r"\p{javaDigit}+", ["123", "12a"]),
    (r"\p{javaLetter}+", ["abcé", "ab1"]),
    (r"\p{javaLetterOrDigit}+", ["ab1", "a-b"]),
    (r"\p{javaWhitespace}", [" ", "\u00a0", "\x1c"]),
    (r"\p{javaJavaIdentifierStart}\p{javaJavaIdentifierPart}*", ["_a1", "$x", "1a"]),
    (r"\p{Lu}\p{Ll}+", ["Events", "events"]),
    (r"\p{L}+", ["abc", "ab1", "ÄÖü"]),
    (r"\pL\pN", ["a1", "1a"]),
    (r"\p{IsL}+", ["abc", "a1"]),
    (r"\p{IsLu}", ["A", "a"]),
    (r"\p{gc=Nd}+", ["123", "1a"]),
    (r"\p{IsLetter}+", ["abc", "a1"]),
    (r"\p{IsWhite_Space}", [" ", "a"]),
    (r"\p{L1}+", ["aé", "a\u0100"]),
    # class unions, intersections, subtractions and Java's edge cases
    (r"[a-d[m-p]]+", ["abmp", "abe"]),
    (r"[a-z&&[def]]", ["d", "a"]),
    (r"[a-z&&[^bc]]+", ["ade", "abe"]),
    (r"[a-z&&[^m-p]]+", ["abz", "amz"]),
    (r"[abc[def]ghi]+", ["adg", "adx"]),
    (r"[a-z&&d-f&&e]", ["e", "d"]),
    (r"[]a]+", ["]a", "b"]),
    (r"[a-]+", ["a-", "b"]),
    (r"[&&a]", ["a", "&"]),
    (r"[a&b]+", ["a&b", "c"]),
    (r"[\[\]]+", ["[]", "a"]),
    (r"[a\-z]+", ["a-z", "b"]),
    (r"[^abc]+", ["xyz", "xaz"]),
    (r"[a^b]+", ["a^b", "c"]),
    (r"[\d-z]+", ["1-z", "a"]),
    # quoting
    (r"\Qa.b\E", ["a.b", "axb"]),
    (r"\Qlogs*\E.*", ["logs*", "logs*-2", "logs"]),
    (r"x\Q1\E", ["x1", "x"]),
    (r"\Q(\E[a-c]\Q)\E", ["(a)", "a"]),
    (r"\Qab", ["ab", "a"]),
    (r"[\Q-.\E]+", ["-.", "a"]),
    # possessive, reluctant and greedy quantifiers
    (r"a?+a", ["a", "aa"]),
    (r"a*+a", ["aaa", "a"]),
    (r"a++b", ["aab", "b"]),
    (r"a{1,3}+a", ["aaaa", "aa"]),
    (r"(ab)*+ab", ["abab", "ab"]),
    (r".*?s", ["logs", "log"]),
    (r"a{2}", ["aa", "a"]),
    (r"a{2,}", ["aa", "aaaa", "a"]),
    (r"x{2}{3}", ["xx", "xxxxxx"]),
    (r"(?>a|ab)c", ["abc", "ac"]),
    # embedded flags
    (r"(?i)events", ["EVENTS", "Events", "events"]),
    (r"ev(?i)ENTS", ["evENTS", "events", "EVents"]),
    (r"a(?i)b|c", ["aB", "C", "AB"]),
    (r"(?i:a)b", ["Ab", "AB"]),
    (r"(?i)a(?-i)b", ["Ab", "AB"]),
    (r"((?i)a)b", ["Ab", "AB"]),
    (r"(?i)[a-c]+", ["AbC", "d"]),
    (r"(?i)[^a]", ["A", "b"]),
    (r"(?i)k", ["K", "\u212a"]),
    (r"(?iu)k", ["K", "\u212a"]),
    (r"(?iu)é", ["É", "e"]),
    (r"(?i)é", ["É", "é"]),
    (r"(?s)a.b", ["a\nb", "axb"]),
    (r"a.b", ["a\nb", "a\rb", "a\u0085b", "axb"]),
    (r"(?d)a.b", ["a\rb", "a\nb"]),
    (r"(?m)a$\n^b", ["a\nb"]),
    (r"a$\n", ["a\n"]),
    (r"a$\r\n", ["a\r\n"]),
    (r"(?m)^a$", ["a", "b"]),
    (r"(?x) a b # comment", ["ab", "a b"]),
    (r"(?x)[a b]+", ["ab", "a b"]),
    (r"(?c)abc", ["abc"]),
    (r"(?u)abc", ["abc", "ABC"]),
    # \h \H \v \V \R, anchors
    (r"a\hb", ["a b", "a\tb", "a\u3000b", "a\nb"]),
    (r"a\Hb", ["axb", "a b"]),
    (r"a\vb", ["a\nb", "a\x0bb", "a\u2028b", "a b"]),
    (r"a\Vb", ["axb", "a\nb"]),
    (r"[\v-\x0c]", ["\x0b", "\x0c", "\n"]),
    (r"a\Rb", ["a\r\nb", "a\nb", "a\rb", "ab"]),
    (r"a\R\nb", ["a\r\nb", "a\n\nb"]),
    (r"\Aab\z", ["ab", "ab\n"]),
    (r"ab\Z", ["ab", "ab\n"]),
    (r"ab\Z\n", ["ab\n"]),
    (r"\Gab", ["ab"]),
    (r"a\b.*", ["a b", "ab", "a-b"]),
    (r"a\B.*", ["ab", "a-b"]),
    (r"^logs$", ["logs", "logs\n"]),
    # escapes
    (r"\0101\0102", ["AB", "A"]),
    (r"\011", ["\t"]),
    (r"\x41\x{42}\x{1F600}", ["AB\U0001f600"]),
    (r"\u0041\uD83D\uDE00", ["A\U0001f600"]),
    (r"\cA\c?", ["\x01\x7f"]),
    (r"\t\n\r\f\a\e", ["\t\n\r\f\x07\x1b"]),
    (r"\N{LATIN SMALL LETTER A}b", ["ab", "xb"]),
    (r"a\.b", ["a.b", "axb"]),
    (r"\d+\D", ["12a", "123", "١٢a"]),
    (r"\w+\W", ["a_1-", "a_1"]),
    (r"\s\S", [" a", "a "]),
    # groups and back references
    (r"(?<t>ev)\k<t>", ["evev", "ev"]),
    (r"(a)(b)\2\1", ["abba", "abab"]),
    (r"(a)\11", ["aa1", "a"]),
    (r"(?:ab)+", ["abab", "aba"]),
    (r"(?=ev)\w+", ["events", "logs"]),
    (r"(?!ev)\w+", ["events", "logs"]),
    (r"\w+(?<=s)", ["logs", "log"]),
    (r"\w+(?<!s)", ["logs", "log"]),
    (r"\w+(?<=ts|log)", ["events", "log", "logs"]),
    (r"(?i)(a)\1", ["aA", "ab"]),
    (r"(a)\5|b", ["a", "b"]),
    (r"\w(?<!ab|c)d", ["bd", "cd"]),
    (r"\N{ latin small letter a }", ["a"]),
    (r"\p{IsLowercase}+\p{IsHex_Digit}", ["abf", "abg"]),
    (r"(?U)\d+", ["12", "١٢"]),
    # Kafka-style topic filters
    (r"events|logs", TOPICS),
    (r"logs-\d{4}", TOPICS),
    (r"metrics\..*", TOPICS),
    (r"[a-z]+", TOPICS),
    (r"(?!logs).*", TOPICS),
    (r"}", ["}"]),
    (r"a]", ["a]"]),
]

# Patterns Java accepts but the translator refuses (UnsupportedPatternError); the JVM check asserts
# that Java does accept them, so the refusal is about Python, not about a typo in the table.
REFUSED = [
    r"\p{InGreek}",
    r"\p{IsLatin}",
    r"\p{sc=Latin}",
    r"\p{javaAlphabetic}",
    r"\p{IsAlphabetic}",
    r"\X",
    r"(?i)\p{Lower}",
    r"(?i)\p{Lu}",
    r"[^a[b]]",
    r"[^a&&b]",
    r"(?U)\w",
    r"(a\1)",
    r"\w+(?<=a+)",
]

# Patterns Java rejects (PatternSyntaxException): the translator raises JavaRegexSyntaxError.
INVALID = [r"a{", r"*a", r"a**", r"[a", r"(a", r"a)", r"\p{Nope}", r"[b-a]", r"\k<x>", r"\y", r"a{,2}", r"[a-\d]", r"[\b]",
           r"(?<1a>x)"]


# --------------------------------------------------------------------------- unit tests (no JVM)


@pytest.mark.parametrize(
    "pattern, topic, expected",
    [
        (r"\p{Lower}+", "events", True),
        (r"\p{Lower}+", "Events", False),
        (r"\Qa.b\E", "a.b", True),
        (r"\Qa.b\E", "axb", False),
        (r"a*+a", "aaa", False),
        (r"[a-z&&[^bc]]+", "ade", True),
        (r"[a-z&&[^bc]]+", "abe", False),
        (r"ev(?i)ENTS", "evEnTs", True),
        (r"ev(?i)ENTS", "EVENTS", False),
        (r"(?i)[^a]", "A", False),
        (r"a\vb", "a\nb", True),
        (r"a\vb", "a\x0bb", True),
        (r"\x{41}", "A", True),
        (r"(?<t>ev)\k<t>", "evev", True),
    ],
)
def test_item5_translated_patterns_match_as_java(pattern: str, topic: str, expected: bool) -> None:
    if refused_before_311(pattern):
        return  # refused on this Python, saying so (test_possessive_and_atomic_need_python_311)
    assert (compile_java_regex(pattern).fullmatch(topic) is not None) is expected


def test_possessive_and_atomic_need_python_311() -> None:
    """Before 3.11 (no possessive quantifiers or atomic groups in re) the refusal names the version."""
    for pattern in ("a*+a", "x++", "a?+", "a{1,2}+", "(?>ab|a)b"):
        if RE_HAS_ATOMIC:
            assert compile_java_regex(pattern) is not None
        else:
            with pytest.raises(UnsupportedPatternError, match="need Python 3.11") as info:
                translate(pattern)
            assert info.value.pattern == pattern
    assert not refused_before_311("a*a") and translate("a*?a")


@pytest.mark.parametrize("pattern", REFUSED)
def test_item5_untranslatable_patterns_raise_unsupported(pattern: str) -> None:
    with pytest.raises(UnsupportedPatternError) as info:
        translate(pattern)
    assert info.value.pattern == pattern


@pytest.mark.parametrize("pattern", INVALID)
def test_item5_java_invalid_patterns_raise_syntax_error(pattern: str) -> None:
    with pytest.raises(JavaRegexSyntaxError):
        translate(pattern)


def test_item5_group_numbering_is_java_numbering() -> None:
    match = compile_java_regex(r"(?:x)(a)(?<n>b)(?i:c)(d)").fullmatch("xabcd")
    assert match is not None and match.groups() == ("a", "b", "d") and match.group("n") == "b"


def test_item5_translation_uses_no_global_flags() -> None:
    text = translate(r"(?i)ab(?-i)c(?s).")
    assert not text.startswith("(?i") and not text.startswith("(?s")
    import re

    assert re.fullmatch(text, "ABc\n") and not re.fullmatch(text, "ABC\n")


# --------------------------------------------------------------------------- against the JVM

_ORACLE = textwrap.dedent(
    """
    import java.io.*;
    import java.nio.charset.StandardCharsets;
    import java.util.regex.*;

    public class RegexOracle {
        static String unhex(String h) {
            byte[] b = new byte[h.length() / 2];
            for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
            return new String(b, StandardCharsets.UTF_8);
        }
        public static void main(String[] args) throws IOException {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            PrintStream out = new PrintStream(System.out, true, "UTF-8");
            String line;
            while ((line = in.readLine()) != null) {
                String[] f = line.split("\\t", -1);
                String p = unhex(f[0]);
                try {
                    Pattern c = Pattern.compile(p);
                    out.println(f.length > 1 ? (c.matcher(unhex(f[1])).matches() ? "T" : "F") : "OK");
                } catch (PatternSyntaxException e) {
                    out.println("E");
                }
            }
        }
    }
    """
)


def _hex(s: str) -> str:
    return s.encode("utf-8", "surrogatepass").hex()


@pytest.fixture(scope="module")
def java_oracle(tmp_path_factory: pytest.TempPathFactory):
    """Runs (pattern, input) lines through java.util.regex; skips when no JDK is installed."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if not javac or not java:
        pytest.skip("no JDK (javac and java) on PATH: cannot compare with java.util.regex")
    directory = tmp_path_factory.mktemp("oracle")
    (directory / "RegexOracle.java").write_text(_ORACLE)
    subprocess.run([javac, "-d", str(directory), str(directory / "RegexOracle.java")], check=True, timeout=120)

    def run(lines: List[Tuple[str, Optional[str]]]) -> List[str]:
        text = "".join(_hex(p) + ("" if i is None else "\t" + _hex(i)) + "\n" for p, i in lines)
        done = subprocess.run([java, "-cp", str(directory), "RegexOracle"], input=text.encode(),
                              stdout=subprocess.PIPE, check=True, timeout=120)
        return done.stdout.decode().split()

    return run


def test_item5_translation_agrees_with_java_util_regex(java_oracle) -> None:
    pairs = [(p, i) for p, inputs in CASES for i in inputs]
    assert len(pairs) >= 80
    verdicts = java_oracle(pairs)
    disagreements: Dict[str, List[str]] = {}
    for (pattern, value), verdict in zip(pairs, verdicts):
        assert verdict in ("T", "F"), f"Java rejects {pattern!r}: fix the table"
        if refused_before_311(pattern):
            continue  # refused on this Python, saying so (test_possessive_and_atomic_need_python_311)
        ours = compile_java_regex(pattern).fullmatch(value) is not None
        if ours != (verdict == "T"):
            disagreements.setdefault(pattern, []).append(f"{value!r}: java={verdict} python={ours}")
    assert not disagreements, disagreements


def test_item5_refused_patterns_are_valid_java(java_oracle) -> None:
    verdicts = java_oracle([(p, None) for p in REFUSED])
    assert verdicts == ["OK"] * len(REFUSED), list(zip(REFUSED, verdicts))


def test_item5_invalid_patterns_are_invalid_java(java_oracle) -> None:
    verdicts = java_oracle([(p, None) for p in INVALID])
    assert verdicts == ["E"] * len(INVALID), list(zip(INVALID, verdicts))
