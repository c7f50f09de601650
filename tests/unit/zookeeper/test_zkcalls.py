"""BoundedZooKeeper and GroupClient's error mapping: only ZkConsumerErrors leave, nothing waits forever.

Pure logic against a fake kazoo client whose results never arrive or fail as told.
The real-ZooKeeper behaviour is covered by tests/integration/test_zookeeper_faults.py.
"""

from __future__ import annotations

import threading
import time
from typing import Any, List, Optional

import pytest
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)

from zkconsumer.config import ConsumerConfig
from zkconsumer.errors import ConfigurationError, ZooKeeperAccessError, ZooKeeperUnavailableError
from zkconsumer.zookeeper.group import GroupClient
from zkconsumer.zookeeper.zkcalls import BoundedZooKeeper


class Timeout(Exception):
    pass


class Result:
    """An async result that holds a value, raises an exception, or never arrives."""

    def __init__(self, value: Any = None, error: Optional[BaseException] = None, never: bool = False) -> None:
        self.value, self.error, self.never = value, error, never

    def get(self, timeout: Optional[float] = None) -> Any:
        if self.never:
            time.sleep(timeout or 0)
            raise Timeout()
        if self.error is not None:
            raise self.error
        return self.value


class FakeHandler:
    timeout_exception = Timeout


class FakeKazoo:
    handler = FakeHandler()
    client_id = (0x1234, b"pw")

    def __init__(self) -> None:
        self.next: List[Result] = []
        self.default = Result(None)

    def _take(self) -> Result:
        return self.next.pop(0) if self.next else self.default

    def get_async(self, path: str, watch: Any = None) -> Result:
        return self._take()

    def exists_async(self, path: str, watch: Any = None) -> Result:
        return self._take()

    def get_children_async(self, path: str, watch: Any = None, include_data: bool = False) -> Result:
        return self._take()

    def set_async(self, path: str, value: bytes, version: int = -1) -> Result:
        return self._take()


def test_a_call_that_is_never_answered_times_out_as_a_transient_kazoo_error() -> None:
    fake = FakeKazoo()
    fake.next = [Result(never=True)]
    bounded = BoundedZooKeeper(fake, default_timeout_s=0.05)  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(OperationTimeoutError):
        bounded.get("/a")
    assert time.monotonic() - started < 1.0


def test_the_thread_deadline_bounds_every_call_of_a_block() -> None:
    fake = FakeKazoo()
    fake.next = [Result(never=True), Result(never=True)]
    bounded = BoundedZooKeeper(fake, default_timeout_s=60.0)  # type: ignore[arg-type]
    started = time.monotonic()
    with bounded.deadline(0.2):
        for _ in range(2):
            with pytest.raises(OperationTimeoutError):
                bounded.exists("/a")
    assert time.monotonic() - started < 1.0
    assert bounded.remaining() is None  # the block is over


def test_no_auth_becomes_a_non_retriable_access_error_naming_the_node() -> None:
    fake = FakeKazoo()
    fake.next = [Result(error=NoAuthError())]
    with pytest.raises(ZooKeeperAccessError) as raised:
        BoundedZooKeeper(fake, 1.0).set("/consumers/g/offsets/t/0", b"5")  # type: ignore[arg-type]
    assert raised.value.path == "/consumers/g/offsets/t/0" and not raised.value.retriable


def test_a_multi_operation_denied_on_one_node_is_an_access_error_not_a_fence() -> None:
    class Request:
        def check(self, path: str, version: int) -> None: ...
        def set_data(self, path: str, value: bytes, version: int = -1) -> None: ...
        def commit_async(self) -> Result:
            return Result([RolledBackError(), NoAuthError()])

    fake = FakeKazoo()
    fake.transaction = lambda: Request()  # type: ignore[attr-defined]
    transaction = BoundedZooKeeper(fake, 1.0).transaction()  # type: ignore[arg-type]
    transaction.check("/consumers/g/owners/t/0", 3)
    transaction.set_data("/consumers/g/offsets/t/0", b"7")
    with pytest.raises(ZooKeeperAccessError) as raised:
        transaction.commit()
    assert raised.value.path == "/consumers/g/offsets/t/0"


@pytest.mark.parametrize("error", [SessionExpiredError(), ConnectionClosedError("closed"), ConnectionLoss()])
def test_group_client_reports_zookeeper_trouble_as_retriable_unavailability(error: BaseException) -> None:
    fake = FakeKazoo()
    fake.default = Result(error=error)
    group = GroupClient(fake, "g", "g_me", retry_timeout_s=0.3, sleep=lambda s: None)  # type: ignore[arg-type]
    with pytest.raises(ZooKeeperUnavailableError) as raised:
        group.read_offset("t", 0)
    assert raised.value.retriable


def test_group_client_gives_up_within_its_retry_timeout_when_zookeeper_never_answers() -> None:
    fake = FakeKazoo()
    fake.default = Result(never=True)
    group = GroupClient(fake, "g", "g_me", retry_timeout_s=0.3)  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(ZooKeeperUnavailableError):
        group.members()
    assert time.monotonic() - started < 2.0


def test_offsets_commit_timeout_is_a_validated_property() -> None:
    base = {"zookeeper.connect": "zk:2181", "group.id": "g"}
    assert ConsumerConfig(base).offsets_commit_timeout_ms == 60000
    assert ConsumerConfig(base, **{"offsets.commit.timeout.ms": "0"}).offsets_commit_timeout_ms == 0
    with pytest.raises(ConfigurationError, match="offsets.commit.timeout.ms"):
        ConsumerConfig(base, **{"offsets.commit.timeout.ms": -1})
    assert "offsets.commit.timeout.ms" in ConsumerConfig.PROPERTIES


def test_deadlines_are_per_thread() -> None:
    fake = FakeKazoo()
    bounded = BoundedZooKeeper(fake, 5.0)  # type: ignore[arg-type]
    seen: List[Optional[float]] = []
    with bounded.deadline(0.5):
        t = threading.Thread(target=lambda: seen.append(bounded.remaining()))
        t.start()
        t.join()
        assert bounded.remaining() is not None
    assert seen == [None]
