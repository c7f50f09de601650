"""Command-line parsing, exit codes, the offsets file format and reset planning, with plain data."""

from __future__ import annotations

import argparse

import pytest

from harness.ports import refused_port
from zkconsumer.__main__ import main
from zkconsumer.admin import (
    OffsetEntry,
    OffsetFileError,
    ResetPlan,
    ResetRow,
    ResetTarget,
    compute_reset,
    format_export,
    parse_export,
    parse_reset_target,
)
from zkconsumer.cli import build_parser
from zkconsumer.cli.consume import consumer_properties, write_message

Z = ["--zookeeper", "127.0.0.1:2181"]


# --------------------------------------------------------------------------- argument parsing


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_every_command_takes_zookeeper() -> None:
    for argv in (
        ["groups", "list"],
        ["groups", "describe", "--group", "g"],
        ["groups", "delete", "--group", "g"],
        ["offsets", "export", "--output", "f"],
        ["offsets", "import", "--input", "f"],
        ["offsets", "reset", "--group", "g", "--topic", "t", "--to", "earliest"],
        ["consume", "--group", "g", "--topic", "t"],
    ):
        assert parse(*argv, *Z).zookeeper == "127.0.0.1:2181"
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(argv)
        assert exc.value.code == 2, argv


def test_reset_options_are_parsed_into_a_target() -> None:
    args = parse("offsets", "reset", *Z, "--group", "g", "--topic", "t", "--to", "shift:-3", "--partitions", "0,2")
    assert args.to == ResetTarget("shift", -3)
    assert args.partitions == [0, 2]
    assert args.execute is False and args.format == "table"


