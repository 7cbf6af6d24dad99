"""Each job attempt's output on a node: one file, capped, read back by byte offset.

The process agent pipes a job's stdout and stderr (interleaved as written) through
:class:`CappedLog` into ``--work-dir/logs/JOB-ATTEMPT-NODE.log``. Offsets count every byte
the attempt ever wrote, so a reader that follows the output resumes where it stopped even
after the cap dropped old output: past ``max_bytes`` the file keeps its newest half and the
count of dropped bytes goes to a ``.dropped`` file beside it (a restarted agent still serves
the right offsets). The tail is what matters for a training job (the last losses, the error
it died with), so the oldest output is what goes.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

DEFAULT_MAX_BYTES = 64 << 20  # per attempt and node
READ_MAX_BYTES = 256 << 10  # one LogData message: well under the control plane's 1 MiB message limit


def open_dir(root: Path, *parts: str, create: bool = False) -> int:
    """A descriptor of the directory ``root/parts...``, each part opened relative to the one before without
    following a link (and made, mode 0755, where missing with ``create``): a link a job planted anywhere
    below ``root`` makes it fail (ELOOP or ENOTDIR) instead of leading outside. ``root`` itself is the
    agent's own (its --work-dir, resolved) and is opened as given. The caller closes the descriptor."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open(name: str, flags: int, dir_fd: int) -> int:
    """``name`` in the directory ``dir_fd``, never through a link (O_NOFOLLOW: a planted link fails with ELOOP)."""
    return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640, dir_fd=dir_fd)


def _write_new(name: str, data: bytes, dir_fd: int) -> None:
    """Write ``data`` to ``name`` in ``dir_fd`` through a fresh file renamed over it: whatever was there (a
    link included) is replaced, never written through."""
    partial = name + ".partial"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(partial, dir_fd=dir_fd)  # a planted .partial (a link too) goes; O_EXCL below makes a new file
    with os.fdopen(_open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, dir_fd), "wb") as new:
        new.write(data)
    os.replace(partial, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


class CappedLog:
    """An attempt's output file holding at most ``max_bytes`` of its newest output.

    Every file operation is relative to a descriptor of the log's directory, held from the
    start, and none follows a link: a job that swaps the directory, or plants a link at
    the log, its ``.partial`` or its ``.dropped`` file, cannot make the agent write (or
    read) outside it."""

    def __init__(self, path: Path, max_bytes: int = DEFAULT_MAX_BYTES, *, dir_fd: int | None = None) -> None:
        if max_bytes < 2:
            raise ValueError("max_bytes must be at least 2")
        self.path = path
        self.name = path.name
        self.max_bytes = max_bytes
        self.dropped = 0
        self.size = 0  # bytes in the file now
        self._dir = os.dup(dir_fd) if dir_fd is not None else open_dir(path.parent)
        try:
            self._fd = _open(self.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, self._dir)
        except BaseException:
            os.close(self._dir)
            raise
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_dropped_name(self.name), dir_fd=self._dir)

    @property
    def written(self) -> int:
        """Bytes the attempt has written in all: the offset the next byte will have."""
        return self.dropped + self.size

    def write(self, data: bytes) -> None:
        if self._fd < 0:
            return  # closed: the agent stopped the job; what its processes still print is not kept
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        self.size += len(data)
        if self.size > self.max_bytes:
            self._trim()

    def _trim(self) -> None:
        """Keep the newest half of the cap: the tail goes to a new file that replaces the old one."""
        keep = self.max_bytes // 2
        with os.fdopen(_open(self.name, os.O_RDONLY, self._dir), "rb") as old:
            old.seek(self.size - keep)
            tail = old.read()
        _write_new(self.name, tail, self._dir)
        os.close(self._fd)
        self._fd = _open(self.name, os.O_WRONLY | os.O_APPEND, self._dir)
        self.dropped += self.size - len(tail)
        self.size = len(tail)
        _write_new(_dropped_name(self.name), str(self.dropped).encode("ascii"), self._dir)

    def tail(self, chars: int) -> str:
        """The last ``chars`` characters of the output kept (read without following a link); "" if unreadable."""
        try:
            with os.fdopen(_open(self.name, os.O_RDONLY, self._dir), "rb") as f:
                f.seek(max(0, self.size - 4 * chars))  # UTF-8: at most 4 bytes a character
                return f.read().decode("utf-8", errors="replace")[-chars:]
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._dir >= 0:
            os.close(self._dir)
            self._dir = -1


def read_log(path: Path, offset: int, max_bytes: int = READ_MAX_BYTES, *,
             dir_fd: int | None = None) -> tuple[int, bytes]:
    """Up to ``max_bytes`` of the output from ``offset`` on: (the first byte's offset, the bytes).

    The offset returned is past the one asked for when the cap dropped that output. Both files
    are read relative to ``dir_fd`` (the log's directory; opened here from ``path`` without one)
    without following a link. FileNotFoundError when the attempt wrote no file here.
    """
    folder = os.dup(dir_fd) if dir_fd is not None else open_dir(path.parent)
    try:
        try:
            with os.fdopen(_open(_dropped_name(path.name), os.O_RDONLY, folder), "rb") as f:
                dropped = int(f.read(32).decode("ascii"))
        except (OSError, ValueError):  # none (nothing dropped yet), or not a count the agent wrote
            dropped = 0
        start = max(offset, dropped)
        with os.fdopen(_open(path.name, os.O_RDONLY, folder), "rb") as f:
            f.seek(start - dropped)
            return start, f.read(max_bytes)
    finally:
        os.close(folder)


def _dropped_name(name: str) -> str:
    return name + ".dropped"
