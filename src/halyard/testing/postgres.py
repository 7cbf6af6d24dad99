"""A throwaway PostgreSQL server for tests and benchmarks: ``initdb`` and ``pg_ctl`` in a temporary directory.

The server listens on a loopback port and a Unix socket inside its own directory, trusts local
connections (nothing outside the machine can reach it), and is stopped and deleted at the end. The
binaries come from the distribution's ``postgresql`` package (``/usr/lib/postgresql/*/bin``);
:func:`find_binaries` says why not when they are absent, so a test can skip naming the reason.
``initdb`` refuses to run as root, so under root (CI) the server runs as the ``postgres`` user
that the package creates.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PostgresServer", "find_binaries", "postgres_server"]

START_TIMEOUT_S = 60.0
SERVER_USER = "postgres"  # created by Debian's postgresql-common


def find_binaries() -> tuple[Path | None, str]:
    """The newest ``bin`` folder holding initdb and pg_ctl, or None and why not."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent, ""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).parent, ""
    return None, "PostgreSQL server binaries (initdb, pg_ctl) are not installed: apt-get install postgresql"


@dataclass
class PostgresServer:
    bin: Path
    root: Path
    port: int
    user: str | None  # the OS user the server runs as (None: this process's)
    _created: int = 0

    @property
    def url(self) -> str:
        return self.url_of("postgres")

    def url_of(self, database: str) -> str:
        return f"postgresql://halyard@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; its URL."""
        import psycopg

        self._created += 1
        name = f"{prefix}{self._created}_{os.getpid()}"
        with psycopg.connect(self.url, autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{name}"')
        return self.url_of(name)

    def _run(self, *argv: str, timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        command = [*(["runuser", "-u", self.user, "--"] if self.user else []), *argv]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)

    def start(self) -> None:
        data = self.root / "data"
        done = self._run(str(self.bin / "initdb"), "-D", str(data), "-U", "halyard", "-A", "trust",
                         "--no-sync", "-E", "UTF8", "--locale", "C")
        if done.returncode:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()}")
        # fsync off: these servers hold test data only, and a crash of the server is not what they test.
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
                   "-c max_connections=200 -c shared_buffers=32MB")
        done = self._run(str(self.bin / "pg_ctl"), "-D", str(data), "-l", str(self.root / "server.log"),
                         "-o", options, "-w", "-t", str(int(START_TIMEOUT_S)), "start")
        if done.returncode:
            log = (self.root / "server.log").read_text(errors="replace") if (self.root / "server.log").exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {log[-2000:]}")

    def stop(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop",
                  timeout=30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Start a throwaway server; stop it and delete its files afterwards."""
    bin_dir, why = find_binaries()
    if bin_dir is None:
        raise FileNotFoundError(why)
    user = None
    root = Path(tempfile.mkdtemp(prefix="halyard-pg-"))
    if os.geteuid() == 0:
        user = SERVER_USER
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    server = PostgresServer(bin_dir, root, _free_port(), user)
    try:
        server.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # pg_ctl -w waited for the socket; a connection proves it
            try:
                with socket.create_connection(("127.0.0.1", server.port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
