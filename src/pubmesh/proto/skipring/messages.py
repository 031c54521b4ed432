"""Messages of the skipring stack (tags 200-299). Every message names its topic: one BuildSR
instance runs per topic and the topic routes a message to it (Feldmann et al. §4).

Node references travel explicitly (``node``) together with the label the sender believes that
node has, as in the paper's model where messages carry references (implicit edges, §1.1); the
receiver never trusts a label it did not check.

=====  ======================  ===========  ==================================================
tag    message                 layer        rule
=====  ======================  ===========  ==================================================
200    Check                   ring         extended BuildRing label check (§2.2)
201    Linearize               ring         BuildRing introduction / delegation (§2.2)
202    IntroduceRing           ring         closing edge between min and max (§2.2)
203    RemoveConnection        ring         drop every reference to ``node`` (§4.1)
204    IntroduceShortcut       shortcut     shortcut introduction rule (§3.2.2)
205    LabelCorrection         ring         the label check on a delegated introduction (§2.2)
210    SubscribeRequest        supervisor   Subscribe (§4.1)
211    UnsubscribeRequest      supervisor   Unsubscribe (§4.1)
212    ConfigurationRequest    supervisor   actions (i)-(iv) (§3.2.1)
213    Configuration           supervisor   (label, pred, succ); all None = permission to leave
220    PublishNew              publish      flooding (§4.3), carries the publication
221    CheckTrie               publish      Patricia trie comparison (§4.2)
222    CheckAndPublish         publish      CheckTrie plus "send me prefix p" (§4.2)
223    PublicationTransfer     publish      a publication sent in answer to CheckAndPublish
224    PublishRelay            publish      a non-subscriber's publication, via the supervisor
=====  ======================  ===========  ==================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from pubmesh.proto.core import Message, register_message

TriePair = tuple[str, bytes]
"""A trie node as it travels in CheckTrie: (label, hash), without its children (§4.2)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Check(Message):
    """``node`` (label ``label``) introduces itself to the receiver and says which label it
    believes the receiver has (``claimed``). ``closing`` marks the ring's closing edge."""

    topic: str
    node: int
    label: str
    claimed: str
    closing: bool = False


register_message(Check, 200, layer="ring")


@dataclass(frozen=True, slots=True, kw_only=True)
class Linearize(Message):
    """Introduce ``node`` with believed label ``label`` to the receiver. ``returned`` marks a
    reference sent back by a node without a label (it is never sent back again)."""

    topic: str
    node: int
    label: str
    returned: bool = False
    #: delegation hops so far; the first ``GREEDY_HOPS`` may skip ahead over shortcuts
    hops: int = 0
    #: the label the sender believes the receiver has ("" = no claim); a receiver whose
    #: label differs tells the sender its real one, as it answers a Check (§2.2)
    claimed: str = ""


register_message(Linearize, 201, layer="ring")


@dataclass(frozen=True, slots=True, kw_only=True)
class IntroduceRing(Message):
    """Offer ``node`` as the receiver's closing-edge neighbour (testbed ``INTRODUCE_CYC``)."""

    topic: str
    node: int
    label: str
    returned: bool = False
    #: forwarding hops so far (see Linearize.hops)
    hops: int = 0
    #: the label the sender believes the receiver has (see Linearize.claimed)
    claimed: str = ""


register_message(IntroduceRing, 202, layer="ring")


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveConnection(Message):
    """Drop every reference to ``node`` for this topic. Never answered."""

    topic: str
    node: int


register_message(RemoveConnection, 203, layer="ring")


@dataclass(frozen=True, slots=True, kw_only=True)
class IntroduceShortcut(Message):
    """``node`` with label ``label`` is one of the receiver's shortcut neighbours (§3.2.2)."""

    topic: str
    node: int
    label: str


register_message(IntroduceShortcut, 204, layer="shortcut")


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelCorrection(Message):
    """``node`` has label ``label``: the answer to a delegated introduction whose ``claimed``
    label was wrong. The receiver fixes the references to ``node`` it holds and ignores the
    message otherwise, so a correction never creates a reference."""

    topic: str
    node: int
    label: str


register_message(LabelCorrection, 205, layer="ring")


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscribeRequest(Message):
    """The sender subscribes to ``topic`` (§4.1)."""

    topic: str


register_message(SubscribeRequest, 210, layer="supervisor")


@dataclass(frozen=True, slots=True, kw_only=True)
class UnsubscribeRequest(Message):
    """The sender unsubscribes from ``topic`` (§4.1); answered with permission to leave."""

    topic: str


register_message(UnsubscribeRequest, 211, layer="supervisor")


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigurationRequest(Message):
    """Send ``node`` its configuration, recording it if it is missing (§3.2.1). ``action``
    is the subscriber action that asked: 1-4 for (i)-(iv)."""

    topic: str
    node: int
    action: int


register_message(ConfigurationRequest, 212, layer="supervisor")


@dataclass(frozen=True, slots=True, kw_only=True)
class Configuration(Message):
    """The receiver's configuration (label, predecessor, successor) from the supervisor's
    database (§3.1). ``label`` None is the permission to leave (§4.1); ``pred``/``succ`` None
    when the receiver is alone."""

    topic: str
    label: str | None
    pred_label: str | None = None
    pred: int | None = None
    succ_label: str | None = None
    succ: int | None = None


register_message(Configuration, 213, layer="supervisor")


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishNew(Message):
    """A new publication flooding over ring edges and shortcuts (§4.3). ``hops`` counts the
    overlay hops it has travelled, this one included."""

    topic: str
    pub_id: int
    publisher: int
    payload: bytes
    hops: int

    def publication(self) -> int | None:
        return self.pub_id


register_message(PublishNew, 220, layer="publish", payload=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckTrie(Message):
    """Compare these trie nodes of ``node`` with the receiver's (§4.2)."""

    topic: str
    node: int
    pairs: tuple[TriePair, ...]


register_message(CheckTrie, 221, layer="publish")


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckAndPublish(Message):
    """CheckTrie(``node``, ``pairs``), then send ``node`` every publication whose key starts
    with ``prefix`` (§4.2)."""

    topic: str
    node: int
    pairs: tuple[TriePair, ...]
    prefix: str


register_message(CheckAndPublish, 222, layer="publish")


@dataclass(frozen=True, slots=True, kw_only=True)
class PublicationTransfer(Message):
    """A publication the receiver is missing, found by CheckTrie (§4.2)."""

    topic: str
    pub_id: int
    publisher: int
    payload: bytes
    hops: int

    def publication(self) -> int | None:
        return self.pub_id


register_message(PublicationTransfer, 223, layer="publish", payload=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishRelay(Message):
    """A publication from a node that does not subscribe to ``topic``, handed to the supervisor
    which passes it to one subscriber (an extension: the paper's publishers are subscribers)."""

    topic: str
    pub_id: int
    publisher: int
    payload: bytes

    def publication(self) -> int | None:
        return self.pub_id


register_message(PublishRelay, 224, layer="publish", payload=True)
