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


def _open(path: Path, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW, 0o640)  # never through a link planted in the work dir


class CappedLog:
    """An attempt's output file holding at most ``max_bytes`` of its newest output."""

    def __init__(self, path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 2:
            raise ValueError("max_bytes must be at least 2")
        self.path = path
        self.max_bytes = max_bytes
        self.dropped = 0
        self.size = 0  # bytes in the file now
        self._fd = _open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with contextlib.suppress(FileNotFoundError):
            _dropped_path(path).unlink()

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
        with os.fdopen(_open(self.path, os.O_RDONLY), "rb") as old:
            old.seek(self.size - keep)
            tail = old.read()
        partial = self.path.with_name(self.path.name + ".partial")
        fd = _open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "wb") as new:
            new.write(tail)
        os.replace(partial, self.path)
        os.close(self._fd)
        self._fd = _open(self.path, os.O_WRONLY | os.O_APPEND)
        self.dropped += self.size - len(tail)
        self.size = len(tail)
        _dropped_path(self.path).write_text(str(self.dropped), encoding="ascii")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_log(path: Path, offset: int, max_bytes: int = READ_MAX_BYTES) -> tuple[int, bytes]:
    """Up to ``max_bytes`` of the output from ``offset`` on: (the first byte's offset, the bytes).

    The offset returned is past the one asked for when the cap dropped that output.
    FileNotFoundError when the attempt wrote no file here.
    """
    try:
        dropped = int(_dropped_path(path).read_text(encoding="ascii"))
    except (FileNotFoundError, ValueError):
        dropped = 0
    start = max(offset, dropped)
    with os.fdopen(_open(path, os.O_RDONLY), "rb") as f:
        f.seek(start - dropped)
        return start, f.read(max_bytes)


def _dropped_path(path: Path) -> Path:
    return path.with_name(path.name + ".dropped")
