"""Every document the repository cites is in the repository.

Code, tests, the README, ``--help`` texts, reports and the benchmarks cite the design, the
metric glossary and each stack's protocol notes by path (``docs/design.md``,
``docs/metrics.md``, ``docs/protocols/relay.md §4``) and the papers by name. This test reads
every text file git tracks and fails on a cited path the repository does not have, and on the
old citation forms that named files outside it (``specs/<stack>.md``, ``papers/00N``,
``DESIGN.md``), naming each file and line.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: a path under docs/ ending in .md or an image, as prose writes it (a trailing period or
#: comma is the sentence's); relative links inside docs/ are resolved from the citing file
CITED = re.compile(r"(?<![\w/.-])((?:\.\./)*(?:docs/)?(?:protocols/)?[\w-]+\.(?:md|png))(?![\w/])")
#: citation forms that point outside the repository
OUTSIDE = re.compile(r"(?<![\w/])(?:specs/[\w-]+\.md|specs/|papers/\d{3}|DESIGN\.md)|\.\./shared/")

TEXT = (".py", ".md", ".toml", ".txt", ".html", ".cfg", ".ini", ".sh", ".j2", "Makefile", "run")


def tracked() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in listed if name.endswith(TEXT)]


def resolve(citing: Path, cited: str) -> list[Path]:
    """Where a cited path may be: from the repository root, from docs/, or relative to the
    citing file (a link inside docs/)."""
    return [ROOT / cited, ROOT / "docs" / cited, citing.parent / cited]


def test_every_cited_document_is_in_the_repository() -> None:
    files = tracked()
    assert len(files) > 200, len(files)  # the whole tree was read, not an empty listing
    missing: list[str] = []
    outside: list[str] = []
    cited = 0
    for path in files:
        if path.resolve() == Path(__file__).resolve():
            continue  # this file names the old forms on purpose
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{number}"
            for match in OUTSIDE.finditer(line):
                outside.append(f"{where}: {match.group(0)}")
            for match in CITED.finditer(line):
                name = match.group(1)
                if "/" not in name and not name.startswith(("design", "metrics", "security")):
                    continue  # a bare file name (README.md, BENCHMARKS.md) is checked below
                cited += 1
                if not any(p.exists() for p in resolve(path, name)):
                    missing.append(f"{where}: {name}")
    for name in ("README.md", "BENCHMARKS.md"):
        assert (ROOT / name).exists(), name
    assert cited > 50, cited  # the docs are cited: a pattern that matched nothing proves nothing
    assert not outside, "citations of files outside the repository:\n" + "\n".join(outside[:40])
    assert not missing, "cited documents the repository lacks:\n" + "\n".join(missing[:40])


def test_the_protocol_notes_keep_the_section_numbers_the_code_cites() -> None:
    """A citation ``docs/protocols/<stack>.md §N`` names a section that file has."""
    sections: dict[str, set[str]] = {}
    for doc in (ROOT / "docs" / "protocols").glob("*.md"):
        sections[doc.name] = set(re.findall(r"^#+ §([\d.]+)", doc.read_text(), re.MULTILINE))
    assert {"gossip.md", "skipring.md", "chord.md", "brokertree.md", "relay.md"} <= set(sections)
    wrong: list[str] = []
    checked = 0
    cite = re.compile(r"protocols/([\w-]+\.md) §(\d+(?:\.\d+)*)")
    for path in tracked():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for doc, section in cite.findall(line):
                checked += 1
                have = sections.get(doc, set())
                # §4.2 is in the document if §4.2 or its section §4 is
                if section not in have and section.split(".")[0] not in have:
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: {doc} §{section}")
    assert checked > 50, checked
    assert not wrong, "sections the protocol notes do not have:\n" + "\n".join(wrong[:40])
