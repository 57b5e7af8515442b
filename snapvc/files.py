"""Writing the ordinary files snapvc makes (``snapvc checkout -o``, ``fsck --salvage``):
all at once or not at all.

A file is never rewritten in place: the new bytes go to a new file in the same folder,
are flushed to disk, and the new file is renamed over the old one, which is atomic. A
reader, a crash or a full disk finds the old content or the new, never a truncated mix,
and a failed write leaves no temporary file behind.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

__all__ = ["write_atomically"]


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Make the file at ``path`` hold ``data`` (see the module docstring). A symbolic
    link keeps pointing where it did: its target is replaced. A path that exists and is
    not a regular file (a named pipe, ``/dev/null``), or names a file some process has
    open (``/dev/stdout``, ``/proc/self/fd/1``), is written directly: there is nothing
    there to keep, and renaming over it would replace the device or the other file.

    An ``OSError`` names ``path``, whatever file the system call was about: the
    temporary file is an implementation detail.
    """
    try:
        target = _link_target(os.fspath(path))
        mode = None if target is None or not target.exists() else target.stat().st_mode
        if target is None or (mode is not None and not stat.S_ISREG(mode)):
            # Appending: a pipe or a device has no content to cut; the file behind
            # '/dev/stdout >> log' has, and the shell asked to keep it.
            with open(path, "ab") as out:
                out.write(data)
            return
        _replace(target, data, None if mode is None else stat.S_IMODE(mode))
    except OSError as exc:
        exc.filename, exc.filename2 = os.fspath(path), None
        raise


def _link_target(path: str) -> Path | None:
    """The file ``path`` names once its symbolic links are followed; None when a link
    goes through ``/proc`` (``/dev/stdout`` -> ``/proc/self/fd/1``): that names a file
    a process has open, to be written where it is."""
    here = os.path.abspath(path)
    for _ in range(40):  # the system's own limit on links followed is of this order
        here = os.path.join(os.path.realpath(os.path.dirname(here)), os.path.basename(here))
        if here == "/proc" or here.startswith("/proc/"):
            return None
        if not os.path.islink(here):
            return Path(here)
        here = os.path.join(os.path.dirname(here), os.readlink(here))
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)


def _replace(target: Path, data: bytes, mode: int | None) -> None:
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    # O_EXCL: a new file of our own, never one another process made; 0o666 lets the
    # umask decide the mode of a new file, as for any file a program creates.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            if mode is not None:
                os.chmod(temporary, mode)  # replacing a file keeps its permissions
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _sync_folder(target.parent)


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable: on POSIX it lives in the folder's entry list."""
    if not hasattr(os, "O_DIRECTORY"):  # Windows: a folder cannot be opened, nor needs to be
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
