"""Build the optional compiled pubmesh: the simulator's hot modules compiled with mypyc.

    .venv/bin/python tools/build_compiled.py [--out build/compiled]
    PYTHONPATH=build/compiled .venv/bin/pubmesh sim scenarios/paper004.toml --out runs/x

The source tree is copied to ``OUT/pubmesh`` and the modules of :data:`HOT_MODULES` are compiled
there, in place, by mypyc (shipped with mypy, the dev extra's pin): ``src/`` is never touched,
so the pure package stays pure and a source edit is never shadowed by a stale ``.so``. Put
``OUT`` first on ``PYTHONPATH`` to run compiled; without it pubmesh is pure Python. Both write
the same traces, byte for byte (``make test`` checks it: tests/sim/test_compiled.py).

What compiling asks of the compiled modules (see also ``make compiled`` in the Makefile):

* their dataclasses (messages, timers, the layers' events) are ``@mypyc_attr(native_class=
  False)``: ordinary Python classes with compiled methods. As native classes, ``slots=True``
  dataclasses fail at import (the decorator rebuilds the class) and class variables of a
  dataclass turn into fields;
* mypyc writes a class's annotations from the types it knows and writes ``tuple[int, ...]`` as
  bare ``tuple``, which the codec and the size functions would misread: such fields are
  annotated as strings, which it keeps as written;
* the layer classes (``HyParView``, ``Plumtree``, ``Swarm``, ``SwarmDirectory``) are native:
  compiled code reads their attributes at fixed offsets. Their ``__slots__`` serve the pure
  package; a native instance has no ``__dict__`` either and is 8 bytes larger (its vtable).
  As non-native classes every ``self.x`` in their compiled methods took CPython's generic
  attribute path (``PyObject_GetAttr``, a type look-up, the slot's descriptor), slower than
  the interpreter's specialised ``LOAD_ATTR``: that made the compiled build slower than pure
  Python. ``GossipNode`` stays non-native: its base, ``StackNode``, is interpreted;
* ``pubmesh.proto.core`` stays interpreted: other stacks and the tests subclass its classes,
  and interpreted classes may not inherit from compiled ones. The classes that are compiled
  (``Simulation``, ``TraceWriter``, ``GossipNode``, ``HyParView``, ``Plumtree``, ...) take no
  attributes beyond those they declare and no interpreted subclasses.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the simulator's hot path (BENCHMARKS.md); everything else stays interpreted
HOT_MODULES = (
    "pubmesh/sim/engine.py",
    "pubmesh/proto/gossip/hyparview.py",
    "pubmesh/proto/gossip/plumtree.py",
    "pubmesh/proto/gossip/rooted.py",
    "pubmesh/proto/gossip/node.py",
    "pubmesh/trace/writer.py",
)

SETUP = """
from mypyc.build import mypycify
from setuptools import setup

setup(
    name="pubmesh-compiled",
    ext_modules=mypycify({modules!r}, opt_level="3", debug_level="0"),
    script_args=["build_ext", "--inplace"],
)
"""


def build(out: Path) -> float:
    """Copy the sources to ``out`` and compile the hot modules there; seconds taken."""
    started = time.perf_counter()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copytree(
        ROOT / "src" / "pubmesh",
        out / "pubmesh",
        ignore=shutil.ignore_patterns("__pycache__", "*.so"),
    )
    (out / "setup_compiled.py").write_text(SETUP.format(modules=list(HOT_MODULES)))
    # mypyc type-checks what it compiles: the project's settings, wherever ``out`` is
    (out / "mypy.ini").write_text("[mypy]\npython_version = 3.11\nignore_missing_imports = True\n")
    env = {**os.environ, "MYPYC_OPT_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "setup_compiled.py"],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"build_compiled: mypyc failed (exit {done.returncode})")
    built = sorted(p.name for p in out.rglob("*.so"))
    if len(built) < len(HOT_MODULES):
        raise SystemExit(
            f"build_compiled: expected {len(HOT_MODULES)} extension modules, got {built}"
        )
    shutil.rmtree(out / "build", ignore_errors=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "build" / "compiled", help="where the compiled copy goes"
    )
    args = parser.parse_args()
    seconds = build(args.out)
    print(f"compiled {len(HOT_MODULES)} modules into {args.out} in {seconds:.0f} s")


if __name__ == "__main__":
    main()
