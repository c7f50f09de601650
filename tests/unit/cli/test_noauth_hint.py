"""What the commands and the consumer say when ZooKeeper refuses them for lack of permission (NoAuth): both
logins a group's ACL can name (a digest user, a Kerberos principal), each with the settings that make it."""

from __future__ import annotations

import argparse
import re
from typing import Set

import pytest
from kazoo.exceptions import NoAuthError

from zkconsumer import errors
from zkconsumer.cli import build_parser, offsets, run
from zkconsumer.config import PROPERTIES

Z = ["--zookeeper", "127.0.0.1:2181"]
RESET = ["offsets", "reset", *Z, "--group", "g", "--topic", "t", "--to", "3", "--execute"]


def named_properties(text: str) -> Set[str]:
    """The consumer properties ``text`` names (dotted lower-case words, before any ``=``)."""
    return set(re.findall(r"\b[a-z][a-z0-9]*(?:\.[a-z0-9]+)+\b", text))


def options_of(argv: list) -> Set[str]:
    """The long options the command parsed from ``argv`` accepts."""
    parser = build_parser()
    for action in parser._actions:  # the sub-command chain down to the leaf
        if isinstance(action, argparse._SubParsersAction):
            parser = action.choices[argv[0]]
            break
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parser = action.choices[argv[1]]
            break
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}


@pytest.mark.parametrize("refusal", [NoAuthError(), errors.ZooKeeperAccessError("/consumers/g/offsets/t/0", "writing")])
def test_the_offset_tools_name_both_logins_an_acl_can_require(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str],
                                                              refusal: Exception) -> None:
    def refused(_args: argparse.Namespace) -> int:
        raise refusal

    monkeypatch.setattr(offsets, "run_reset", refused)
    assert run(RESET) == 1
    err = capsys.readouterr().err
    assert err.startswith("zkconsumer: error: ZooKeeper 127.0.0.1:2181 refused the change (NoAuth)")
    if isinstance(refusal, errors.ZooKeeperAccessError):
        assert "(writing /consumers/g/offsets/t/0)" in err
    # the digest way, as this command takes it
    assert "digest:USER" in err and "--zookeeper-auth USER:PASSWORD" in err and "ZKCONSUMER_ZOOKEEPER_AUTH" in err
    # the Kerberos way: the ACL's sasl: identity, and the settings that log in as it
    assert "sasl:PRINCIPAL" in err and "zookeeper.sasl.enabled=true" in err
    assert "sasl.kerberos.principal" in err and "sasl.kerberos.keytab" in err
    assert "--consumer-config FILE" in err and "--property KEY=VALUE" in err
    # every property and option named exists (a renamed one would make the hint a dead end)
    assert named_properties(err) == {"zookeeper.sasl.enabled", "sasl.kerberos.principal", "sasl.kerberos.keytab"}
    assert named_properties(err) <= set(PROPERTIES)
    assert set(re.findall(r"--[a-z][a-z-]+", err)) <= options_of(RESET)


def test_the_consumers_access_error_names_both_logins_by_their_properties() -> None:
    text = str(errors.ZooKeeperAccessError("/consumers", "preparing"))
    assert "zookeeper.auth=USER:PASSWORD for a digest user" in text
    assert "zookeeper.sasl.enabled=true with sasl.kerberos.principal" in text and "Kerberos principal" in text
    assert named_properties(text) == {"zookeeper.auth", "zookeeper.sasl.enabled", "sasl.kerberos.principal",
                                      "sasl.kerberos.keytab"}
    assert named_properties(text) <= set(PROPERTIES)
