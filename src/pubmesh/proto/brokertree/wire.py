"""What brokertree takes from the wire, checked: sequence numbers, node ids, origins, seqVects
and partition records as a peer sent them.

The codec checks every field's type against its annotation; these check the values a
well-typed but hostile or corrupted frame can still carry (a negative node id, a sequence
number that is not finite, a tuple of the wrong length), and turn a valid one into the plain
form the node keeps (``norm_*``). A frame or a row whose values fail is ignored where it is
read: what a hostile peer claims never reaches the node's state.

A subscription's filter and a summary row's predicate text become a predicate here too
(:func:`predicate`, :func:`predicate_text`): None for one that does not parse, cached since
every broker reads every subscription, most of them several times.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pubmesh.proto.brokertree.messages import OriginT, ParInfoT, SeqT, Vect
from pubmesh.proto.content import Conjunction, FilterError, validate, with_topic

__all__ = [
    "norm_origin",
    "norm_parinfo",
    "norm_seq",
    "norm_vect",
    "predicate",
    "predicate_text",
    "valid_node",
    "valid_origin",
    "valid_parinfo",
    "valid_seq",
]


def valid_seq(value: object) -> bool:
    return (
        type(value) is tuple
        and len(value) == 2
        and isinstance(value[0], float | int)
        and not isinstance(value[0], bool)
        and math.isfinite(value[0])
        and type(value[1]) is int
    )


def valid_node(value: object) -> bool:
    return type(value) is int and value >= 0


def valid_origin(value: object) -> bool:
    return type(value) is tuple and len(value) == 2 and valid_node(value[0]) and valid_seq(value[1])


def norm_seq(value: Any) -> SeqT:
    return (float(value[0]), int(value[1]))


def norm_origin(value: Any) -> OriginT:
    return (int(value[0]), norm_seq(value[1]))


def norm_vect(vect: Any) -> Vect | None:
    """The vector if every entry names a node (an id ≥ 0) and a finite number or ⊥, else None.
    Types are the codec's business (it checks every field against its annotation) and the
    simulator passes our own objects; this checks the values."""
    try:
        for node, seq in vect:
            if node < 0 or (seq is not None and not -math.inf < seq[0] < math.inf):
                return None
    except (TypeError, ValueError, IndexError):
        return None
    result: Vect = vect
    return result


def valid_parinfo(value: object) -> bool:
    return (
        type(value) is tuple
        and len(value) == 4
        and valid_node(value[0])
        and valid_seq(value[1])
        and type(value[2]) is tuple
        and all(valid_node(x) for x in value[2])
        and type(value[3]) is bool
    )


def norm_parinfo(value: Any) -> ParInfoT:
    return (int(value[0]), norm_seq(value[1]), tuple(int(x) for x in value[2]), bool(value[3]))


_PREDICATES: dict[tuple[str, str], Conjunction | None] = {}
#: the last filter objects seen, by id (the simulator hands one object along every hop)
_BY_OBJECT: dict[int, tuple[Any, str, Conjunction | None]] = {}


def predicate(topic: str, filter: Any) -> Conjunction | None:
    """A subscription's predicate: its filter with the topic as ``$topic`` (spec §6.1); None
    for a topic or filter that is not valid. Cached by (topic, filter text): every broker
    reads every subscription, most of them several times."""
    if type(topic) is not str or topic.startswith("$"):
        return None
    seen = _BY_OBJECT.get(id(filter))
    if seen is not None and seen[0] is filter and seen[1] == topic:
        return seen[2]
    try:
        key = (topic, json.dumps(filter, sort_keys=True, allow_nan=True))
    except (TypeError, ValueError, RecursionError):
        return None
    if key in _PREDICATES:
        pred = _PREDICATES[key]
    else:
        try:
            pred = with_topic(validate(dict(filter)), topic)
        except (FilterError, TypeError, ValueError, RecursionError):
            pred = None
        if len(_PREDICATES) > 65536:
            _PREDICATES.clear()
        _PREDICATES[key] = pred
    if len(_BY_OBJECT) > 65536:
        _BY_OBJECT.clear()
    _BY_OBJECT[id(filter)] = (filter, topic, pred)
    return pred


_BY_TEXT: dict[tuple[str, str], Conjunction | None] = {}


def predicate_text(text: str, topic: str) -> Conjunction | None:
    """A summary row's predicate (the canonical JSON text of a tuple's conjunction), held to
    the row's topic; None if it does not parse. Cached: a whole table crosses every link of a
    restarted broker."""
    key = (text, topic)
    if key in _BY_TEXT:
        return _BY_TEXT[key]
    try:
        pred: Conjunction | None = with_topic(
            validate(json.loads(text), allow_reserved=True), topic
        )
    except (FilterError, ValueError, TypeError, RecursionError):
        pred = None
    if len(_BY_TEXT) > 65536:
        _BY_TEXT.clear()
    _BY_TEXT[key] = pred
    return pred
