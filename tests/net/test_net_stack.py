"""The tests of ``nettest``, the trivial flooding stack the network runtime's tests run on.

The stack is defined, with the simulator's ``probe`` stack, in ``tests/support/probestacks.py``
(its description is there); the helpers the ``test_net_*`` files share (node processes, the
shell on a pseudo-terminal, small clusters) live in ``tests/support/netnode.py``.
"""

from __future__ import annotations

from pubmesh.proto.core import (
    Deliver,
    NodeContext,
    PeerDown,
    Publish,
    Receive,
    Send,
    Start,
    Subscribe,
    TraceRecord,
)
from support.probestacks import NetTestNode


# ------------------------------------------------------------------------------------------
# Tests of the stack itself (so that a failure elsewhere is not a bug in the test stack)
# ------------------------------------------------------------------------------------------
def test_nettest_floods_and_delivers_once() -> None:
    import random

    a = NetTestNode(NodeContext(1, random.Random(1)))
    b = NetTestNode(NodeContext(2, random.Random(2)))
    a.handle(Start((2,)), 0.0)
    b.handle(Subscribe("t"), 0.0)
    out = a.handle(Publish("t", 7, b"x"), 0.0)
    sends = [o for o in out if isinstance(o, Send)]
    assert [s.dst for s in sends] == [2]
    first = b.handle(Receive(1, sends[0].message), 0.0)
    again = b.handle(Receive(1, sends[0].message), 0.0)
    assert [o for o in first if isinstance(o, Deliver)] == [Deliver("t", 7, b"x", 1)]
    assert again == []
    assert b.monitored_peers() == [1]


def test_nettest_forgets_a_peer_reported_down() -> None:
    import random

    a = NetTestNode(NodeContext(1, random.Random(1)))
    a.handle(Start((2, 3)), 0.0)
    out = a.handle(PeerDown(2), 1.0)
    assert a.downs == [2]
    assert list(a.monitored_peers()) == [3]
    assert out == [TraceRecord("test.peer-down", {"peer": 2})]
