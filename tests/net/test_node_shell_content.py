"""Content filters and attributes in the ``pubmesh node`` shell and its control protocol: on a
content-based stack (chord) ``subscribe TOPIC FILTER-JSON`` delivers only the matching
publications of ``publish TOPIC MESSAGE ATTRIBUTES-JSON``; bad filters and attributes, and
filters or attributes given to a topic-based stack, get one error line naming the problem and
the node keeps serving. Real node processes on loopback, no mocks."""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from pubmesh.net import control
from pubmesh.net.control import ControlError
from support.netnode import NodeProcess, ShellOnPty

FILTER = {"symbol": "s3", "price": {"lt": 100}}


# ------------------------------------------------------------------------------------------
# The line protocol
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "command"),
    [
        (
            'subscribe quotes {"symbol": "s3", "price": {"lt": 100}}',
            control.Subscribe("quotes", filter=FILTER),
        ),
        ("subscribe quotes {}", control.Subscribe("quotes", filter={})),
        ("subscribe quotes", control.Subscribe("quotes")),
        ("publish t hello there", control.Publish("t", payload="hello there")),
        (
            'publish quotes tick tock {"symbol": "s3", "price": 99.5}',
            control.Publish(
                "quotes", payload="tick tock", attributes={"symbol": "s3", "price": 99.5}
            ),
        ),
        ('publish quotes {"n": -2}', control.Publish("quotes", attributes={"n": -2})),
        # the last JSON object ending the line is the attributes; other braces are message
        (
            'publish t say {"x": 1} {"y": "z"}',
            control.Publish("t", payload='say {"x": 1}', attributes={"y": "z"}),
        ),
        ("publish t set {x} to {y}", control.Publish("t", payload="set {x} to {y}")),
        # the JSON form
        (
            '{"op": "subscribe", "topic": "quotes", "filter": {"symbol": "s3", '
            '"price": {"lt": 100}}}',
            control.Subscribe("quotes", filter=FILTER),
        ),
        (
            '{"op": "publish", "topic": "q", "payload": "p", "attributes": {"a": "b", "n": 1}}',
            control.Publish("q", payload="p", attributes={"a": "b", "n": 1}),
        ),
        ('{"op": "subscribe", "topic": "q", "filter": null}', control.Subscribe("q")),
    ],
)
def test_shell_and_json_forms_carry_filters_and_attributes(
    line: str, command: control.Command
) -> None:
    assert control.parse_line(line) == command
    # and every such command survives the wire
    assert control.decode_command(control.encode(command)) == command


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("subscribe quotes {bad", "subscribe: the filter is not JSON"),
        ("subscribe quotes price<100", "subscribe: the filter is not JSON"),
        ("subscribe quotes [1, 2]", "filter must be a JSON object"),
        ('subscribe quotes "s3"', "filter must be a JSON object"),
        ('subscribe quotes {"price": {"less": 100}}', "unknown operator 'less'"),
        ('subscribe quotes {"price": {}}', "an empty constraint"),
        ('subscribe quotes {"$topic": "x"}', "reserved"),
        ('subscribe quotes {"s": {"in": 3}}', "'in' needs a list"),
        ('{"op": "subscribe", "topic": "q", "filter": [1]}', "filter must be a JSON object"),
        ('publish quotes tick {"price": }', "the attributes ending the line are not a JSON"),
        ('publish quotes tick {"price": 1', "the attributes ending the line are not a JSON"),
        ("publish quotes tick {'price': 1}", "double quotes"),
        ('publish quotes tick {"on": true}', 'attribute "on" must be a string or a'),
        ('publish quotes tick {"p": null}', 'attribute "p" must be a string or a'),
        ('publish quotes tick {"p": [1]}', 'attribute "p" must be a string or a'),
        ('publish quotes tick {"p": {"q": 1}}', 'attribute "p" must be a string or a'),
        ('publish quotes tick {"p": NaN}', "finite"),
        ('publish quotes tick {"$topic": "x"}', "reserved"),
        ('{"op": "publish", "topic": "q", "attributes": [1]}', "attributes must be a JSON"),
        ('{"op": "publish", "topic": "q", "attributes": "a=1"}', "attributes must be a JSON"),
    ],
)
def test_bad_filters_and_attributes_are_control_errors_naming_the_problem(
    line: str, problem: str
) -> None:
    with pytest.raises(ControlError) as caught:
        control.parse_line(line)
    assert problem in str(caught.value), str(caught.value)


