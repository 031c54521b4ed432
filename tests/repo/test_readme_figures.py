"""The README's times are the ones measured for the commands it shows.

The README once promised "~10 s" for `pubmesh analyze` beside its own 1,000-node run, a
figure measured on a 200-node run. Every time the README's warm-Spark block states (a number
of seconds in its commands' comments) must be one that BENCHMARKS.md's row "the README's
analysis path" records, and the loop figure the README gives must be that row's.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROW = "| the README's analysis path:"


def _block() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("**A warm Spark for the iteration loop.**")
    fence = text.index("```sh", start)
    return text[fence : text.index("```", fence + 5)]


def test_the_readmes_analysis_times_are_benchmarks_figures() -> None:
    rows = [
        line for line in (ROOT / "BENCHMARKS.md").read_text().splitlines() if line.startswith(ROW)
    ]
    assert len(rows) == 1, rows
    row = rows[0]
    said = re.findall(r"(\d+(?:\.\d+)?) s\b", _block())
    assert len(said) >= 4, _block()  # start, warm-up, warm call, embedded
    missing = [f"{s} s" for s in said if f"{s} s" not in row]
    assert not missing, f"README times not in BENCHMARKS.md's row: {missing}\n{row}"
    readme = (ROOT / "README.md").read_text()
    loop = re.search(r"took (\d\.\d\d) s \(BENCHMARKS\.md, \"the README's analysis path\"", readme)
    assert loop is not None, "the README names the loop figure of its times"
    assert f"loop figure {loop[1]} s" in row, (loop[1], row)
