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
import hashlib
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


def source_key(root: Path = ROOT) -> str:
    """What a build depends on, hashed: every source file of the package (the compiled modules
    and what mypyc reads of the others), the list of hot modules, the setup script, and the
    Python and mypyc that compile. Two builds with the same key are the same build."""
    import mypy.version

    digest = hashlib.sha256()
    digest.update(f"{sys.version}|{mypy.version.__version__}|{HOT_MODULES}|{SETUP}".encode())
    for path in sorted((root / "src" / "pubmesh").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".so":
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


#: builds kept in the cache (the newest; a source edit makes a new one)
KEPT_BUILDS = 3


def cache_root() -> Path:
    """``$PUBMESH_COMPILED_CACHE``, else ``pubmesh/compiled`` in the user's cache directory."""
    given = os.environ.get("PUBMESH_COMPILED_CACHE")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pubmesh" / "compiled"


def cached_build(root: Path | None = None) -> Path:
    """The build of today's sources, from the cache when it holds one, else built into it.

    A directory per :func:`source_key`, marked complete only once the build succeeded, and
    made under a temporary name then renamed, so two runs building at once never see half a
    build; a source edit changes the key, so a stale build is never reused. The suite's
    compiled tests use this: the mypyc build (~100 CPU s) is paid once per source tree, not
    once per run."""
    root = root or cache_root()
    target = root / source_key()
    if (target / ".complete").exists():
        os.utime(target)
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f".{target.name}.{os.getpid()}"
    build(staging)
    (staging / ".complete").touch()
    try:
        staging.rename(target)
    except OSError:  # another run finished the same build first: use theirs
        shutil.rmtree(staging, ignore_errors=True)
    builds = sorted(
        (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    stale = [p for p in root.iterdir() if p.name.startswith(".") and _age(p) > 3600]
    for old in [*builds[KEPT_BUILDS:], *stale]:  # old builds; staging left by a killed build
        shutil.rmtree(old, ignore_errors=True)
    return target


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


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
