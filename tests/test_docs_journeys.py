"""Every command block of README.md and docs/*.md that a user is meant to copy runs, as a user runs it.

Issue 33: a newcomer copied the docs' journeys into a fresh clone, and several did not work
(the client-test example outside this repository, the dashboard quick start without
``--insecure``, a path to ``../shared``). This test extracts the fenced ``sh`` and
``python`` blocks of README.md and docs/*.md and runs each one, in document order, in a
temporary directory that stands for a fresh clone, against the installed package; it checks
the exit status and the key lines each block prints. The convention that marks blocks
(``<!-- norun: reason -->`` and the others) is in README.md, "Docs that run".

How it stands in for a fresh clone, cheaply:

* The directory holds a symbolic link to each top-level entry of the checkout (``src``,
  ``examples``, ``deploy``, ...), so paths such as ``examples/train_numpy.py`` resolve as in
  a clone, and ``.venv`` links to the environment this test runs in (``sys.prefix``), where
  the package is already installed. The README's first command (make a venv, ``pip install
  -e .``) is simulated by dropping its ``python3 -m venv .venv && .venv/bin/pip install ...
  &&`` prefix (:data:`SETUP`): the rest of the line runs. The venv's ``bin`` leads ``PATH``,
  as in a shell that activated it (the operations pages call plain ``halyard``).
* The fixed ports of the examples (50051, 50052, 8080) are replaced by free ones
  (:func:`free_ports`), so a run cannot collide with another process on the machine; client
  commands that rely on the default address find the moved one in ``HALYARD_CONTROL_PLANE``.
* A ``sh`` block runs under ``bash -e -o pipefail`` in its own process group, under a
  timeout; whatever it left running (the daemons a block starts with ``&``) is stopped when it
  ends. A ``python`` block that defines ``test_`` functions runs under pytest (with the
  temporary directory as pytest's root, so none of this repository's settings apply: that is
  what a user's own project sees); any other ``python`` block runs as a script.

Blocks of one page share their directory, in order, as a reader following the page would.
The whole run takes about a minute on two cores; a block worth more than a few seconds says
so with ``<!-- slow -->`` and skips when ``HALYARD_SKIP_SLOW_JOURNEYS=1``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
         *sorted((REPO / "docs" / "reproductions").glob("*.md"))]
RUNNABLE = ("sh", "python")  # info strings of blocks a user copies; toml, tables and listings are not run
DEFAULT_TIMEOUT_S = 60.0
# The README's first command makes a venv and installs the package into it: already done here.
SETUP = re.compile(r"python3 -m venv \.venv && \.venv/bin/pip install [^&]*&& ")
PORTS = ("50051", "50052", "8080")  # the examples' fixed ports, each replaced by a free one
DIRECTIVE = re.compile(r"^<!--\s*(norun|expect|exit|timeout|slow|needs)\b:?\s*(.*?)\s*-->$")
NOT_IN_CLONE = {".git", ".venv", "out", "halyard.egg-info", "certs", "state.db", "tokens.json"}


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    norun: str | None = None
    expect: list[str] = field(default_factory=list)
    exit: int = 0
    timeout_s: float = DEFAULT_TIMEOUT_S
    slow: bool = False
    needs: list[str] = field(default_factory=list)  # commands it calls that a machine may lack (curl)

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks, each with the directives in the HTML comments right above it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^```\s*(\S*)", lines[i])
        if not fence:
            i += 1
            continue
        start = i
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        block = Block(page, start + 1, fence.group(1), "\n".join(lines[start + 1:end]) + "\n")
        j = start - 1
        while j >= 0 and (directive := DIRECTIVE.match(lines[j].strip())):
            kind, value = directive.groups()
            if kind == "norun":
                block.norun = value
            elif kind == "expect":
                block.expect.append(value)
            elif kind == "exit":
                block.exit = int(value)
            elif kind == "timeout":
                block.timeout_s = float(value)
            elif kind == "needs":
                block.needs += value.split()
            else:
                block.slow = True
            j -= 1
        found.append(block)
        i = end + 1
    return found


ALL = [b for page in PAGES for b in blocks(page) if b.lang in RUNNABLE]


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def clones(tmp_path_factory) -> dict[Path, Path]:
    """One fresh-clone stand-in per page (created on first use), shared by the page's blocks."""
    return {}


def clone_for(page: Path, clones: dict[Path, Path], tmp_path_factory) -> Path:
    if page not in clones:
        root = tmp_path_factory.mktemp(page.stem.replace(".", "-"))
        for entry in REPO.iterdir():
            if entry.name not in NOT_IN_CLONE and not entry.name.startswith("."):
                (root / entry.name).symlink_to(entry)
        (root / ".venv").symlink_to(Path(sys.prefix))
        clones[page] = root
    return clones[page]


