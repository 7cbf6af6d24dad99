"""One control plane per SQLite state file: an advisory lock beside the database.

Two control planes on one ``--db`` would each restore the state and each schedule it:
two schedulers dispatching the same jobs to the same agents. ``halyard
controlplane`` therefore takes an exclusive ``flock`` on ``DB.lock`` before it opens the
database and holds it for its whole life. The lock file says who holds it (host and pid),
so the second process can name the holder when it refuses to start.

Why ``flock`` on a separate file, and not SQLite's own locking or a pid file:

* the kernel drops a ``flock`` when the holding process dies, ``kill -9`` included, so a
  restart after a crash is never blocked by a stale lock (a pid file would need guessing
  whether the pid is still ours);
* SQLite's locks last one transaction, not a process's life;
* the lock is taken on its own file, never on the database, so readers that open the
  database (``sqlite3``, backups, tests) are not affected.

``flock`` is local to one machine: on a network file system it may not exclude a process on
another host (and SQLite itself corrupts there), which is why high availability goes through
PostgreSQL (:mod:`halyard.controlplane.leadership`), not a shared SQLite file.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from halyard.datamodel import HalyardError

__all__ = ["StoreLock", "StoreLocked", "lock_path"]


class StoreLocked(HalyardError):
    """Another live process holds the state file; the message names the file and the holder."""


def lock_path(db: str | Path) -> Path:
    """The lock file of a state database: ``state.db`` -> ``state.db.lock``."""
    return Path(f"{db}.lock")


class StoreLock:
    """An exclusive, process-lifetime lock on a state database (``acquire`` ... ``release``).

    The open file stays open while held; closing it (or the process ending, however it ends)
    releases the lock. The lock file is never deleted: deleting it while another process
    waits to open it would let two processes hold locks on two different files.
    """

    def __init__(self, db: str | Path) -> None:
        self.db = str(db)
        self.path = lock_path(db)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise :class:`StoreLocked` at once (never waits)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreLocked(f"{self.db}: cannot open its lock file {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd) or "a process that has not written its name yet"
            os.close(fd)
            raise StoreLocked(f"{self.db}: the state database is in use by another control plane ({holder}); "
                              f"stop that one first, or give this one another --db (lock file {self.path})") from None
        except OSError as exc:
            os.close(fd)
            raise StoreLocked(f"{self.db}: cannot lock {self.path}: {exc.strerror}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"host {socket.gethostname()}, pid {os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StoreLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 256, 0).decode(errors="replace").strip()
    except OSError:
        return ""
