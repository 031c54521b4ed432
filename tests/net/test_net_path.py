"""One publication's path through ``pubmesh.net`` is the one docs/design.md draws.

docs/design.md draws the modules a publication crosses, from a shell's ``publish`` to a
subscriber's stdout. Here two ``pubmesh.Node``s in this process (the API stands in for the shell
at both ends) pass one publication on real sockets, in each link mode, under
``sys.setprofile``, and the modules of ``pubmesh.net`` entered on its way must be exactly the
drawing's: every module drawn is crossed and no other is. Only calls made under the
publication's own steps count (the publish call, a connection's read, the turn-end signing,
a connection's flush), not the timers and heartbeats that run meanwhile.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from pubmesh.api import Node
from support.identity import api_pair
from support.netnode import KEY_TEXT, ROOT

DRAWING = ROOT / "docs" / "design.md"
#: where the drawing's subscriber column starts
SUBSCRIBER_COLUMN = 49
#: the drawing's ends that the API replaces (the shell's process and its stdout)
SHELL_ENDS = {"node.process", "output"}
#: the steps of one publication: (module, function) of each root its calls hang from
ROOTS = {
    ("pubmesh.api", "publish"),
    ("pubmesh.net.connection", "data_received"),
    ("pubmesh.net.runtime", "_sign_held"),
    ("pubmesh.net.connection", "flush"),
}


def drawn_modules() -> set[str]:
    """The modules of ``pubmesh.net`` the drawing names, both columns."""
    text = DRAWING.read_text()
    block = text.split("**One publication through `pubmesh.net`**", 1)[1].split("```", 2)[1]
    modules: set[str] = set()
    for line in block.splitlines()[2:]:  # after the opening fence's line and the header
        if line and line[0] != " ":
            modules.add(line.split()[0])
        if len(line) > SUBSCRIBER_COLUMN and line[SUBSCRIBER_COLUMN] != " ":
            modules.add(line[SUBSCRIBER_COLUMN:].split()[0])
    modules.discard("(stack)")
    return modules


def _under_a_root(frame: FrameType | None) -> bool:
    while frame is not None:
        if (frame.f_globals.get("__name__"), frame.f_code.co_name) in ROOTS:
            return True
        frame = frame.f_back
    return False


async def _one_publication(publisher: Any, subscriber: Any) -> set[str]:
    """The modules of ``pubmesh.net`` one publication from ``publisher`` enters on its way to
    ``subscriber``'s queue."""
    got = await subscriber.subscribe("path")
    await publisher.subscribe("path")
    for _ in range(200):
        if subscriber.neighbors().get("path"):
            break
        await asyncio.sleep(0.05)
    await publisher.publish("path", b"warm-up")  # the first use of every path is behind us
    assert (await got.get(timeout=10)).payload == b"warm-up"
    await asyncio.sleep(0.2)
    entered: set[str] = set()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if module.startswith("pubmesh.net.") and _under_a_root(frame):
                entered.add(module.removeprefix("pubmesh.net."))

    sys.setprofile(profile)
    try:
        await publisher.publish("path", b"measured")
        delivery = await got.get(timeout=10)
    finally:
        sys.setprofile(None)
    assert delivery.payload == b"measured"
    return entered


def _check(entered: set[str], drawn: set[str]) -> None:
    assert drawn, "the drawing names no module: the parser read nothing"
    assert entered == drawn, (
        f"crossed but not drawn: {sorted(entered - drawn)}; "
        f"drawn but not crossed: {sorted(drawn - entered)} (docs/design.md, 'One publication "
        "through pubmesh.net')"
    )


def test_the_drawn_path_is_the_identity_modes(tmp_path: Path) -> None:
    drawn = drawn_modules() - SHELL_ENDS - {"acl"}  # no ACL is set here
    assert {"signing", "tls", "connection", "framing", "codec", "transport"} <= drawn, drawn

    async def main() -> set[str]:
        async with api_pair(tmp_path) as (contact, member):
            return await _one_publication(member, contact)

    _check(asyncio.run(asyncio.wait_for(main(), 60)), drawn)


def test_the_drawn_path_less_signing_and_tls_is_the_shared_key_modes() -> None:
    drawn = drawn_modules() - SHELL_ENDS - {"acl", "signing", "tls"}

    async def main() -> set[str]:
        async with (
            Node("gossip", listen="127.0.0.1:0", key=KEY_TEXT) as contact,
            Node("gossip", listen="127.0.0.1:0", contact=contact.address, key=KEY_TEXT) as a,
        ):
            return await _one_publication(a, contact)

    _check(asyncio.run(asyncio.wait_for(main(), 60)), drawn)
