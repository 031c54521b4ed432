"""The control protocol between ``pubmesh cluster`` and its node processes
(:mod:`pubmesh.net.control`): every message survives encode → decode unchanged; the lines the
node printed before the protocol was typed still read; a malformed line — not JSON, an unknown
command or event, a missing field, a field of the wrong type — is a :class:`ControlError` that
names the problem; and a real ``pubmesh node --control`` answers such a line with an error line
and keeps serving."""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from pubmesh.net import control
from pubmesh.net.control import ControlError
from support.netnode import NodeProcess, real_stacks

STATS = {"node": 1, "deliveries": 3, "protocol": {"rounds": 2}}

MESSAGES: list[control.Message] = [
    # commands
    control.Start(),
    control.Start(contacts=(2130706433 << 16 | 7000, 5)),
    control.Start(contacts=()),
    control.Subscribe("news"),
    control.Subscribe(""),
    control.Unsubscribe("t0"),
    control.Publish("t1", pub_id=7, payload_size=100),
    control.Publish("news", payload='hello "there"\n'),
    control.Publish("news"),
    control.Neighbors(),
    control.Stats(),
    control.Help(),
    control.Leave(),
    control.Stop(),
    control.Quit(),
    # replies
    control.Ready(
        node=1 << 40, address="127.0.0.1:7000", stack="gossip", role="peer", pid=9, t=1.5
    ),
    control.Started(t=1.25),
    control.Subscribed(topic="news", t=2.0),
    control.Unsubscribed(topic="news", t=3.0),
    control.Published(topic="news", pub_id=2**63 - 1, t=4.0, size=0),
    control.NeighborList(neighbors={"news": (1, 2), "": ()}),
    control.StatsReport(stats=STATS),
    control.HelpText(commands="commands:\n  help"),
    control.Left(t=5.0),
    control.Stopping(),
    control.Quitting(),
    control.CommandFailed(error="unknown command 'fly' (try help)", line="fly away"),
    control.StatsLine(
        node=3,
        t=6.5,
        booted=True,
        deliveries=10,
        published=2,
        subscriptions=("t0", "t2"),
        neighbors={"t0": (4, 5), "t2": ()},
        frames_sent=100,
        frames_received=90,
        dropped=1,
        rejected=0,
        peer_down=2,
        handler_errors=0,
    ),
    control.Delivered(topic="news", pub_id=4, hops=2, size=11, payload="hello there", t=7.0),
    control.NetEvent(kind="net.rejected", detail={"peer": "127.0.0.1:9", "why": "mac"}, t=8.0),
    control.NetEvent(kind="net.closed", detail=None, t=8.5),
    control.Lagged(dropped=1606, t=8.7),
    control.Bye(node=3, t=9.0, stats=STATS),
]


def test_every_message_round_trips() -> None:
    for message in MESSAGES:
        line = control.encode(message)
        assert "\n" not in line
        assert control.decode(line) == message, line
        if isinstance(message, control.Command):
            assert control.decode_command(line) == message
            assert control.parse_line(line) == message
        else:
            assert control.decode_reply(line) == message


def test_every_message_type_is_covered() -> None:
    kinds = {
        getattr(control, name)
        for name in control.__all__
        if dataclasses.is_dataclass(getattr(control, name))
    }
    assert kinds == {type(m) for m in MESSAGES}


def test_the_wire_lines_are_those_of_before() -> None:
    """What the node printed and the controller sent before the protocol was typed."""
    old_lines: list[tuple[str, control.Message]] = [
        (
            '{"event":"ready","node":1,"address":"0.0.0.0:1","stack":"gossip",'
            '"role":"peer","pid":4,"t":1.0}',
            control.Ready(1, "0.0.0.0:1", "gossip", "peer", 4, 1.0),
        ),
        ('{"event":"result","ok":true,"op":"start","t":2}', control.Started(2.0)),
        (
            '{"event":"result","ok":true,"op":"publish","topic":"n","pub_id":1,"t":3.0,"size":5}',
            control.Published("n", 1, 3.0, 5),
        ),
        ('{"event":"result","ok":true,"op":"exit"}', control.Stopping()),
        (
            '{"event":"result","ok":false,"error":"not JSON: x","line":"{x"}',
            control.CommandFailed("not JSON: x", "{x"),
        ),
        ('{"op": "start", "contacts": [1, 2]}', control.Start((1, 2))),
        (
            '{"op": "publish", "topic": "t0", "pub_id": 3, "payload_size": 100}',
            control.Publish("t0", 3, 100),
        ),
        ('{"op": "exit"}', control.Stop()),
        ('{"op": "neighbours"}', control.Neighbors()),
        ('{"op": "subscribe", "topic": "x", "added_later": 1}', control.Subscribe("x")),
    ]
    for line, message in old_lines:
        assert control.decode(line) == message, line
        assert json.loads(control.encode(message)) == {
            k: v for k, v in json.loads(line).items() if k != "added_later"
        } | ({"op": "neighbors"} if "neighbours" in line else {})


