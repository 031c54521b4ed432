"""The control protocol of a node process: JSON lines on its stdin and stdout.

``pubmesh node`` off a terminal (and always with ``--control``, the mode
:mod:`pubmesh.net.cluster` uses) is driven through this protocol, one JSON object per line:

* **Commands**, on the node's stdin, say what to do; the key ``"op"`` names the command::

      {"op":"start","contacts":[2130706433...]}        boot (--control), joining through those
      {"op":"subscribe","topic":"news"}                 {"op":"unsubscribe","topic":"news"}
      {"op":"subscribe","topic":"quotes","filter":{"symbol":"s3","price":{"lt":100}}}
      {"op":"subscribe","topic":"news","history":"all"}    (or 50, "50", "90s", "5m", "1h")
      {"op":"publish","topic":"news","pub_id":7,"payload_size":100}   (or "payload": "text")
      {"op":"publish","topic":"quotes","payload":"tick","attributes":{"symbol":"s3","price":99}}
      {"op":"neighbors"}  {"op":"stats"}  {"op":"help"}
      {"op":"leave"}      run the stack's leave protocol, keep the process
      {"op":"exit"}       stop without leaving (a cluster's end of run, as a simulation ends)
      {"op":"quit"}       leave gracefully, then stop

  A person or a script may also type the shell form, ``publish news hello there``
  (:func:`parse_line` reads both). Content-based stacks (chord) take a content filter and
  publication attributes, JSON objects at the end of the shell line:
  ``subscribe quotes {"symbol": "s3", "price": {"lt": 100}}`` and
  ``publish quotes tick {"symbol": "s3", "price": 99.5}``. A filter is checked here with
  :func:`pubmesh.proto.content.validate` (the filter language of
  :mod:`pubmesh.proto.content.filters`); attribute values must be strings or numbers. Whether
  the node's stack takes filters at all is the node's to say. A late subscriber asks for the
  topic's past with ``history`` (``subscribe news --history 5m`` in the shell form): ``all``,
  a count or a duration, read by :func:`pubmesh.proto.history.parse_history`; a stack that
  keeps no history (``StackSpec.history`` empty) refuses the request.
* **Replies**, on the node's stdout, say what happened; the key ``"event"`` names them:
  ``ready`` (once listening: the node's id and address), ``result`` (the answer to each
  command, in order: ``"ok": true`` and what the command did, or ``"ok": false`` and the
  error), ``stats`` (every ``--stats-interval`` seconds), ``deliver`` (a delivery, unless
  ``--no-delivery-lines``), ``net`` (a transport event such as a refused connection) and ``bye``
  (the last line, with the node's counters).

Every line is one frozen dataclass here, :func:`encode` writes it and :func:`decode` reads it
back (or raises :class:`ControlError` naming what is wrong: not JSON, an unknown command or
event, a missing field, a field of the wrong type or out of range). Fields that the reader does
not know are ignored, so either side may add some. Optional command fields that are unset are
left out of the line.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias, TypeVar, get_args, get_origin

from pubmesh import typed
from pubmesh.errors import did_you_mean
from pubmesh.proto.content import attributes_problem, filter_problem
from pubmesh.proto.content.filters import EXAMPLE_ATTRIBUTES, EXAMPLE_FILTER
from pubmesh.proto.core import HistoryRequest
from pubmesh.proto.history import parse_history

__all__ = [
    "Answer",
    "Bye",
    "Command",
    "CommandFailed",
    "ControlError",
    "Delivered",
    "Help",
    "HelpText",
    "Lagged",
    "Leave",
    "Left",
    "Message",
    "NeighborList",
    "Neighbors",
    "NetEvent",
    "Publish",
    "Published",
    "Quit",
    "Quitting",
    "Ready",
    "Reply",
    "Start",
    "Started",
    "Stats",
    "StatsLine",
    "StatsReport",
    "Stop",
    "Stopping",
    "Subscribe",
    "Subscribed",
    "Unsubscribe",
    "Unsubscribed",
    "decode",
    "decode_command",
    "decode_reply",
    "encode",
    "parse_line",
]

MAX_PAYLOAD_SIZE = 1 << 20
PUB_ID_LIMIT = 2**63


class ControlError(ValueError):
    """A control line that cannot be read: not JSON, an unknown command or event, a missing
    field or a field of the wrong type or range. The message says which."""


class PublishRefused(ControlError):
    """A node answered ``publish`` with ``"refused"``: it had no room (pubmesh.net.runtime
    Receipt); the publication was not made."""


def _topic() -> Any:
    return field(metadata={"missing": "{op} needs a topic, e.g. {op} news"})


FILTER = EXAMPLE_FILTER
ATTRIBUTES = EXAMPLE_ATTRIBUTES
FILTER_EXAMPLE = f"subscribe quotes {FILTER}"
HISTORY_VALUES = "all, a count (50) or a duration (90s, 5m, 1h)"
ATTRIBUTES_EXAMPLE = f"publish quotes tick {ATTRIBUTES}"


# --------------------------------------------------------------------------------------------
# Commands (stdin of the node)
# --------------------------------------------------------------------------------------------
class _Command:
    OP: ClassVar[str]


@dataclass(frozen=True)
class Start(_Command):
    """Boot the protocol node (``--control`` nodes wait for it), joining through ``contacts``
    (node ids; None: the contacts of the command line)."""

    OP: ClassVar[str] = "start"
    contacts: tuple[int, ...] | None = field(default=None, metadata={"must": "a list of node ids"})


@dataclass(frozen=True)
class Subscribe(_Command):
    """Subscribe to ``topic``; on a content-based stack, only to the publications whose
    attributes match ``filter`` (a JSON filter, :mod:`pubmesh.proto.content.filters`;
    None: every publication on the topic). ``history``: the topic's past too, ``"all"``, a
    count (an int or its text) or a duration (``"90s"``); None: from now on only."""

    OP: ClassVar[str] = "subscribe"
    topic: str = _topic()
    filter: dict[str, Any] | None = field(
        default=None, metadata={"must": f"a JSON object such as {FILTER}"}
    )
    history: str | int | None = field(default=None, metadata={"must": HISTORY_VALUES})

    def __post_init__(self) -> None:
        problem = None if self.filter is None else filter_problem(self.filter)
        if problem is not None:
            raise ControlError(f"subscribe: invalid filter: {problem}")
        _history_request(self.history)  # a bad value is refused where it is read

    @property
    def request(self) -> HistoryRequest | None:
        """The history request (None: none asked)."""
        return _history_request(self.history)


def _history_request(value: str | int | None) -> HistoryRequest | None:
    if value is None:
        return None
    try:
        return parse_history(value)
    except ValueError as error:
        raise ControlError(f"subscribe: {error}") from None


@dataclass(frozen=True)
class Unsubscribe(_Command):
    OP: ClassVar[str] = "unsubscribe"
    topic: str = _topic()


@dataclass(frozen=True)
class Publish(_Command):
    """Publish on ``topic``: a workload publication (``pub_id`` and ``payload_size``: the
    simulator's payload of that size) or a text ``payload``."""

    OP: ClassVar[str] = "publish"
    topic: str = _topic()
    pub_id: int | None = None
    payload_size: int | None = None
    payload: str | None = None
    #: The publication's attributes on a content-based stack (what filters match on): names
    #: to strings or numbers.
    attributes: dict[str, Any] | None = field(
        default=None, metadata={"must": f"a JSON object such as {ATTRIBUTES}"}
    )

    def __post_init__(self) -> None:
        if self.pub_id is not None and not 0 <= self.pub_id < PUB_ID_LIMIT:
            raise ControlError("publish: pub_id must be an int in [0, 2^63)")
        if self.payload_size is not None and not 0 <= self.payload_size <= MAX_PAYLOAD_SIZE:
            raise ControlError("publish: payload_size must be an int in [0, 1 MiB]")
        problem = None if self.attributes is None else attributes_problem(self.attributes)
        if problem is not None:
            raise ControlError(f"publish: {problem}")


@dataclass(frozen=True)
class Neighbors(_Command):
    OP: ClassVar[str] = "neighbors"


@dataclass(frozen=True)
class Stats(_Command):
    """The node's counters: the shell shows a short summary with addresses, ``stats --json``
    (``{"op": "stats"}`` on the JSON channel) every counter."""

    OP: ClassVar[str] = "stats"
    full: bool = False


@dataclass(frozen=True)
class Help(_Command):
    OP: ClassVar[str] = "help"


@dataclass(frozen=True)
class Leave(_Command):
    """Run the stack's leave protocol; the process stays up (a cluster's planned leave)."""

    OP: ClassVar[str] = "leave"


@dataclass(frozen=True)
class Stop(_Command):
    """Stop without the leave protocol, as the end of a simulation does (wire op ``exit``)."""

    OP: ClassVar[str] = "exit"


@dataclass(frozen=True)
class Quit(_Command):
    """Leave gracefully, then stop."""

    OP: ClassVar[str] = "quit"


Command: TypeAlias = (
    Start | Subscribe | Unsubscribe | Publish | Neighbors | Stats | Help | Leave | Stop | Quit
)


# --------------------------------------------------------------------------------------------
# Replies (stdout of the node)
# --------------------------------------------------------------------------------------------
class _Event:
    EVENT: ClassVar[str]


class _Answer(_Event):
    """A ``result`` line with ``"ok": true``: the answer to one command."""

    EVENT: ClassVar[str] = "result"
    OP: ClassVar[str]


@dataclass(frozen=True)
class Ready(_Event):
    """The node listens: its id (``ip << 16 | port``) and address."""

    EVENT: ClassVar[str] = "ready"
    node: int
    address: str
    stack: str
    role: str
    pid: int
    t: float
    #: where it serves /metrics (``--metrics``), or None
    metrics: str | None = None
    #: how it runs: links (identity, shared-key), signed, acl, data_dir (runtime_stats.mode_of)
    mode: dict[str, Any] | None = None


@dataclass(frozen=True)
class Started(_Answer):
    OP: ClassVar[str] = "start"
    t: float


@dataclass(frozen=True)
class Subscribed(_Answer):
    OP: ClassVar[str] = "subscribe"
    topic: str
    t: float
    filter: dict[str, Any] | None = None
    #: the history asked for (its text, ``HistoryRequest.__str__``), if any
    history: str | None = None


@dataclass(frozen=True)
class Unsubscribed(_Answer):
    OP: ClassVar[str] = "unsubscribe"
    topic: str
    t: float


@dataclass(frozen=True)
class Published(_Answer):
    OP: ClassVar[str] = "publish"
    topic: str
    pub_id: int
    t: float
    size: int
    attributes: dict[str, Any] | None = None


@dataclass(frozen=True)
class NeighborList(_Answer):
    """Per topic, the overlay neighbours the protocol names."""

    OP: ClassVar[str] = "neighbors"
    neighbors: dict[str, tuple[int, ...]]
    #: the same neighbours as addresses (``127.0.0.1:7001``)
    addresses: dict[str, tuple[str, ...]] | None = None


@dataclass(frozen=True)
class StatsReport(_Answer):
    """The node's counters (``NodeRuntime.statistics()``, a plain table)."""

    OP: ClassVar[str] = "stats"
    stats: dict[str, Any]


@dataclass(frozen=True)
class HelpText(_Answer):
    OP: ClassVar[str] = "help"
    commands: str


@dataclass(frozen=True)
class Left(_Answer):
    OP: ClassVar[str] = "leave"
    t: float


@dataclass(frozen=True)
class Stopping(_Answer):
    OP: ClassVar[str] = "exit"


@dataclass(frozen=True)
class Quitting(_Answer):
    OP: ClassVar[str] = "quit"


@dataclass(frozen=True)
class CommandFailed(_Event):
    """A ``result`` line with ``"ok": false``: the command (``line``, cut to 200 characters)
    was refused."""

    EVENT: ClassVar[str] = "result"
    error: str
    line: str
    #: ``"no-room"``: a publish refused by flow control (the node's queues at their budget,
    #: or a slow peer's full): the node is well, the publication was not made
    refused: str | None = None


@dataclass(frozen=True)
class StatsLine(_Event):
    """The periodic ``stats`` line (``--stats-interval``): what a cluster's live table shows
    and what its overlay check reads."""

    EVENT: ClassVar[str] = "stats"
    node: int
    t: float
    booted: bool
    deliveries: int
    published: int
    subscriptions: tuple[str, ...]
    neighbors: dict[str, tuple[int, ...]]
    frames_sent: int
    frames_received: int
    dropped: int
    rejected: int
    peer_down: int
    handler_errors: int
    #: the node's address, and its neighbours' (``node`` and ``neighbors`` as ids stay: the
    #: cluster's live table reads them)
    address: str | None = None
    neighbor_addresses: dict[str, tuple[str, ...]] | None = None


@dataclass(frozen=True)
class Lagged(_Event):
    """The reader of stdout fell a megabyte behind and missed ``dropped`` lines (deliveries,
    network events, stats lines; never answers): said once it has caught up."""

    EVENT: ClassVar[str] = "lagged"
    dropped: int
    t: float


@dataclass(frozen=True)
class Delivered(_Event):
    EVENT: ClassVar[str] = "deliver"
    topic: str
    pub_id: int
    hops: int
    size: int
    payload: str
    t: float
    attributes: dict[str, Any] | None = None
    #: true for a publication handed over from the topic's history (issued before the
    #: subscription); left out of the line otherwise
    replayed: bool | None = None
    #: a replayed publication's original publish time (wall clock, as ``t``); left out of
    #: the line otherwise
    published: float | None = None


@dataclass(frozen=True)
class NetEvent(_Event):
    """A transport event (``kind`` starts with ``net.``), e.g. a refused connection, or a
    stack's ``miswired`` (a peer started with a configuration that cannot work with ours)."""

    EVENT: ClassVar[str] = "net"
    kind: str
    detail: Any
    t: float


@dataclass(frozen=True)
class Bye(_Event):
    """The node's last line: it stopped; its counters (``NodeRuntime.statistics()``)."""

    EVENT: ClassVar[str] = "bye"
    node: int
    t: float
    stats: dict[str, Any]


Answer: TypeAlias = (
    Started
    | Subscribed
    | Unsubscribed
    | Published
    | NeighborList
    | StatsReport
    | HelpText
    | Left
    | Stopping
    | Quitting
    | CommandFailed
)
Reply: TypeAlias = Ready | Answer | StatsLine | Delivered | NetEvent | Lagged | Bye
Message: TypeAlias = Command | Reply

_COMMANDS: dict[str, type[Command]] = {
    cls.OP: cls
    for cls in (Start, Subscribe, Unsubscribe, Publish, Neighbors, Stats, Help, Leave, Stop, Quit)
}
_COMMANDS["neighbours"] = Neighbors
_ANSWERS: dict[str, type[Answer]] = {
    cls.OP: cls
    for cls in (
        Started,
        Subscribed,
        Unsubscribed,
        Published,
        NeighborList,
        StatsReport,
        HelpText,
        Left,
        Stopping,
        Quitting,
    )
}
_EVENTS: dict[str, type[Reply]] = {
    cls.EVENT: cls for cls in (Ready, StatsLine, Delivered, NetEvent, Lagged, Bye)
}


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------
def encode(message: Message) -> str:
    """``message`` as one JSON line (without the newline)."""
    record: dict[str, Any] = {}
    if isinstance(message, _Command):
        record["op"] = message.OP
    elif isinstance(message, _Answer):
        record.update(event="result", ok=True, op=message.OP)
    elif isinstance(message, CommandFailed):
        record.update(event="result", ok=False)
    else:
        record["event"] = message.EVENT
    for f in dataclasses.fields(message):
        value = getattr(message, f.name)
        if value is None and f.default is None:
            continue  # an unset optional field is left out
        record[f.name] = value
    return json.dumps(record, separators=(",", ":"), default=str)


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------
def _load(line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ControlError(f"not JSON: {error}") from None
    if not isinstance(record, dict):
        raise ControlError(f"a control line is a JSON object, got {_show(record)}")
    return record


def decode(line: str) -> Message:
    """A command (``"op"``) or a reply (``"event"``) from one JSON line."""
    record = _load(line)
    if "event" in record:
        return _reply(record)
    if "op" in record:
        return _command(record)
    raise ControlError('a control line needs "op" (a command) or "event" (a reply)')


def decode_command(line: str) -> Command:
    """A command from one JSON line (what a node reads)."""
    return _command(_load(line))


def decode_reply(line: str) -> Reply:
    """A reply from one JSON line (what a controller reads)."""
    return _reply(_load(line))


#: characters of one control line at most: a 1 MiB payload as JSON text, escaped, fits
MAX_LINE = 8 << 20


def parse_line(line: str) -> Command:
    """A command from a line a person or a script typed: a JSON object, or the shell form
    ``OP [TOPIC [PAYLOAD...]]`` (``publish news hello there``), where ``subscribe TOPIC
    [FILTER-JSON] [--history all|N|DURATION]`` gives a content filter and asks for the
    topic's past, and ``publish TOPIC MESSAGE ATTRIBUTES-JSON`` (a JSON
    object ending the line) gives attributes. Whatever the line, the answer is a command or
    a ControlError: a line too long, or JSON nested too deeply for the parser, included (an
    exception of another kind would leave the line without a reply, and a controller would
    take the next reply for its answer)."""
    if len(line) > MAX_LINE:
        raise ControlError(f"a line of {len(line):,} characters; at most {MAX_LINE:,}")
    try:
        return _parse_line(line)
    except RecursionError:
        raise ControlError("JSON nested too deeply") from None


def _parse_line(line: str) -> Command:
    line = line.strip()
    if line.startswith("{"):
        return decode_command(line)
    words = line.split(None, 2)
    if not words:
        raise ControlError("empty command (try help)")
    record: dict[str, Any] = {"op": words[0].lower()}
    if record["op"] == "stats" and words[1:] == ["--json"]:
        return Stats(full=True)
    if len(words) > 1:
        record["topic"] = words[1]
        if record["op"] == "subscribe" and words[1].startswith("--history"):
            raise ControlError(
                "subscribe: the topic comes first: subscribe TOPIC [FILTER-JSON] "
                "[--history all|N|DURATION]"
            )
    if len(words) > 2:
        rest = words[2]
        if record["op"] == "subscribe":
            rest, history = _split_history(rest)
            if history is not None:
                record["history"] = history
            if rest:
                record["filter"] = _shell_filter(rest)
        elif record["op"] == "publish":
            message, attributes = _split_attributes(rest)
            if message:
                record["payload"] = message
            if attributes is not None:
                record["attributes"] = attributes
        else:
            record["payload"] = rest
    return _command(record)


def _shell_filter(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ControlError(
            f"subscribe: the filter is not JSON ({error}); write e.g. {FILTER_EXAMPLE}"
        ) from None


#: ``--history VALUE`` (or ``--history=VALUE``) opening or ending a shell subscribe's rest
_HISTORY_LAST = re.compile(r"""(?:^|\s)--history(?:\s*=\s*|\s+)(?P<value>[^\s{}"']+)\s*$""")
_HISTORY_FIRST = re.compile(r"^--history(?:\s*=\s*|\s+)(?P<value>[^\s{]+)(?:\s+|$)")


def _split_history(text: str) -> tuple[str, str | None]:
    """A shell subscribe's ``[FILTER-JSON] [--history VALUE]`` (the option first or last):
    the rest and the option's value, if given; ControlError for ``--history`` without one."""
    for pattern in (_HISTORY_LAST, _HISTORY_FIRST):
        match = pattern.search(text)
        if match is not None:
            return (text[: match.start()] + text[match.end() :]).strip(), match["value"]
    if re.search(r"(?:^|\s)--history\s*=?\s*$", text) or text.startswith("--history"):
        raise ControlError(f"subscribe: --history needs a value: {HISTORY_VALUES}")
    return text, None


_LOOKS_LIKE_OBJECT = re.compile(r"\{\s*[\"']")


def _split_attributes(text: str) -> tuple[str, dict[str, Any] | None]:
    """``MESSAGE [ATTRIBUTES-JSON]``: the message and the JSON object ending ``text`` (the
    shortest ``{...}`` suffix that parses as one), if any. Without such an object, ``text`` is
    the message, unless it holds what looks like an attempt at one (``{"`` or ``{'``): that
    is an error (the JSON form's ``payload`` publishes such text)."""
    if text.endswith("}"):
        decoder = json.JSONDecoder()
        start = len(text)
        while (start := text.rfind("{", 0, start)) >= 0:
            try:
                value, end = decoder.raw_decode(text, start)
            except json.JSONDecodeError:
                continue
            if end == len(text) and isinstance(value, dict):
                return text[:start].rstrip(), value
    attempt = _LOOKS_LIKE_OBJECT.search(text)
    if attempt is not None:
        try:
            json.loads(text[attempt.start() :])
        except json.JSONDecodeError as error:
            raise ControlError(
                f"publish: the attributes ending the line are not a JSON object ({error}); "
                f"write e.g. {ATTRIBUTES_EXAMPLE}"
            ) from None
    return text, None


def _command(record: dict[str, Any]) -> Command:
    if "event" in record:
        raise ControlError('a command has no "event": that is a reply line')
    op = record.get("op")
    if not isinstance(op, str):
        raise ControlError('a JSON command needs "op"')
    cls = _COMMANDS.get(op)
    if cls is None:
        raise ControlError(f"unknown command {op!r}{did_you_mean(str(op), _COMMANDS)} (try help)")
    return _build(cls, record, op)


def _reply(record: dict[str, Any]) -> Reply:
    event = record.get("event")
    if not isinstance(event, str):
        raise ControlError(f'"event" must be text, got {_show(event)}')
    if event == "result":
        ok = record.get("ok")
        if ok is False:
            return _build(CommandFailed, record, "result")
        if ok is not True:
            raise ControlError(f"result: ok must be true or false, got {_show(ok)}")
        op = record.get("op")
        if not isinstance(op, str):
            raise ControlError('result: an answer needs "op"')
        answer = _ANSWERS.get(op)
        if answer is None:
            raise ControlError(f"result: unknown command {op!r} answered")
        return _build(answer, record, f"result of {op}")
    cls = _EVENTS.get(event)
    if cls is None:
        raise ControlError(f"unknown event {event!r}")
    return _build(cls, record, event)


_T = TypeVar("_T")


#: class -> (its field type hints, its fields): typing.get_type_hints evaluates every
#: annotation string again on each call, and a cluster's controller and nodes read a line per
#: publication (a sixth of the controller's time at 300 publications per second)
_SCHEMAS: dict[type, tuple[dict[str, Any], tuple[dataclasses.Field[Any], ...]]] = {}


def _build(cls: type[_T], record: dict[str, Any], where: str) -> _T:
    schema = _SCHEMAS.get(cls)
    if schema is None:
        schema = _SCHEMAS[cls] = (typing.get_type_hints(cls), dataclasses.fields(cls))  # type: ignore[arg-type]
    hints, cls_fields = schema
    values: dict[str, Any] = {}
    for f in cls_fields:
        if f.name not in record:
            if f.default is dataclasses.MISSING:
                missing = f.metadata.get("missing", "{op}: {name} is missing")
                raise ControlError(missing.format(op=where, name=f.name))
            continue
        where_f = f"{where}: {f.name}"
        values[f.name] = typed.convert(
            record[f.name], hints[f.name], where_f, _JSON, f.metadata.get("must")
        )
    return cls(**values)


_KINDS: dict[Any, str] = {**typed.KINDS, str: "text"}


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if tp in _KINDS:
        return _KINDS[tp]
    if origin is tuple:
        return f"a list of {_describe(get_args(tp)[0]).removeprefix('an ').removeprefix('a ')}s"
    if origin is dict:
        return "an object"
    if origin is Literal:
        return " or ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp) if a is not type(None))
    return str(tp)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


#: the shared type-driven reader (pubmesh.typed) in the control channel's words: a union's
#: value tried against each arm, a list named whole when an element is wrong, no nesting
_JSON = typed.Dialect(
    error=ControlError,
    wrong=lambda where, wanted, value: f"{where} must be {wanted}, got {_show(value)}",
    describe=_describe,
    each_arm=True,
    whole_lists=True,
    strict=True,
)
