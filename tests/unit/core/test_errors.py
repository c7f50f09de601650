"""zkconsumer.errors: one hierarchy under ZkConsumerError, each error's ``retriable`` flag, its fields and message."""

from __future__ import annotations

import inspect
from typing import List, Type

import pytest

from zkconsumer import errors
from zkconsumer.errors import (
    BackgroundThreadError,
    BrokerError,
    BrokerUnavailableError,
    ConfigurationError,
    ConsumerIdInUseError,
    ConsumerRebalanceFailedError,
    ConsumerShutdownError,
    ConsumerTimeoutError,
    CorruptMessageError,
    MalformedZnodeError,
    MessageSizeTooLargeError,
    OffsetStorageError,
    OperationCancelledError,
    RebalanceInProgressError,
    UnknownAckError,
    UnsupportedPatternError,
    ZkConsumerError,
    ZooKeeperAccessError,
    ZooKeeperSessionExpiredError,
    ZooKeeperUnavailableError,
)


def error_classes() -> List[Type[BaseException]]:
    """Every exception class defined in zkconsumer.errors (aliases once)."""
    found = {id(c): c for _, c in inspect.getmembers(errors, inspect.isclass)
             if issubclass(c, BaseException) and c.__module__ == errors.__name__}
    return sorted(found.values(), key=lambda c: c.__name__)


def test_every_error_of_the_module_is_a_zkconsumer_error() -> None:
    classes = error_classes()
    assert ZkConsumerError in classes and UnknownAckError in classes
    assert all(issubclass(c, ZkConsumerError) for c in classes), classes


# The class-level flag: what a caller may do without looking at the instance.
RETRIABLE_BY_CLASS = [
    (ZkConsumerError, False),
    (ConsumerTimeoutError, True),
    (ConsumerShutdownError, False),
    (OperationCancelledError, False),
    (ZooKeeperUnavailableError, True),
    (ZooKeeperSessionExpiredError, True),
    (ConsumerRebalanceFailedError, True),
    (BrokerError, False),
    (BrokerUnavailableError, True),
    (RebalanceInProgressError, True),
]


@pytest.mark.parametrize("cls, retriable", RETRIABLE_BY_CLASS)
def test_retriable_says_whether_the_same_operation_may_succeed_later(cls: Type[ZkConsumerError],
                                                                     retriable: bool) -> None:
    assert cls.retriable is retriable and cls("x").retriable is retriable


def test_errors_that_need_a_change_first_are_not_retriable() -> None:
    made = [
        ConfigurationError("group.id", "required"),
        MalformedZnodeError("/brokers/ids/1", "not JSON"),
        UnsupportedPatternError("(?<name>x)", "named groups"),
        ZooKeeperAccessError("/consumers/g", "create"),
        ConsumerIdInUseError("g_c1", "/consumers/g/ids/g_c1", 0x1F, 6.0),
        BackgroundThreadError(RuntimeError("boom")),
        MessageSizeTooLargeError("t", 0, 5, 1024),
        CorruptMessageError("t", 0, 5, "CRC mismatch"),
        UnknownAckError("t", 0, 5, "never handed out"),
    ]
    assert [e for e in made if e.retriable] == []


def test_the_session_expiry_is_a_zookeeper_unavailability() -> None:
    """Code that retries on ZooKeeperUnavailableError also retries an expired session."""
    assert issubclass(ZooKeeperSessionExpiredError, ZooKeeperUnavailableError)
    assert issubclass(BrokerUnavailableError, BrokerError)


def test_a_configuration_error_names_the_property_and_is_a_value_error() -> None:
    err = ConfigurationError("fetch.min.bytes", "must be at least 0, got -1")
    assert isinstance(err, ValueError)
    assert err.property == "fetch.min.bytes" and err.detail == "must be at least 0, got -1"
    assert str(err) == "fetch.min.bytes: must be at least 0, got -1"


def test_an_unknown_ack_is_a_value_error_naming_the_message() -> None:
    err = UnknownAckError("t", 3, 42, "beyond what was delivered")
    assert isinstance(err, ValueError)
    assert (err.topic, err.partition, err.offset) == ("t", 3, 42)
    assert str(err) == "ack of t-3 at offset 42: beyond what was delivered; nothing was recorded"


