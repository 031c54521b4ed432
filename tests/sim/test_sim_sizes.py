"""The simulator's compiled size estimate (pubmesh.sim.sizes) equals Message.wire_size, the
generic walk, on every registered message class, for values of the declared types and for
values of other types (junk)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubmesh.proto.core import HEADER_BYTES, MESSAGE_INFO, Message, register_message
from pubmesh.sim.sizes import size_function
from pubmesh.stacks.base import discovered_stacks, get_stack

for _name in discovered_stacks():
    get_stack(_name)  # registers every stack's messages

#: the stacks' messages (test modules register probe classes of their own, present or not
#: depending on which tests were collected first; the list must not depend on that)
CLASSES = sorted(
    (cls for cls in MESSAGE_INFO if cls.__module__.startswith(("pubmesh.", "tinystack"))),
    key=lambda cls: MESSAGE_INFO[cls].tag,
)
JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=5), st.binary(max_size=5)
)


def _of_type(hint: object) -> st.SearchStrategy[object]:
    """Values of a declared field type; JSON-valued fields (content attributes,
    ``Mapping[str, Any]``) get JSON objects, since Hypothesis has no strategy for Any."""
    if "Any" in repr(hint):
        return st.dictionaries(st.text(max_size=5), JUNK, max_size=3)
    return st.from_type(hint)  # type: ignore[arg-type]


def _declared(cls: type[Message]) -> st.SearchStrategy[Message]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f.name: _of_type(hints[f.name]) for f in dataclasses.fields(cls)})


def test_every_stack_registers_messages() -> None:
    tags = {MESSAGE_INFO[cls].tag // 100 for cls in CLASSES}
    assert {1, 2} <= tags, f"gossip (1xx) and skipring (2xx) messages are registered: {tags}"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=25, deadline=None, derandomize=True)
@given(data=st.data())
def test_compiled_size_equals_the_walk(cls: type[Message], data: st.DataObject) -> None:
    message = data.draw(_declared(cls))
    assert size_function(cls)(message) == message.wire_size(), message


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=10, deadline=None, derandomize=True)
@given(data=st.data())
def test_simple_fields_holding_junk_are_sized_by_the_walk(
    cls: type[Message], data: st.DataObject
) -> None:
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        simple = hints[f.name] in (int, float, bool, str, bytes)
        values[f.name] = data.draw(JUNK if simple else _of_type(hints[f.name]))
    message = cls(**values)
    assert size_function(cls)(message) == message.wire_size(), message


#: the tag of this module's schema probe (tests' range; 80-82 and 90-98 are other modules')
SIZED_TAG = 84


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SizedBySchema(Message):
    """Annotated uselessly on purpose: only its registration's ``fields=`` declares the
    types (registered on first use, so that no other test's collection meets it)."""

    pub_id: Any
    peers: Any


def test_size_function_follows_the_registered_schema() -> None:
    if SizedBySchema not in MESSAGE_INFO:
        fields = {"pub_id": int, "peers": tuple[int, ...]}
        register_message(SizedBySchema, SIZED_TAG, layer="test", fields=fields)
    message = SizedBySchema(pub_id=1, peers=(2, 3, 4))
    assert size_function(SizedBySchema)(message) == message.wire_size() == HEADER_BYTES + 8 + 26
    # a declared tuple's elements are sized as declared (8 bytes an int), not walked: only
    # the schema, not the annotations (Any), says they are ints
    odd = SizedBySchema(pub_id=1, peers=("a", "b"))
    assert odd.wire_size() == HEADER_BYTES + 8 + 2 + 3 + 3
    assert size_function(SizedBySchema)(odd) == HEADER_BYTES + 8 + 2 + 8 * 2
