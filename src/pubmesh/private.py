"""Files only their owner can read, written only where they are named.

A run directory holds what the wire encrypts: topics, attributes, who subscribed to what and
when. A key file holds a secret. So pubmesh makes every run directory (and the directories
in it) ``0700`` and every file it writes there ``0600``, whatever the umask; and it never writes
*through* a link: a file it replaces is replaced by a new one renamed over the name, so a
symbolic or hard link planted at that name is replaced, never followed. docs/security.md
("Files") says the same for users.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from pubmesh.errors import UserError

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """``path`` (and missing parents) made if needed and left ``0700`` when it is ours.

    Parents keep the mode the umask gives them: only the directory named is the run's. A
    directory of another user's is left alone (``chmod`` would fail; the files we write in it
    are ``0600`` still)."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != DIR_MODE:
        os.chmod(path, DIR_MODE)
    return path


def private_file(path: Path) -> None:
    """An existing file of ours made ``0600`` (a file a library created with the umask's mode)."""
    os.chmod(path, FILE_MODE)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def replace_file(path: Path, data: bytes, *, mode: int = FILE_MODE) -> None:
    """Write ``data`` as the file ``path`` with ``mode``: a new file in the same directory,
    renamed over ``path``. A link at ``path`` is replaced, its target never written; a reader
    sees the old file or the whole new one. OSError on failure (callers name the file)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        try:
            os.fchmod(fd, mode)
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_new(path: Path, data: bytes, *, force: bool, mode: int = FILE_MODE) -> None:
    """``path`` written with ``mode`` unless it exists (then, without ``force``, a UserError
    naming it). With ``force`` the old file (or a link at its name) is replaced, not written
    through. UserError names the file on any failure."""
    try:
        if not force:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            try:
                os.fchmod(fd, mode)
                _write_all(fd, data)
            finally:
                os.close(fd)
        else:
            replace_file(path, data, mode=mode)
    except FileExistsError:
        raise UserError(f"{path}: exists; pass --force to replace it") from None
    except OSError as error:
        raise UserError(f"{path}: cannot write it ({error.strerror})") from None


def append_line(path: Path, line: str) -> None:
    """``line`` appended to the file ``path`` (made ``0600`` if missing, never through a
    symbolic link). OSError on failure (callers name the file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, FILE_MODE)
    try:
        _write_all(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def write_text(path: Path, text: str) -> None:
    """A run's own file (``run.json``, a configuration it prints): ``0600``, replaced whole."""
    replace_file(path, text.encode())


def refuse_open_directory(path: Path, what: str, remedy: str, *, mask: int = 0o022) -> None:
    """A UserError unless ``path`` is a directory of ours with none of ``mask``'s mode bits:
    0o022 (the default) lets a group or others read it, not plant a file or swap one; 0o077
    keeps them out. ``what`` says what it holds, ``remedy`` what to do."""
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise UserError(f"{path}: not a directory ({what})")
    if info.st_uid != os.getuid() or info.st_mode & mask:
        kind = "open to others" if mask & 0o044 else "writable by others"
        raise UserError(
            f"{path}: owned by another user or {kind} (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"{what}: {remedy}"
        )
