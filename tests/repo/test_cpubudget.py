"""The suite's CPU accounting (tests/support/cpubudget.py) counts what the suite's processes
spend: its own, what it reaped, and descendants still running, grandchildren included."""

from __future__ import annotations

import subprocess
import sys
import time

from support.cpubudget import loop_figure, tree_cpu

#: a child that spends about this much CPU, then waits for its standard input to close
BURN = 0.4
SPIN = (
    "import sys, time\n"
    f"end = time.process_time() + {BURN}\n"
    "while time.process_time() < end: pass\n"
    "print('spent', flush=True)\n"
    "sys.stdin.read()\n"
)


def test_a_reaped_child_is_counted() -> None:
    before = tree_cpu()
    subprocess.run([sys.executable, "-c", SPIN], input="", text=True, check=True)
    assert tree_cpu() - before >= BURN


def test_a_live_grandchild_is_counted_before_it_ends() -> None:
    """A grandchild still running (a JVM a test's command started, say) is read from /proc:
    its CPU counts before anyone reaps it."""
    before = tree_cpu()
    # a shell whose child spins, then both wait: the spinner is our grandchild
    shell = subprocess.Popen(
        ["sh", "-c", f'"{sys.executable}" -c "$0"; cat >/dev/null', SPIN],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert shell.stdout is not None and shell.stdout.readline().strip() == "spent"
        time.sleep(0.05)  # the spinner's last tick reaches /proc
        assert tree_cpu() - before >= BURN * 0.9
    finally:
        assert shell.stdin is not None
        shell.stdin.close()
        shell.wait(30)


def test_the_loop_figure_is_the_bare_loop() -> None:
    """The CPU of 10**7 additions (here one run, not the median of five): about the direct time."""
    started = time.process_time()
    exec("s = 0\nfor i in range(10**7): s += i", {})
    direct = time.process_time() - started
    figure = loop_figure(runs=1)
    assert 0.5 * direct <= figure <= 2.0 * direct, (figure, direct)
