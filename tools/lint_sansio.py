#!/usr/bin/env python3
"""The sans-IO rule (docs/design.md "Layers", STYLE.md convention 2), enforced.

Code under src/pubmesh/proto/ and src/pubmesh/stacks/ must not do I/O, read clocks or use
module-level randomness: it imports none of the modules below, calls no I/O builtins, and uses
``random`` only through an injected ``random.Random`` instance (``random.Random`` the class is
allowed, for type hints and for building a node's stream; ``random.random()`` and friends are
not). Prints one line per violation and exits 1 if there is any.

It also enforces the layer direction of docs/design.md ("``proto/`` imports nothing above it"):
a module under ``src/pubmesh/proto/`` imports no ``pubmesh`` package but ``pubmesh.proto``
(not ``pubmesh.stacks``, ``sim``, ``net``, ``trace``, ``analysis``, ``workload``, the CLI or the
API), so the protocols stay runnable under any runtime and a stack's folder is self-contained.

And, over all of ``src/pubmesh/``, that no module imports a private name (``_name``) from
another package (``pubmesh.sim`` from ``pubmesh.net``, say): what two packages share is public
and lives where both can name it.

And, under ``src/pubmesh/proto/``, the layer contract's one rule on shape (``proto/core.py``,
``Outbox``): a function that is handed the caller's output list takes it, named ``out``, as its
last positional parameter (keyword-only options may follow), so every layer and part reads
``f(inputs..., now, out)``.

And, under ``src/pubmesh/proto/``, that no code writes another part's field: a node (or
layer) does not assign, delete or mutate in place (``add``, ``append``, ``clear``, ...) a field
of a part it built (``self.flow = Flow(self.s)``, then ``self.flow.dirty.add(x)``). A part
owns its fields; the node calls its methods, and another part routes it a typed effect
(``proto/core.py`` ``Routed``). A part itself holds no other part to write into: it is built
on the shared state alone (``tests/proto/test_layer_contract.py`` checks that at run time).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

BANNED_MODULES = {
    "asyncio",
    "socket",
    "selectors",
    "ssl",
    "time",
    "datetime",
    "os",
    "sys",
    "threading",
    "multiprocessing",
    "subprocess",
    "signal",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "urllib",
    "http",
    "requests",
    "logging",
    "secrets",
    "uuid",
    "concurrent",
}
BANNED_BUILTINS = {"open", "print", "input", "eval", "exec", "breakpoint", "__import__"}
ROOTS = ("src/pubmesh/proto", "src/pubmesh/stacks")
#: the one pubmesh package code under proto/ may import
PROTO_MAY_IMPORT = "pubmesh.proto"


def _above_proto(module: str) -> bool:
    """``module`` is a pubmesh module outside ``pubmesh.proto`` (a layer above the protocols)."""
    if module != "pubmesh" and not module.startswith("pubmesh."):
        return False
    return module != PROTO_MAY_IMPORT and not module.startswith(PROTO_MAY_IMPORT + ".")


def violations(path: Path, in_proto: bool = False) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []

    def bad(node: ast.AST, what: str) -> None:
        found.append(f"{path}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in BANNED_MODULES:
                    bad(node, f"imports {alias.name} (no I/O or clocks below the runtime)")
                if in_proto and _above_proto(alias.name):
                    bad(node, f"imports {alias.name} (proto/ imports nothing above it)")
        elif isinstance(node, ast.ImportFrom):
            top = (node.module or "").split(".")[0]
            if top in BANNED_MODULES:
                bad(node, f"imports from {node.module} (no I/O or clocks below the runtime)")
            if in_proto and node.level == 0 and _above_proto(node.module or ""):
                bad(node, f"imports from {node.module} (proto/ imports nothing above it)")
            if top == "random":
                for alias in node.names:
                    if alias.name != "Random":
                        bad(node, f"imports random.{alias.name} (use the injected random.Random)")
        elif isinstance(node, ast.Attribute):
            if (
                isinstance(node.value, ast.Name)
                and node.value.id == "random"
                and node.attr != "Random"
            ):
                bad(node, f"uses random.{node.attr} (module-level randomness; use ctx.rng)")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in BANNED_BUILTINS
        ):
            bad(node, f"calls {node.func.id}() (no I/O below the runtime)")
    return found


def output_not_last(path: Path) -> list[str]:
    """Functions in ``path`` that take the output list ``out`` before another positional
    parameter."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = [a.arg for a in node.args.posonlyargs + node.args.args]
        if "out" in names and names[-1] != "out":
            after = ", ".join(names[names.index("out") + 1 :])
            found.append(
                f"{path}:{node.lineno}: {node.name}() takes its output list before {after} "
                "(the output list is the last positional parameter: proto/core.py Outbox)"
            )
    return found


