"""A node's stdout through a bounded buffer: a reader that stalls never stalls the node.

A node process writes a line per delivery (and per network event, and a stats line now and
then) to stdout: JSON lines for a program, text for the person at the shell. Written on the
event loop with blocking writes, a write blocks once the pipe's 64 KiB are full and nobody
reads them: the node then stops serving its peers as well (it stopped answering handshakes
after ~600 unread deliveries, while its peers still held it alive). So a line is never written
by a call that can block the event loop:

* **stdout a pipe or a socket** (a program reads the JSON lines): the descriptor is made
  non-blocking and a line goes straight to it while nothing is queued, one ``write(2)`` and no
  thread involved, as asyncio's pipe transports do; what the pipe cannot take now waits in the
  buffer, and a thread of its own waits for the reader (``poll(2)``) and writes it. Handing
  every line to a thread instead cost ~5% of a node's CPU in a busy cluster (two switches of the
  interpreter lock per line).
* **anything else** (a terminal, a file, a stream without a descriptor): every line goes to
  the buffer and the thread does the blocking writes.

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
import contextlib
import io
import os
import select
import stat
import threading
from collections.abc import Callable
from typing import TextIO

#: bytes of lines not yet taken by the reader past which droppable lines are dropped
DEFAULT_LIMIT = 1 << 20
#: bytes the writer thread hands to one write (a pipe takes 64 KiB at most at a time)
BATCH = 1 << 16


def _direct_descriptor(stream: TextIO) -> int | None:
    """``stream``'s descriptor if lines may be written to it directly without blocking: a pipe
    or a socket, open only there (stderr on the same pipe, as ``2>&1`` makes it, would share
    the non-blocking mode, and an error message could then fail on a full pipe)."""
    try:
        fd = stream.fileno()
        mode = os.fstat(fd)
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    if not (stat.S_ISFIFO(mode.st_mode) or stat.S_ISSOCK(mode.st_mode)):
        return None
    for other in (0, 2):
        if other == fd:
            continue
        try:
            shared = os.fstat(other)
        except OSError:
            continue
        if (shared.st_dev, shared.st_ino) == (mode.st_dev, mode.st_ino):
            return None
    return fd


class LineWriter:
    """Lines to ``stream`` from any thread without blocking the caller (module docstring).

    ``lagged(n)`` makes the line that tells the reader it missed ``n`` lines."""

    def __init__(
        self, stream: TextIO, lagged: Callable[[int], str], *, limit: int = DEFAULT_LIMIT
    ) -> None:
        self.stream = stream
        self.limit = limit
        self._lagged = lagged
        #: lines not yet written, encoded; the first may be written in part (``_offset``)
        self._lines: collections.deque[bytes] = collections.deque()
        self._offset = 0
        #: bytes queued or being written (the batch in the writer's hands included)
        self._pending = 0
        self._unsaid = 0
        #: lines dropped since the start
        self.dropped = 0
        #: lag episodes said to the reader
        self.episodes = 0
        self._closing = False
        #: the stream failed (the reader closed it): nothing more is written
        self.broken: str | None = None
        self._encoding = getattr(stream, "encoding", None) or "utf-8"
        self._fd = _direct_descriptor(stream)
        self._was_blocking = True
        if self._fd is not None:
            stream.flush()
            self._was_blocking = os.get_blocking(self._fd)
            os.set_blocking(self._fd, False)
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="pubmesh-stdout", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Bytes written by the node and not yet taken by the reader (beyond what the pipe
        itself holds)."""
        return self._pending

    @property
    def finished(self) -> bool:
        """Closed, and its thread has written everything (or given up on a broken stream)."""
        return self._closing and not self._thread.is_alive()

    def write(self, line: str, *, droppable: bool = False, end: str = "\n") -> bool:
        """Write or queue ``line`` and ``end`` (a newline unless told); False if dropped."""
        data = (line + end).encode(self._encoding, "backslashreplace")
        with self._cond:
            if self.broken is not None:
                return False
            if droppable and self._pending >= self.limit:
                self.dropped += 1
                self._unsaid += 1
                return False
            if self._fd is not None and not self._lines:
                try:
                    written = os.write(self._fd, data)
                except BlockingIOError:
                    written = 0
                except OSError as error:  # the reader closed the pipe
                    self._break(error)
                    return False
                if written == len(data):
                    return True
                data = data[written:]
            self._lines.append(data)
            self._pending += len(data)
            self._cond.notify_all()
        return True

    def _break(self, error: BaseException) -> None:
        """The stream failed: nothing more is written (call with the lock held)."""
        self.broken = str(error)
        self._lines.clear()
        self._offset = 0
        self._pending = 0
        self._cond.notify_all()

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            if self._fd is not None and self._was_blocking:
                with contextlib.suppress(OSError):  # closed by its owner meanwhile
                    os.set_blocking(self._fd, True)

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._lines and not self._closing:
                    self._cond.wait()
                if not self._lines:
                    return
                batch = self._batch()
            try:
                written = self._write(batch)
            except (OSError, ValueError) as error:  # a closed pipe, a closed file
                with self._cond:
                    self._break(error)
                return
            with self._cond:
                self._consume(written)
                if self._unsaid and self._pending < self.limit // 2:
                    # after the line being written, if one is half out: lines stay whole
                    self._lines.insert(1 if self._offset else 0, self._notice())
                self._cond.notify_all()

    def _notice(self) -> bytes:
        """The ``lagged`` line for the drops not said yet, counted as pending and as an
        episode (lock held); the caller queues it."""
        notice = (self._lagged(self._unsaid) + "\n").encode(self._encoding)
        self._unsaid = 0
        self.episodes += 1
        self._pending += len(notice)
        return notice

    def _batch(self) -> bytes:
        """The front of the queue, whole lines up to ``BATCH`` bytes (lock held)."""
        lines, size = [], 0
        for line in self._lines:
            lines.append(line)
            size += len(line)
            if size >= BATCH:
                break
        return b"".join(lines)[self._offset :]

    def _write(self, batch: bytes) -> int:
        """Write some of ``batch``, waiting as long as the reader takes; how much."""
        if self._fd is None:
            self.stream.write(batch.decode(self._encoding))
            self.stream.flush()
            return len(batch)
        poller = select.poll()
        poller.register(self._fd, select.POLLOUT)
        while True:
            try:
                return os.write(self._fd, batch)
            except BlockingIOError:
                poller.poll()

    def _consume(self, written: int) -> None:
        """``written`` bytes from the front of the queue reached the stream (lock held)."""
        self._pending -= written
        written += self._offset
        while self._lines and written >= len(self._lines[0]):
            written -= len(self._lines.popleft())
        self._offset = written

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until everything queued reached the stream; True if
        it did. The shell waits so before its first prompt: readline writes the prompt to the
        terminal itself, and a banner line still queued would be drawn through it."""
        with self._cond:
            return (
                self._cond.wait_for(lambda: not self._lines or self.broken is not None, timeout)
                and self.broken is None
            )

    def close(self, timeout: float) -> bool:
        """Write what is queued (a last ``lagged`` line too) within ``timeout`` seconds; True
        if everything reached the stream."""
        with self._cond:
            if self._unsaid and self.broken is None:
                self._lines.append(self._notice())
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive() and self.broken is None