def test_answers_and_deliveries_echo_filters_and_attributes() -> None:
    for reply in (
        control.Subscribed(topic="quotes", t=1.0, filter=FILTER),
        control.Published(topic="q", pub_id=3, t=2.0, size=4, attributes={"price": 9}),
        control.Delivered(
            topic="q", pub_id=3, hops=1, size=4, payload="tick", t=3.0, attributes={"a": "b"}
        ),
    ):
        assert control.decode_reply(control.encode(reply)) == reply
    # without them the lines are those of before
    assert "filter" not in control.encode(control.Subscribed(topic="q", t=1.0))
    assert "attributes" not in control.encode(control.Published("q", 1, 1.0, 0))


# ------------------------------------------------------------------------------------------
# Real nodes
# ------------------------------------------------------------------------------------------
def chord_node(tmp_path: Path, name: str, *extra: str) -> NodeProcess:
    return NodeProcess(
        ["--stack", "chord", "--listen", "127.0.0.1:0", *extra],
        log=tmp_path / f"{name}.log",
        cli=True,
    )


def delivered(node: NodeProcess, payload: str) -> bool:
    return node.count(lambda r: r.get("event") == "deliver" and r["payload"] == payload) > 0


def test_a_chord_subscriber_gets_only_the_matching_publications(tmp_path: Path) -> None:
    subscriber = chord_node(tmp_path, "subscriber")
    publisher = chord_node(tmp_path, "publisher", "--contact", subscriber.address)
    try:
        answer = subscriber.command('subscribe quotes {"symbol": "s3", "price": {"lt": 100}}')
        assert answer["ok"] and answer["filter"] == FILTER, answer
        # the ring forms and the subscriber's filter reaches the publisher: probe until a
        # matching publication gets through
        deadline = time.monotonic() + 20
        probe = 0
        while not subscriber.count(lambda r: r.get("event") == "deliver"):
            assert time.monotonic() < deadline, "no probe was ever delivered"
            probe += 1
            sent = publisher.command(f'publish quotes probe{probe} {{"symbol": "s3", "price": 1}}')
            assert sent["ok"], sent
            with contextlib.suppress(AssertionError):  # none within half a second: again
                subscriber.wait_event(lambda r: r.get("event") == "deliver", 0.5, "a probe")
        dear = publisher.command('publish quotes dear {"symbol": "s3", "price": 120}')
        other = publisher.command(
            {"op": "publish", "topic": "quotes", "payload": "other", "attributes": {"symbol": "s4"}}
        )
        cheap = publisher.command('publish quotes cheap {"symbol": "s3", "price": 99.5}')
        assert dear["ok"] and other["ok"] and cheap["ok"]
        assert cheap["attributes"] == {"symbol": "s3", "price": 99.5}
        delivery = subscriber.wait_event(
            lambda r: r.get("event") == "deliver" and r["pub_id"] == cheap["pub_id"],
            10,
            "the matching publication",
        )
        assert delivery["payload"] == "cheap" and delivery["topic"] == "quotes"
        assert delivery["hops"] >= 1  # over the network, from the other process
        assert delivery["attributes"] == {"symbol": "s3", "price": 99.5}
        time.sleep(0.5)  # the non-matching ones were sent first, on the same connection
        assert not delivered(subscriber, "dear") and not delivered(subscriber, "other")
        assert {dear["pub_id"], other["pub_id"]}.isdisjoint(subscriber.deliveries())
        # the publisher subscribed to nothing and delivered nothing
        assert publisher.count(lambda r: r.get("event") == "deliver") == 0
        # changing a filter needs an unsubscribe first
        again = subscriber.command('subscribe quotes {"price": {"ge": 100}}')
        assert again["ok"] is False and "already subscribed to quotes" in again["error"]
        assert subscriber.command("unsubscribe quotes")["ok"]
        assert subscriber.command('subscribe quotes {"price": {"ge": 100}}')["ok"]
    finally:
        for node in (publisher, subscriber):
            node.stop(signal.SIGKILL)