#: calls that change the object they are called on
MUTATORS = frozenset(
    {
        "add",
        "append",
        "appendleft",
        "clear",
        "discard",
        "extend",
        "insert",
        "pop",
        "popitem",
        "popleft",
        "remove",
        "setdefault",
        "update",
    }
)


def _chain(node: ast.expr) -> list[str]:
    """``self.a.b[k].c`` as ["self", "a", "b", "c"] (subscripts skipped); [] if it does not
    start at a name."""
    names: list[str] = []
    while isinstance(node, ast.Attribute | ast.Subscript):
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return []
    names.append(node.id)
    return names[::-1]


def _written(node: ast.AST) -> list[ast.expr]:
    """What ``node`` writes: assignment and deletion targets, and the object an in-place
    mutator is called on."""
    if isinstance(node, ast.Assign | ast.Delete):
        return list(node.targets)
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in MUTATORS
    ):
        return [node.func.value]
    return []


def _built_parts(cls: ast.ClassDef) -> set[str]:
    """The fields of ``cls`` that hold a part it built: ``self.x = Name(...)`` in ``__init__``
    with ``self`` or the shared state (``s``, ``self.s``: the name the stacks give it) among
    the arguments."""
    parts: set[str] = set()
    for item in cls.body:
        if not (isinstance(item, ast.FunctionDef) and item.name == "__init__"):
            continue
        for node in ast.walk(item):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            arguments = [*node.value.args, *(k.value for k in node.value.keywords)]
            if not any(_chain(a) in (["self"], ["s"], ["self", "s"]) for a in arguments):
                continue
            for target in node.targets:
                chain = _chain(target)
                if len(chain) == 2 and chain[0] == "self":
                    parts.add(chain[1])
    return parts


def part_writes(path: Path) -> list[str]:
    """Writes in ``path`` to a field of another part (module docstring)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        parts = _built_parts(cls)
        for node in ast.walk(cls):
            for target in _written(node):
                chain = _chain(target)
                if len(chain) >= 3 and chain[0] == "self" and chain[1] in parts:
                    found.append(
                        f"{path}:{node.lineno}: {cls.name} writes {'.'.join(chain[:3])}, a "
                        "field of its part (a part owns its fields: call its method, or route "
                        "a typed effect)"
                    )
    return sorted(set(found), key=lambda line: int(line.split(":")[1]))


def _package(module: str) -> str:
    """The package of a pubmesh module: ``pubmesh.net`` for ``pubmesh.net.cluster.options``,
    ``pubmesh`` for a module at the top (``pubmesh.cli``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else parts[0]


def private_imports(path: Path, module: str) -> list[str]:
    """Private names ``module`` (at ``path``) imports from a pubmesh package not its own."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    own = _package(module)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if not (node.module == "pubmesh" or node.module.startswith("pubmesh.")):
            continue
        if _package(node.module + ".x") == own:
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                found.append(
                    f"{path}:{node.lineno}: imports {alias.name} from {node.module} (a private "
                    f"name of another package: make it public where it lives)"
                )
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    problems: list[str] = []
    for sub in ROOTS:
        for path in sorted((root / sub).rglob("*.py")):
            problems.extend(violations(path, in_proto=sub == ROOTS[0]))
            if sub == ROOTS[0]:
                problems.extend(output_not_last(path))
                problems.extend(part_writes(path))
    src = root / "src"
    for path in sorted((src / "pubmesh").rglob("*.py")):
        module = ".".join(path.relative_to(src).with_suffix("").parts)
        problems.extend(private_imports(path, module))
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