@pytest.mark.parametrize("argv", [
    ["offsets", "reset", *Z, "--group", "g", "--topic", "t", "--to", "yesterday"],
    ["offsets", "reset", *Z, "--group", "g", "--topic", "t", "--to", "earliest", "--partitions", "a,b"],
    ["groups", "describe", *Z, "--group", "g", "--format", "xml"],
    ["consume", *Z, "--group", "g"],                                   # neither --topic nor --whitelist
    ["consume", *Z, "--group", "g", "--topic", "t", "--whitelist", "x"],  # both
    ["consume", *Z, "--group", "g", "--topic", "t", "--property", "novalue"],
    ["consume", *Z, "--group", "g", "--topic", "t", "--max-messages", "0"],
    ["groups", *Z],
    [],
])
def test_usage_errors_exit_2_with_a_message(argv, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err


def test_help_exits_0(capsys) -> None:
    assert main(["--help"]) == 0
    assert "groups" in capsys.readouterr().out
    assert main(["offsets", "reset", "--help"]) == 0
    assert "--execute" in capsys.readouterr().out


def test_consume_options_become_consumer_properties() -> None:
    args = parse("consume", *Z, "--group", "g", "--topic", "t", "--from-beginning", "--timeout-ms", "1500",
                 "--property", "auto.commit.interval.ms=100", "--property", "auto.offset.reset=largest")
    props = consumer_properties(args)
    assert props["zookeeper.connect"] == "127.0.0.1:2181" and props["group.id"] == "g"
    assert props["auto.offset.reset"] == "smallest"  # --from-beginning wins
    assert props["consumer.timeout.ms"] == 1500
    assert props["auto.commit.interval.ms"] == "100"


def test_consume_without_from_beginning_keeps_the_configured_reset() -> None:
    props = consumer_properties(parse("consume", *Z, "--group", "g", "--whitelist", "ev.*"))
    assert "auto.offset.reset" not in props and "consumer.timeout.ms" not in props
    assert "zookeeper.connection.timeout.ms" not in props
    props = consumer_properties(parse("consume", *Z, "--group", "g", "--topic", "t", "--zk-timeout-ms", "700"))
    assert props["zookeeper.connection.timeout.ms"] == 700


def test_an_unknown_consumer_property_is_a_usage_error_naming_it(capsys) -> None:
    # Rejected by ConsumerConfig before any connection is attempted.
    assert main(["consume", *Z, "--group", "g", "--topic", "t", "--property", "no.such.property=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no.such.property" in err


def test_an_unreadable_consumer_config_file_is_one_line(tmp_path, capsys) -> None:
    missing = tmp_path / "absent.properties"
    assert main(["consume", *Z, "--group", "g", "--topic", "t", "--consumer-config", str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing) in err


def test_messages_are_written_raw_one_per_line() -> None:
    import io

    out = io.BytesIO()
    write_message(out, b"\x00\xffbinary")
    write_message(out, None)
    assert out.getvalue() == b"\x00\xffbinary\nnull\n"


def test_unreachable_zookeeper_is_one_line_naming_the_address(capsys) -> None:
    with refused_port() as port:
        address = f"127.0.0.1:{port}"
        assert main(["groups", "list", "--zookeeper", address, "--zk-timeout-ms", "500"]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert address in lines[0] and "ZooKeeper" in lines[0]
    assert captured.out == ""


# --------------------------------------------------------------------------- offsets file


def test_export_format_is_exportzkoffsets_lines() -> None:
    entries = [OffsetEntry("g", "t", 0, 42), OffsetEntry("g", "t", 10, 0), OffsetEntry("h", "a.b-c_d", 2, 7)]
    text = format_export(entries)
    assert text == "/consumers/g/offsets/t/0:42\n/consumers/g/offsets/t/10:0\n/consumers/h/offsets/a.b-c_d/2:7\n"
    assert parse_export(text) == entries


def test_parse_export_skips_blank_and_comment_lines_and_keeps_the_last_duplicate() -> None:
    text = "# exported\n/consumers/g/offsets/t/0:1\n\n  /consumers/g/offsets/t/0:5  \n/consumers/g/offsets/t/1:2\n"
    assert parse_export(text) == [OffsetEntry("g", "t", 0, 5), OffsetEntry("g", "t", 1, 2)]


@pytest.mark.parametrize("line, problem", [
    ("/consumers/g/offsets/t/0", "expected <path>:<offset>"),
    ("/consumers/g/offsets/t/0:-1", "the offset is not a non-negative integer"),
    ("/consumers/g/offsets/t/0:12x", "the offset is not a non-negative integer"),
    ("/consumers/g/owners/t/0:12", "the path is not"),
    ("/consumers/g/offsets/t/p0:12", "the path is not"),
    ("/brokers/ids/1:12", "the path is not"),
])
def test_parse_export_names_the_bad_line(line: str, problem: str) -> None:
    with pytest.raises(OffsetFileError) as exc:
        parse_export(f"/consumers/g/offsets/t/1:2\n{line}\n", "offsets.txt")
    assert f"offsets.txt:2: {problem}" in str(exc.value)
    assert exc.value.line_number == 2


# --------------------------------------------------------------------------- reset planning


@pytest.mark.parametrize("text, target", [
    ("earliest", ResetTarget("earliest")),
    ("smallest", ResetTarget("earliest")),
    ("LATEST", ResetTarget("latest")),
    ("0", ResetTarget("offset", 0)),
    ("123", ResetTarget("offset", 123)),
    ("shift:+5", ResetTarget("shift", 5)),
    ("shift:5", ResetTarget("shift", 5)),
    ("shift:-7", ResetTarget("shift", -7)),
])
def test_parse_reset_target(text: str, target: ResetTarget) -> None:
    assert parse_reset_target(text) == target


@pytest.mark.parametrize("text", ["", "-5", "shift:", "shift:+-1", "begin", "1.5"])
def test_parse_reset_target_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_reset_target(text)


@pytest.mark.parametrize("target, current, expected", [
    (ResetTarget("earliest"), 50, (10, None)),
    (ResetTarget("latest"), None, (100, None)),
    (ResetTarget("offset", 40), 50, (40, None)),
    (ResetTarget("offset", 5), 50, (10, "clamped 5 up to the log start 10")),
    (ResetTarget("offset", 500), 50, (100, "clamped 500 down to the log end 100")),
    (ResetTarget("shift", -15), 50, (35, None)),
    (ResetTarget("shift", 15), 90, (100, "clamped 105 down to the log end 100")),
    (ResetTarget("shift", -45), 50, (10, "clamped 5 up to the log start 10")),
    (ResetTarget("shift", 0), 3, (10, "clamped 3 up to the log start 10")),  # a stale offset below the log start
    (ResetTarget("shift", -1), None, (None, "no committed offset to shift; left unchanged")),
    (ResetTarget("shift", 1), -1, (None, "no committed offset to shift; left unchanged")),
])
def test_compute_reset(target: ResetTarget, current, expected) -> None:
    assert compute_reset(target, current, 10, 100) == expected


def test_plan_lists_only_real_changes() -> None:
    rows = [
        ResetRow("t", 0, 5, 5, 0, 10),
        ResetRow("t", 1, None, 0, 0, 10),
        ResetRow("t", 2, 4, None, 0, 10, "no committed offset to shift; left unchanged"),
        ResetRow("t", 3, 4, 9, 0, 10),
    ]
    plan = ResetPlan("g", "t", ResetTarget("latest"), rows)
    assert [r.partition for r in plan.changes] == [1, 3]
    doc = plan.to_dict()
    assert doc["target"] == "latest"
    assert [p["changes"] for p in doc["partitions"]] == [False, True, False, True]


def test_reset_target_prints_as_typed() -> None:
    assert [str(parse_reset_target(t)) for t in ("earliest", "42", "shift:+3", "shift:-3")] == \
        ["earliest", "42", "shift:+3", "shift:-3"]
