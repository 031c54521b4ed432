"""pubmesh.sim.fastinit: in a simulation the registered messages, the timers and the hot
outputs (Send, Deliver, SetTimer) are built by an ``__init__`` that stores through the slot
descriptors. It must be the dataclass's ``__init__`` in all but speed: the same signature, the
same stored values, the same errors, still frozen; and a class it cannot mirror keeps its own."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubmesh.proto.core import MESSAGE_INFO, Deliver, Message, Send, SetTimer, Timer
from pubmesh.sim.fastinit import fast_init, install
from pubmesh.stacks.base import discovered_stacks, get_stack

for _name in discovered_stacks():
    get_stack(_name)  # registers every stack's messages
install()  # what building a Simulation does

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

CLASSES: list[type[Any]] = [
    *sorted(
        (cls for cls in MESSAGE_INFO if cls.__module__.startswith("pubmesh.")),
        key=lambda cls: MESSAGE_INFO[cls].tag,
    ),
    Send,
    Deliver,
    SetTimer,
]


def _timers(cls: type[Any]) -> list[type[Any]]:
    """The timer classes the stacks define: subclasses of Timer at any depth that are what
    their module's name refers to (``slots=True`` makes a new class; the original lingers) and
    are dataclasses themselves (a plain subclass, as test_stacks_generated's ForeignTimer, has
    no generated ``__init__`` of its own: fast_init leaves it alone)."""
    found = []
    for sub in cls.__subclasses__():
        mine = getattr(sys.modules[sub.__module__], sub.__name__, None) is sub
        if mine and "__dataclass_fields__" in vars(sub):
            found.append(sub)
        found.extend(_timers(sub))
    return found


CLASSES += sorted(_timers(Timer), key=lambda cls: (cls.__module__, cls.__name__))


def _reference(cls: type[Any]) -> type[Any]:
    """A fresh frozen, slotted dataclass with ``cls``'s fields: its ``__init__`` is the one
    ``dataclasses`` generates, which ``fast_init`` replaced on ``cls``."""
    spec = [
        (
            f.name,
            f.type,
            dataclasses.field(default=f.default, kw_only=f.kw_only)
            if f.default is not dataclasses.MISSING
            else dataclasses.field(kw_only=f.kw_only),
        )
        for f in dataclasses.fields(cls)
    ]
    return dataclasses.make_dataclass(f"Reference{cls.__name__}", spec, frozen=True, slots=True)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_the_fast_init_has_the_generated_signature(cls: type[Any]) -> None:
    assert cls.__init__.__code__.co_filename == f"<fast __init__ of {cls.__name__}>"
    mine = inspect.signature(cls.__init__).parameters
    theirs = inspect.signature(_reference(cls).__init__).parameters
    assert [(p.name, p.kind, p.default) for p in mine.values()] == [
        (p.name, p.kind, p.default) for p in theirs.values()
    ]


def _values(cls: type[Any]) -> st.SearchStrategy[dict[str, Any]]:
    hints = typing.get_type_hints(cls)
    junk = st.one_of(st.none(), st.integers(), st.text(max_size=4), st.binary(max_size=4))
    return st.fixed_dictionaries(
        {
            f.name: junk if "Any" in repr(hints[f.name]) else st.from_type(hints[f.name])
            for f in dataclasses.fields(cls)
        }
    )


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=15, deadline=None, derandomize=True)
@given(data=st.data())
def test_an_instance_holds_what_it_was_given_and_stays_frozen(
    cls: type[Any], data: st.DataObject
) -> None:
    values = data.draw(_values(cls))
    built = cls(**values)
    by_hand = object.__new__(cls)  # what the generated __init__ does, field by field
    for name, value in values.items():
        object.__setattr__(by_hand, name, value)
    assert built == by_hand
    assert {name: getattr(built, name) for name in values} == values
    for name, value in values.items():  # (some messages have no fields)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(built, name, value)


def test_defaults_and_wrong_calls_behave_as_the_dataclass_does() -> None:
    deliver = Deliver("t", 1, b"x", 2)
    assert deliver.attributes is None
    reference = _reference(Deliver)
    for call in (
        lambda cls: cls("t", 1),  # missing arguments
        lambda cls: cls(*range(len(dataclasses.fields(Deliver)) + 1)),  # one too many
        lambda cls: cls(topic="t", pub_id=1, payload=b"x", hops=2, colour=3),  # unknown
    ):
        with pytest.raises(TypeError) as mine:
            call(Deliver)
        with pytest.raises(TypeError) as theirs:
            call(reference)
        assert str(mine.value).split("(", 1)[1] == str(theirs.value).split("(", 1)[1]
    keyword_only = next(
        cls for cls in CLASSES if issubclass(cls, Message) and dataclasses.fields(cls)
    )
    with pytest.raises(TypeError, match="positional"):
        keyword_only(*range(len(dataclasses.fields(keyword_only))))


@dataclasses.dataclass(frozen=True, slots=True)
class _PostInit:
    a: int

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a < 0")


@dataclasses.dataclass(frozen=True, slots=True)
class _Factory:
    a: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True, slots=True)
class _NotInInit:
    a: int
    b: int = dataclasses.field(default=0, init=False)


@dataclasses.dataclass(slots=True)
class _NotFrozen:
    a: int


@dataclasses.dataclass(frozen=True)
class _NoSlots:
    a: int


@pytest.mark.parametrize("cls", [_PostInit, _Factory, _NotInInit, _NotFrozen, _NoSlots])
def test_a_class_it_cannot_mirror_keeps_its_own_init(cls: type[Any]) -> None:
    before = cls.__init__
    assert fast_init(cls) is cls
    assert cls.__init__ is before
    with pytest.raises(ValueError, match="a < 0"):
        _PostInit(-1)  # its check still runs


def test_building_a_simulation_installs_it(tmp_path: Path) -> None:
    """In a fresh process: the classes keep the generated ``__init__`` until a Simulation is
    built, and have the fast one after (the engine calls :func:`install`)."""
    probe = (
        "from pubmesh.proto.core import Send\n"
        "from pubmesh.proto.skipring.messages import Linearize\n"
        "from pubmesh.sim.engine import Simulation\n"
        "from pubmesh.scenario.model import load_scenario\n"
        "names = lambda: [c.__init__.__code__.co_filename for c in (Send, Linearize)]\n"
        "print(names())\n"
        f"Simulation(load_scenario({str(SCENARIOS / 'skipring_demo.toml')!r}))\n"
        "print(names())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    before, after = result.stdout.splitlines()
    assert "fast" not in before, before
    assert after == str(["<fast __init__ of Send>", "<fast __init__ of Linearize>"])