def test_shell_lines_are_commands_too() -> None:
    assert control.parse_line("publish news hello there") == control.Publish(
        "news", payload="hello there"
    )
    assert control.parse_line("  SUBSCRIBE news ") == control.Subscribe("news")
    assert control.parse_line("neighbours") == control.Neighbors()
    assert control.parse_line("exit") == control.Stop()
    with pytest.raises(ControlError, match=r"subscribe needs a topic, e\.g\. subscribe news"):
        control.parse_line("subscribe")
    with pytest.raises(ControlError, match="unknown command 'fly'"):
        control.parse_line("fly away")


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "not JSON"),
        ("", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('"start"', "JSON object"),
        ("{}", '"op"'),
        ('{"op": 3}', '"op"'),
        ('{"op": "fly"}', "unknown command 'fly'"),
        ('{"event": "party"}', "unknown event 'party'"),
        ('{"event": 7}', '"event" must be text'),
        ('{"event": "result", "ok": true, "op": "dance"}', "unknown command 'dance'"),
        ('{"event": "result", "ok": "yes", "op": "start"}', "ok must be true or false"),
        ('{"event": "result", "ok": true}', '"op"'),
        ('{"op": "subscribe"}', "subscribe needs a topic"),
        ('{"op": "subscribe", "topic": 5}', "subscribe: topic must be text, got 5"),
        ('{"op": "start", "contacts": "127.0.0.1:7000"}', "contacts must be a list of node ids"),
        ('{"op": "start", "contacts": [1, true]}', "contacts must be a list of node ids"),
        ('{"op": "publish", "topic": "t", "pub_id": "1"}', "pub_id must be an integer"),
        ('{"op": "publish", "topic": "t", "pub_id": -1}', "pub_id must be an int in [0, 2^63)"),
        ('{"op": "publish", "topic": "t", "payload_size": 1.5}', "payload_size must be an"),
        ('{"op": "publish", "topic": "t", "payload_size": 2000000}', "payload_size must be an"),
        ('{"op": "publish", "topic": "t", "payload": 3}', "payload must be text"),
        ('{"event": "ready", "node": 1}', "ready: address is missing"),
        (
            '{"event": "ready", "node": "1", "address": "a", "stack": "s", "role": "r", '
            '"pid": 1, "t": 0}',
            "ready: node must be an integer, got '1'",
        ),
        ('{"event": "result", "ok": true, "op": "start", "t": "now"}', "t must be a number"),
        ('{"event": "result", "ok": true, "op": "start", "t": true}', "t must be a number"),
        (
            '{"event": "result", "ok": true, "op": "neighbors", "neighbors": {"t": ["x"]}}',
            "neighbors[...] must be a list of integers",
        ),
        ('{"event": "result", "ok": false, "error": "x"}', "result: line is missing"),
        ('{"event": "bye", "node": 1, "t": 1, "stats": []}', "bye: stats must be an object"),
    ],
)
def test_a_malformed_line_is_a_control_error_naming_the_problem(line: str, problem: str) -> None:
    with pytest.raises(ControlError) as caught:
        control.decode(line)
    assert problem in str(caught.value)


def test_commands_and_replies_are_read_by_their_own_side() -> None:
    with pytest.raises(ControlError, match="a reply line"):
        control.decode_command(control.encode(control.Started(1.0)))
    with pytest.raises(ControlError, match='"event"'):
        control.decode_reply(control.encode(control.Stop()))


def test_invalid_commands_cannot_be_built() -> None:
    with pytest.raises(ControlError, match="pub_id"):
        control.Publish("t", pub_id=2**63)
    with pytest.raises(ControlError, match="payload_size"):
        control.Publish("t", payload_size=-1)


# ------------------------------------------------------------------------------------------
# A real node
# ------------------------------------------------------------------------------------------
STACK = "gossip" if "gossip" in real_stacks() else real_stacks()[0]


def typed(record: dict[str, Any]) -> control.Reply:
    return control.decode_reply(json.dumps(record))


def test_a_node_answers_a_malformed_line_with_an_error_and_keeps_serving(tmp_path: Path) -> None:
    role = "supervisor" if STACK == "skipring" else "peer"
    node = NodeProcess(
        ["--stack", STACK, "--listen", "127.0.0.1:0", "--control", "--role", role],
        log=tmp_path / "node.log",
    )
    try:
        for line, problem in [
            ("{not json", "not JSON"),
            ('{"op": "teleport"}', "unknown command 'teleport'"),
            ('{"op": "subscribe", "topic": 42}', "topic must be text"),
            ('{"op": "start", "contacts": ["127.0.0.1:1"]}', "contacts"),
            # nesting the parser cannot follow: an error reply, not an exception without one
            ('{"op": "publish", "topic": "t", "attributes": ' + "[" * 100_000 + "]" * 100_000
             + "}", "nested too deeply"),
            # a runaway line: read and dropped a chunk at a time, answered
            ("x" * (control.MAX_LINE + 1000), f"at most {control.MAX_LINE:,}"),
        ]:  # fmt: skip
            answer = typed(node.command(line, timeout=30))
            assert isinstance(answer, control.CommandFailed), (line[:200], answer)
            assert problem in answer.error and answer.line == line[:200]
        # still serving: it boots, subscribes and answers in order
        assert isinstance(typed(node.command(control.encode(control.Start()))), control.Started)
        subscribed = typed(node.command(control.encode(control.Subscribe("news"))))
        assert isinstance(subscribed, control.Subscribed) and subscribed.topic == "news"
        report = typed(node.command(control.encode(control.Stats())))
        assert isinstance(report, control.StatsReport)
        assert report.stats["subscriptions"] == ["news"]
        assert isinstance(typed(node.command(control.encode(control.Stop()))), control.Stopping)
        assert node.proc.wait(30) == 0
        bye = typed(node.wait_event(lambda r: r.get("event") == "bye", 10, "bye"))
        assert isinstance(bye, control.Bye)
        # every line it printed is a line of the protocol
        for record in node.records:
            typed(record)
    finally:
        node.stop(signal.SIGKILL)
