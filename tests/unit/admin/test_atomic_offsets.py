"""zkconsumer.admin.atomic without a server: what is refused before anything is sent, and how a
refused multi's results are read. The server's side (all or nothing, versions, ACLs, Ctrl-C and
SIGKILL part-way): tests/integration/test_cli_commits.py."""

from __future__ import annotations

from typing import Iterator, List

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoAuthError, NodeExistsError, RolledBackError

from zkconsumer.admin import atomic
from zkconsumer.errors import ZooKeeperAccessError


@pytest.fixture
def zk() -> Iterator[KazooClient]:
    client = KazooClient(hosts="127.0.0.1:1")  # never started: nothing can be sent
    yield client
    client.close()


def writes(n: int, group: str = "g") -> List[atomic.OffsetWrite]:
    return [atomic.OffsetWrite(group, "a-topic-name", p, 1000 + p, p, 3) for p in range(n)]


def test_the_request_size_grows_with_every_write(zk: KazooClient) -> None:
    one, two = atomic.request_bytes(zk, writes(1)), atomic.request_bytes(zk, writes(2))
    assert 0 < one < two and two - one >= len(writes(2)[1].path)


def test_a_write_too_large_for_one_request_is_refused_before_anything_is_sent(zk: KazooClient) -> None:
    many = writes(1)
    while atomic.request_bytes(zk, many) <= atomic.MAX_REQUEST_BYTES:
        many = writes(len(many) * 2, group="g" * 200)
    with pytest.raises(atomic.TooLargeError, match=r"nothing was written: the \d+ offset writes need"):
        atomic.write_offsets(zk, many)  # the client was never started: sending would fail differently


def test_the_first_refused_operation_names_the_partition_and_why() -> None:
    planned = writes(3)
    with pytest.raises(atomic.OffsetsChangedError, match="a-topic-name/1 changed since the plan"):
        atomic._check(planned, [RolledBackError(), BadVersionError(), RolledBackError()])
    with pytest.raises(atomic.OffsetsChangedError, match="a-topic-name/2 was created since the plan"):
        atomic._check(planned, [RolledBackError(), RolledBackError(), NodeExistsError()])
    with pytest.raises(ZooKeeperAccessError):
        atomic._check(planned, [NoAuthError(), RolledBackError(), RolledBackError()])


def test_an_answer_without_errors_is_success() -> None:
    atomic._check(writes(2), [object(), object()])