def test_bad_input_gets_an_error_line_and_the_node_keeps_serving(tmp_path: Path) -> None:
    linger = ("--leave-linger", "0.2")
    chord = chord_node(tmp_path, "chord", *linger)
    gossip = NodeProcess(
        ["--stack", "gossip", "--listen", "127.0.0.1:0", *linger],
        log=tmp_path / "gossip.log",
        cli=True,
    )
    cases: list[tuple[NodeProcess, str | dict[str, Any], str]] = [
        (chord, "subscribe quotes {symbol: s3}", "the filter is not JSON"),
        (chord, 'subscribe quotes {"price": {"below": 100}}', "unknown operator 'below'"),
        (chord, "subscribe quotes [1]", "filter must be a JSON object"),
        (chord, 'publish quotes tick {"price": 1', "not a JSON object"),
        (chord, 'publish quotes tick {"price": [1, 2]}', 'attribute "price" must be'),
        (
            chord,
            {"op": "publish", "topic": "quotes", "attributes": ["price", 1]},
            "attributes must be a JSON object",
        ),
        (
            gossip,
            'subscribe quotes {"price": {"lt": 100}}',
            "stack gossip is topic-based: filters need a content-based stack such as chord",
        ),
        (
            gossip,
            'publish quotes tick {"price": 1}',
            "stack gossip is topic-based: attributes need a content-based stack such as chord",
        ),
    ]
    try:
        for node, line, problem in cases:
            answer = node.command(line)
            assert answer["ok"] is False, (line, answer)
            assert problem in answer["error"], (line, answer)
            # still serving
            assert node.command("stats")["ok"], line
        # the same lines without the content parts work on the topic-based stack
        assert gossip.command("subscribe quotes")["ok"]
        published = gossip.command("publish quotes tick")
        assert published["ok"] and "attributes" not in published
        assert gossip.command("stats")["stats"]["subscriptions"] == ["quotes"]
        assert chord.command("stats")["stats"]["subscriptions"] == []
        for node in (chord, gossip):
            assert node.proc.poll() is None
            assert node.stop(signal.SIGTERM) == 0
    finally:
        for node in (chord, gossip):
            node.stop(signal.SIGKILL)


def test_the_shell_of_a_chord_node_teaches_and_filters(tmp_path: Path) -> None:
    """A lone chord node (a ring of one) on a terminal: it delivers its own matching
    publications only, and a bad filter prints an error line."""
    args = ["--stack", "chord", "--listen", "127.0.0.1:0", "--leave-linger", "0.2"]
    with ShellOnPty(args) as shell:
        shell.read_until(b"pubmesh> ")
        shell.type_line("help")
        shell.read_until(b"subscribe TOPIC FILTER-JSON")
        shell.read_until(b'subscribe quotes {"symbol": "s3", "price": {"lt": 100}}')
        shell.type_line('subscribe quotes {"price": {"lt": 100}}')
        shell.read_until(b'subscribed to quotes where {"price": {"lt": 100}}')
        shell.type_line('publish quotes dear {"price": 120}')
        shell.read_until(b'with {"price": 120}')
        shell.type_line('publish quotes cheap {"price": 99.5}')
        shell.read_until(b'hops): cheap {"price": 99.5}')
        shell.type_line('subscribe other {"price": {"under": 1}}')
        shell.read_until(
            b"error: subscribe: invalid filter: filter attribute 'price': unknown operator"
        )
        shell.type_line('publish quotes again {"price": 1}')
        shell.read_until(b'hops): again {"price": 1}')
        assert b"hops): dear" not in shell.seen
        shell.type_line("quit")
        assert shell.process.wait(15) == 0
