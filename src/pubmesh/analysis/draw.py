"""Static charts drawn in a child process with a deadline: ``--static`` reports' PNGs.

Kaleido draws a Plotly figure in headless Chromium. Each figure's drawing has Kaleido's own
timeout, but starting the browser has none: a Chromium that never answers its first DevTools
message hung a report for good (once in three runs of the test suite on one machine). The
figures are handed to a child process (``python -m pubmesh.analysis.draw SPEC``) in a session
of its own; if it has not finished within ``DEADLINE`` seconds, the child and every process
below it (the browser, in a session of its own) are killed and the drawing tried once more;
a second failure is one line for the user, not a hang.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

#: seconds one attempt may take (a report of a sweep draws a few dozen charts in 10-20 s)
DEADLINE = 150.0
#: attempts before giving up
ATTEMPTS = 2


class DrawError(Exception):
    """Chromium could not draw the charts: one line saying why."""


def draw(
    figures: Sequence[str], paths: Sequence[Path], width: int, scale: int, browser: str
) -> None:
    """Write each figure (Plotly JSON) as a PNG at the path beside it, or raise DrawError."""
    with tempfile.TemporaryDirectory(prefix="pubmesh-draw-") as tmp:
        spec = Path(tmp) / "spec.json"
        spec.write_text(
            json.dumps(
                {
                    "figures": list(figures),
                    "paths": [str(p) for p in paths],
                    "width": width,
                    "scale": scale,
                }
            )
        )
        env = {**os.environ, "BROWSER_PATH": browser}
        problem = ""
        for _ in range(ATTEMPTS):
            child = subprocess.Popen(
                [sys.executable, "-m", "pubmesh.analysis.draw", str(spec)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
            )
            try:
                _, err = child.communicate(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                _kill_session(child)
                problem = f"Chromium did not finish within {DEADLINE:.0f} s"
                continue
            finally:
                _kill_session(child)  # what is left of its process group
            if child.returncode == 0:
                return
            lines = err.decode(errors="replace").strip().splitlines()
            problem = lines[-1] if lines else f"the drawing process exited {child.returncode}"
        raise DrawError(problem)


def _kill_session(child: subprocess.Popen[bytes]) -> None:
    """Kill the child and everything it started: its own session, and the browser's (which
    choreographer starts in a session of its own)."""
    for pid in [child.pid, *_descendants(child.pid)]:
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, signal.SIGKILL)
    child.wait()


def _descendants(root: int) -> list[int]:
    """The processes below ``root`` (read from /proc; none where there is no /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for pid in parents.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found


def main(argv: Sequence[str]) -> int:
    import plotly.io as pio

    spec = json.loads(Path(argv[0]).read_text())
    figures = [pio.from_json(text) for text in spec["figures"]]
    try:
        pio.write_images(
            figures, spec["paths"], format="png", width=spec["width"], scale=spec["scale"]
        )
    except Exception as error:  # the parent reports the last line
        text = str(error).strip()
        print(text.splitlines()[0] if text else type(error).__name__, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