def test_the_timeout_is_also_known_by_kafkas_name() -> None:
    from zkconsumer import ConsumerTimeoutException

    assert ConsumerTimeoutException is ConsumerTimeoutError is errors.ConsumerTimeoutException


def test_errors_about_a_node_name_it() -> None:
    malformed = MalformedZnodeError("/brokers/ids/1", "not JSON")
    assert malformed.path == "/brokers/ids/1" and str(malformed) == "malformed znode /brokers/ids/1: not JSON"
    denied = ZooKeeperAccessError("/consumers/g/offsets", "create")
    assert (denied.path, denied.operation) == ("/consumers/g/offsets", "create")
    hint = f"check the node's ACL and the login it needs: {errors.ACCESS_HINT}"
    assert str(denied) == f"ZooKeeper denied create of /consumers/g/offsets: {hint}"
    detailed = ZooKeeperAccessError("/x", "delete", "NoAuth")
    assert str(detailed) == f"ZooKeeper denied delete of /x (NoAuth): {hint}"


def test_an_unsupported_pattern_names_the_java_regex() -> None:
    err = UnsupportedPatternError("(?<n>a)", "named groups")
    assert err.pattern == "(?<n>a)" and str(err) == "unsupported Java regular expression '(?<n>a)': named groups"


def test_a_consumer_id_in_use_names_the_holding_session_in_hex_and_the_fix() -> None:
    err = ConsumerIdInUseError("g_c1", "/consumers/g/ids/g_c1", 0x10A, 6.04)
    assert (err.consumer_id, err.path, err.session_id) == ("g_c1", "/consumers/g/ids/g_c1", 0x10A)
    text = str(err)
    assert "0x10a" in text and "6.0s" in text and "give each process its own consumer.id" in text


def test_a_background_thread_error_carries_its_cause() -> None:
    cause = KeyError("k")
    err = BackgroundThreadError(cause)
    assert err.cause is cause and err.__cause__ is cause
    assert str(err) == "a background thread failed: KeyError: 'k'"


def test_a_broker_error_has_no_code_unless_the_broker_sent_one() -> None:
    assert BrokerError("x").error_code is None and BrokerUnavailableError("x").error_code is None


def test_message_errors_name_where_the_message_is() -> None:
    big = MessageSizeTooLargeError("t", 1, 7, 1048576)
    assert (big.topic, big.partition, big.offset) == ("t", 1, 7)
    assert "(1048576 bytes)" in str(big) and "fetch.message.max.bytes" in str(big)
    corrupt = CorruptMessageError("t", 2, 9, "CRC mismatch")
    assert (corrupt.topic, corrupt.partition, corrupt.offset) == ("t", 2, 9)
    assert str(corrupt) == "corrupt message on topic t partition 2 at offset 9: CRC mismatch"


def test_an_offset_storage_error_is_retriable_as_its_raiser_says_and_lists_the_fenced() -> None:
    fenced = [("t", 1)]
    err = OffsetStorageError("commit failed", retriable=True, fenced=fenced)
    assert err.retriable and str(err) == "commit failed" and err.fenced == [("t", 1)]
    fenced.append(("t", 2))
    assert err.fenced == [("t", 1)], "the error keeps its own list"
    final = OffsetStorageError("not authorized", retriable=False)
    assert not final.retriable and final.fenced == []
    assert OffsetStorageError.retriable is False, "one instance's flag does not change the class's"


def test_rebalance_in_progress_lists_what_was_not_committed_in_order() -> None:
    err = RebalanceInProgressError("rebalancing", [("t", 2), ("a", 5), ("t", 0)])
    assert err.partitions == [("a", 5), ("t", 0), ("t", 2)] and str(err) == "rebalancing"
    assert RebalanceInProgressError("rebalancing").partitions == []


def test_every_error_pickles_to_an_equal_one() -> None:
    """Errors whose constructors take their own arguments survive pickling (process pools rely on it)."""
    import inspect
    import pickle

    from zkconsumer import errors

    samples = [
        errors.ConfigurationError("group.id", "is required"),
        errors.ZooKeeperAccessError("/consumers/g", "writing", "check zookeeper.auth"),
    ]
    for error in samples:
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error) and copy.args == error.args
        assert copy.__dict__ == error.__dict__ and copy.retriable == error.retriable
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.ZkConsumerError)]
    assert all("__reduce__" not in vars(c) for c in classes if c is not errors.ZkConsumerError)
