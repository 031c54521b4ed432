"""The scenarios and grids pubmesh ships (package data, ``pubmesh/scenarios``), found by name.

``pubmesh sim gossip_crash`` and ``pubmesh sweep paper004_failures`` work from any directory,
as ``pubmesh sim scenarios/gossip_crash.toml`` does from the repository's root: an argument
that is not an existing file is looked up among the shipped files by name (``.toml`` may be
left out). ``pubmesh scenarios`` lists them with the first sentence of each file's comment.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pubmesh.errors import UserError

#: the shipped scenarios; grids are in its ``grids/``
SHIPPED = Path(__file__).resolve().parent / "scenarios"


@dataclass(frozen=True)
class Entry:
    """One shipped file: its name (without ``.toml``), kind, path and one-line description."""

    name: str
    kind: str  # "scenario" or "grid"
    path: Path
    description: str
    #: the scenario's [run] stack ("" for a grid, which may sweep several)
    stack: str


def entries() -> list[Entry]:
    """Every shipped scenario, then every grid, by name."""
    found = []
    for kind, directory in (("scenario", SHIPPED), ("grid", SHIPPED / "grids")):
        for path in sorted(directory.glob("*.toml")):
            stack = ""
            if kind == "scenario":
                run = tomllib.loads(path.read_text()).get("run", {})
                stack = str(run.get("stack", "")) if isinstance(run, dict) else ""
            found.append(Entry(path.stem, kind, path, describe(path), stack))
    return found


def describe(path: Path) -> str:
    """The first sentence of the comment a file opens with, whole, on one line ("" if none;
    ``pubmesh scenarios`` wraps it, never cuts it); indented comment lines (example commands)
    are skipped."""
    lines: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        body = line[1:]
        if body.startswith("  ") or not body.strip():  # an example command, or a gap
            if lines:
                break
            continue
        lines.append(body.strip())
    summary = " ".join(lines)
    # the first sentence: a period and a space before a capital, not an abbreviation's
    end = re.search(r"(?<!\bal)(?<!\bFig)(?<!\bFigs)(?<!e\.g)(?<!i\.e)\. (?=[A-Z])", summary)
    if end is not None:
        summary = summary[: end.start() + 1]
    return summary


def find(argument: str, kind: str = "scenario") -> Path:
    """``argument`` as given if it is a file, else the shipped ``kind`` of that name; a
    :class:`UserError` naming the close names (and ``pubmesh scenarios``) otherwise."""
    given = Path(argument)
    if given.is_file():
        return given
    name = given.name.removesuffix(".toml")
    directory = SHIPPED if kind == "scenario" else SHIPPED / "grids"
    shipped = directory / f"{name}.toml"
    if (given.parent == Path(".") or given.parent.name in ("scenarios", "grids")) and (
        shipped.is_file()
    ):
        return shipped
    names = sorted(e.name for e in entries() if e.kind == kind)
    close = [n for n in names if name and (name in n or n in name)][:5]
    hint = f" (shipped {kind}s like it: {', '.join(close)})" if close else ""
    raise UserError(
        f"{argument}: no such {kind} file, nor a shipped {kind} of that name{hint}; "
        "pubmesh scenarios lists them"
    )
