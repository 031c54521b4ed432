"""A node's stdout through a bounded buffer: a reader that stalls never stalls the node.

A node process writes a line per delivery (and per network event, and a stats line now and
then) to stdout: JSON lines for a program, text for the person at the shell. Written on the
event loop, a write blocks once the pipe's 64 KiB are full and nobody reads them: the node
then stops serving its peers as well (it stopped answering handshakes after ~600 unread
deliveries, while its peers still held it alive). So the event loop only appends lines to a
buffer here, and a writer thread does the blocking writes.

The rule, as iroh-gossip's ``Lagged`` and NATS's slow consumers have it: the buffer holds at
most ``limit`` bytes (1 MiB) of lines the reader has not taken. Past it, *droppable* lines
(deliveries, network events, periodic stats) are dropped, newest first, and counted; answers
to commands, ``ready`` and ``bye`` are never dropped (there are as many as the reader asked
for). Once the reader has caught up (the buffer is under half the limit), one ``lagged`` line
says how many lines it missed, the first line of that episode to reach it. Every drop is also
counted in :attr:`LineWriter.dropped` (``stats`` shows it).

At the end :meth:`LineWriter.close` waits a bounded time for the reader; a reader that never
comes back cannot keep the process from exiting.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import TextIO

#: bytes of lines not yet taken by the reader past which droppable lines are dropped
DEFAULT_LIMIT = 1 << 20


class LineWriter:
    """Lines to ``stream`` from any thread, written by a thread of its own (module docstring).

    ``lagged(n)`` makes the line that tells the reader it missed ``n`` lines."""

    def __init__(
        self, stream: TextIO, lagged: Callable[[int], str], *, limit: int = DEFAULT_LIMIT
    ) -> None:
        self.stream = stream
        self.limit = limit
        self._lagged = lagged
        self._lines: collections.deque[str] = collections.deque()
        #: characters queued or being written (the batch in the writer's hands included)
        self._pending = 0
        self._unsaid = 0
        #: lines dropped since the start
        self.dropped = 0
        #: lag episodes said to the reader
        self.episodes = 0
        self._closing = False
        #: the stream failed (the reader closed it): nothing more is written
        self.broken: str | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="pubmesh-stdout", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Characters written by the node and not yet taken by the reader."""
        return self._pending

    @property
    def finished(self) -> bool:
        """Closed, and its thread has written everything (or given up on a broken stream)."""
        return self._closing and not self._thread.is_alive()

    def write(self, line: str, *, droppable: bool = False, end: str = "\n") -> bool:
        """Queue ``line`` and ``end`` (a newline unless told); False if it was dropped."""
        text = line + end
        with self._cond:
            if self.broken is not None:
                return False
            if droppable and self._pending >= self.limit:
                self.dropped += 1
                self._unsaid += 1
                return False
            self._lines.append(text)
            self._pending += len(text)
            self._cond.notify()
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._lines and not self._closing:
                    self._cond.wait()
                if not self._lines:
                    return
                batch = "".join(self._lines)
                self._lines.clear()
            try:
                self.stream.write(batch)
                self.stream.flush()
            except (OSError, ValueError) as error:  # a closed pipe, a closed file
                with self._cond:
                    self.broken = str(error)
                    self._lines.clear()
                    self._pending = 0
                    self._cond.notify_all()
                return
            with self._cond:
                self._pending -= len(batch)
                if self._unsaid and self._pending < self.limit // 2:
                    notice = self._lagged(self._unsaid) + "\n"
                    self._unsaid = 0
                    self.episodes += 1
                    self._lines.appendleft(notice)
                    self._pending += len(notice)
                self._cond.notify_all()

    def close(self, timeout: float) -> bool:
        """Write what is queued (a last ``lagged`` line too) within ``timeout`` seconds; True
        if everything reached the stream."""
        with self._cond:
            if self._unsaid and self.broken is None:
                notice = self._lagged(self._unsaid) + "\n"
                self._unsaid = 0
                self.episodes += 1
                self._lines.append(notice)
                self._pending += len(notice)
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive() and self.broken is None
