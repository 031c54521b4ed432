"""What brokertree takes from the wire, checked: sequence numbers, node ids, origins, seqVects
and partition records as a peer sent them.

The codec checks every field's type against its annotation; these check the values a
well-typed but hostile or corrupted frame can still carry (a negative node id, a sequence
number that is not finite, a tuple of the wrong length), and turn a valid one into the plain
form the node keeps (``norm_*``). A frame or a row whose values fail is ignored where it is
read: what a hostile peer claims never reaches the node's state.
"""

from __future__ import annotations

import math
from typing import Any

from pubmesh.proto.brokertree.messages import OriginT, ParInfoT, SeqT, Vect

__all__ = [
    "norm_origin",
    "norm_parinfo",
    "norm_seq",
    "norm_vect",
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
