"""A release after a lost answer reads the node from a server that has every write of ours.

ZooKeeper lets a client reconnect to any server that has seen the last zxid the client *received*
(``ClientCnxn`` sends ``lastZxidSeen``; a server behind it refuses the connection), and serves reads
from that server's own state. A write applied whose answer a connection loss swallowed is therefore
not necessarily visible on the next server (seed 3003786, schedule
``release-after-a-lost-answer-read-a-stale-follower``): m1's release deleted its owner node, the
answer was lost in a drop, a peer re-created the node (version 0 again), and m1's retried release
read its own old node on a lagging follower, found it ours, and deleted the peer's node at version 0.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from kazoo.protocol.states import KazooState

from zkconsumer.zookeeper import zkformat
from zkconsumer.zookeeper.group import GroupClient

from .client import Network, SimKazoo
from .kernel import Kernel, SimTask
from .zkmodel import Ensemble

OWNER = "/consumers/g/owners/t/0"


def _run(kernel: Kernel, body: Any) -> None:
    task = SimTask(kernel, body, "test")
    assert kernel.run_until(lambda: task.done, kernel.now + 30.0)
    assert not kernel.failures, kernel.failures


@pytest.mark.parametrize("many", [False, True], ids=["release", "release_many"])
def test_a_release_after_a_lost_delete_answer_does_not_delete_a_peers_node_read_stale(many: bool) -> None:
    kernel = Kernel()
    ensemble = Ensemble(1, kernel.clock)
    leader, follower = ensemble.servers
    network = Network(random.Random(1))
    client = SimKazoo(kernel, ensemble, network, "m1", 6.0, lambda line: None)
    group = GroupClient(client, "g", "g_m1", retry_timeout_s=6.0, sleep=kernel.sleep,  # type: ignore[arg-type]
                        clock=kernel.clock, rng=random.Random(1))
    client.add_listener(lambda state: group.note_session() if state == KazooState.CONNECTED
                        else group.connection_lost())
    client.start()
    kernel.run_until(lambda: client.connected, 5.0)
    _run(kernel, lambda: group.claim("t", 0, "g_m1-0"))
    ensemble.sync(follower)  # the follower has our node
    ours = client._session_id
    assert ours is not None and leader.tree[OWNER].owner == ours

    # Our delete is applied on the leader and its answer is lost with the connection; a peer
    # re-creates the node at version 0; the follower has neither yet.
    assert not isinstance(ensemble.execute(leader, ours, "delete", {"path": OWNER, "version": 0}), Exception)
    peer = ensemble.open_session(6.0)
    ensemble.execute(leader, peer, "create", {"path": OWNER, "value": zkformat.encode_owner("g_m2-0"),
                                               "ephemeral": True, "makepath": False, "sequence": False})
    network.rng.choice = lambda candidates: follower.index if follower.index in candidates else candidates[0]  # type: ignore[method-assign]
    client.drop_connection("test")
    kernel.run_until(lambda: client.connected, kernel.now + 5.0)
    assert client.server == follower.index and OWNER in follower.tree and follower.tree[OWNER].owner == ours

    _run(kernel, lambda: group.release_many([("t", 0)]) if many else group.release("t", 0))
    node = leader.tree.get(OWNER)
    assert node is not None and node.owner == peer, "the peer's owner node was deleted by a stale read"
