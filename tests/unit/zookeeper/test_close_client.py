"""Closing a member's ZooKeeper client joins its heartbeat thread whatever kazoo raises on the way."""

from __future__ import annotations

from typing import List

import pytest

from zkconsumer.zookeeper.heartbeat import close_client


class Recorder:
    def __init__(self, fail_stop: bool = False, fail_close: bool = False) -> None:
        self.calls: List[str] = []
        self.fail_stop, self.fail_close = fail_stop, fail_close

    def stop(self) -> None:
        self.calls.append("client.stop")
        if self.fail_stop:
            raise RuntimeError("WriterNotClosedException, say")

    def close(self) -> None:
        self.calls.append("client.close")
        if self.fail_close:
            raise OSError("a descriptor already closed")


class Heartbeat:
    def __init__(self, calls: List[str]) -> None:
        self.calls = calls

    def stop(self) -> None:
        self.calls.append("heartbeat.stop")


@pytest.mark.parametrize("fail_stop,fail_close", [(False, False), (True, False), (False, True), (True, True)])
def test_stop_close_and_the_heartbeat_join_all_happen_in_order(fail_stop: bool, fail_close: bool) -> None:
    client = Recorder(fail_stop, fail_close)
    close_client(client, Heartbeat(client.calls), "member")  # type: ignore[arg-type]
    assert client.calls == ["client.stop", "client.close", "heartbeat.stop"]


def test_an_interrupt_while_stopping_still_joins_the_heartbeat() -> None:
    class Interrupted(Recorder):
        def stop(self) -> None:
            self.calls.append("client.stop")
            raise KeyboardInterrupt

    client = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        close_client(client, Heartbeat(client.calls), "member")  # type: ignore[arg-type]
    assert client.calls == ["client.stop", "client.close", "heartbeat.stop"]