def environment(root: Path, ports: dict[str, int]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HALYARD_", "PYTEST_"))}
    # Client commands without --control-plane dial 127.0.0.1:50051, moved here with the port.
    env["HALYARD_CONTROL_PLANE"] = f"127.0.0.1:{ports['50051']}"
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = sys.prefix
    env["COLUMNS"] = "160"  # the summary tables' key lines, unwrapped
    env["HOME"] = str(root)  # nothing of the user's own configuration
    return env


def prepare(block: Block) -> tuple[str, dict[str, int]]:
    """The block's text as it runs here (module docstring), and the free port that stands for each fixed one."""
    text = SETUP.sub("", block.text)
    ports = dict(zip(PORTS, free_ports(len(PORTS)), strict=True))
    for port, free in ports.items():
        text = re.sub(rf"(?<=[:\s]){port}\b", str(free), text)
    return text, ports


def run_block(block: Block, root: Path) -> subprocess.CompletedProcess[str]:
    text, ports = prepare(block)
    if block.lang == "python" and re.search(r"^(async )?def test_", text, re.M):
        path = root / f"test_journey_{block.line}.py"
        path.write_text(text, encoding="utf-8")
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root),
                "-c", os.devnull, str(path)]
    elif block.lang == "python":
        argv = [sys.executable, "-c", text]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", text]
    # Output to a file, not a pipe: daemons the block leaves in the background keep a pipe open.
    log = root / f".journey-{block.line}.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, cwd=root, env=environment(root, ports), stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=block.timeout_s)
        except subprocess.TimeoutExpired:
            stop_group(proc.pid)
            pytest.fail(f"{block.name}: still running after {block.timeout_s:g} s:\n{log.read_text()[-4000:]}")
        finally:
            stop_group(proc.pid)  # the daemons the block started in the background
    return subprocess.CompletedProcess(argv, proc.returncode, log.read_text(errors="replace"), "")


def stop_group(pgid: int) -> None:
    """SIGTERM to what the block left running (daemons leave cleanly on it), SIGKILL after a grace."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


@pytest.mark.parametrize("block", ALL, ids=[b.name for b in ALL])
def test_docs_journey(block: Block, clones, tmp_path_factory):
    if block.norun is not None:
        assert block.norun, f"{block.name}: <!-- norun: --> needs a reason"
        pytest.skip(f"norun: {block.norun}")
    if block.slow and os.environ.get("HALYARD_SKIP_SLOW_JOURNEYS") == "1":
        pytest.skip("slow (HALYARD_SKIP_SLOW_JOURNEYS=1)")
    if missing := [tool for tool in block.needs if shutil.which(tool) is None]:
        pytest.skip(f"needs {', '.join(missing)}, which this machine lacks")
    proc = run_block(block, clone_for(block.page, clones, tmp_path_factory))
    shown = f"{block.name} exited {proc.returncode}:\n{proc.stdout[-6000:]}"
    assert proc.returncode == block.exit, shown
    assert "Traceback (most recent call last)" not in proc.stdout, shown
    for text in block.expect:
        assert text in proc.stdout, f"{block.name}: expected {text!r} in its output\n{shown}"


def test_every_runnable_block_runs_or_says_why_not():
    """The convention holds: most blocks run; each one that does not gives a reason."""
    runs = [b for b in ALL if b.norun is None]
    assert len(runs) >= 10, [b.name for b in runs]
    assert all(b.norun for b in ALL if b.norun is not None)


def test_the_readme_client_example_is_tests_test_client_example():
    """The README's client-test example is tests/test_client_example.py, byte for byte: CI runs it here (this
    repository's settings) and, through test_docs_journey, in a directory of its own (a user's project)."""
    example = next(b for b in blocks(REPO / "README.md") if b.lang == "python")
    assert example.text == (REPO / "tests" / "test_client_example.py").read_text(encoding="utf-8")


def test_directives_are_read():
    """A block's directives are the HTML comments right above its fence (the parser can fail)."""
    page = REPO / "tests" / "data" / "journey_directives.md"
    found = blocks(page)
    assert [(b.lang, b.norun, b.expect, b.exit, b.slow, b.needs) for b in found] == [
        ("sh", "starts a daemon", [], 0, False, []),
        ("sh", None, ["halyard", "usage"], 2, True, ["curl", "jq"]),
        ("python", None, [], 0, False, []),
    ]
