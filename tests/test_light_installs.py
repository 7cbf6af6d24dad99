"""A plain install (no extras) runs: ``halyard simulate`` gives the same summary without numba, and a
command that needs an extra says which in one line (exit 2), never a traceback; ``halyard agent`` imports
nothing of the control plane (src/halyard/extras.py, emulator/link_kernels.py, cli/agent.py).

The optional packages are made unimportable in a child interpreter by a meta path finder that raises
ModuleNotFoundError for them, as a missing distribution does: the real processes, the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

OPTIONAL = ("numba", "pyarrow", "matplotlib")

# Runs `halyard ARGS...` with the modules in BLOCKED unimportable, printing whether the fabric's loops were
# compiled on stderr's last line.
WRAPPER = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(",")) - {""}

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
from halyard.cli import main
code = main(sys.argv[2:])
from halyard.emulator import link_kernels
print(f"compiled={link_kernels.COMPILED}", file=sys.stderr)
sys.exit(code)
"""


def halyard(blocked: tuple[str, ...], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WRAPPER, ",".join(blocked), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


# Wall-clock figures of the run itself, not of the schedule.
TIMINGS = ("avg_pass_ms", "p50_pass_ms", "p99_pass_ms", "max_pass_ms", "wall_s", "jobs_per_wall_s")


def schedule(path: Path) -> dict[str, object]:
    summary = json.loads(path.read_text(encoding="utf-8"))
    return {k: v for k, v in summary.items() if k not in TIMINGS}


def test_simulate_without_the_extras_gives_the_same_summary_to_the_last_bit(tmp_path):
    """The default trace puts jobs on shared links (the fabric's fair-sharing and mean-field loops run):
    without numba the same loops run as Python, and every float of the summary is the same."""
    plain = halyard(OPTIONAL, "simulate", "--no-progress", "--out", "plain.json", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.strip().splitlines()[-1] == "compiled=False"
    fast = halyard((), "simulate", "--no-progress", "--out", "fast.json", cwd=tmp_path)
    assert fast.returncode == 0, fast.stderr
    assert fast.stderr.strip().splitlines()[-1] == "compiled=True"
    got, want = schedule(tmp_path / "plain.json"), schedule(tmp_path / "fast.json")
    assert got["exposed_comm_s"] > 0  # the links were shared: the kernels ran
    assert got == want


def _one_line_naming(result: subprocess.CompletedProcess[str], extra: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1 and f"pip install 'halyard[{extra}]'" in errors[0], result.stderr


@pytest.mark.parametrize("missing", ["pyarrow", "matplotlib"])
def test_compare_without_reports_exits_2_naming_the_extra(tmp_path, missing):
    result = halyard((missing,), "compare", "--policies", "fifo,las", "--out-dir", "cmp", "--no-progress",
                     cwd=tmp_path)
    _one_line_naming(result, "reports")
    assert missing in result.stderr
    assert not (tmp_path / "cmp").exists()  # refused before anything ran


def test_simulate_out_dir_without_pyarrow_exits_2_before_the_run(tmp_path):
    result = halyard(OPTIONAL, "simulate", "--no-progress", "--out-dir", "run", cwd=tmp_path)
    _one_line_naming(result, "reports")
    assert not (tmp_path / "run").exists()


CONTROL_PLANE = ("halyard.controlplane", "halyard.scheduling", "halyard.policies",
                 "scipy", "pyarrow", "matplotlib", "numba")


def _heavy(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if m in CONTROL_PLANE or m.startswith(tuple(p + "." for p in CONTROL_PLANE)))


def test_the_agents_command_imports_nothing_of_the_control_plane():
    """`halyard agent --help` as a user runs it: every module it imports, as -X importtime lists them."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "halyard.cli", "agent", "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "--control-plane" in result.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")]
    assert "halyard.agent.base" in imported  # the command's own imports (importlib's own import goes unlisted)
    assert _heavy(imported) == []


def test_an_agents_backends_import_nothing_of_the_control_plane():
    """What a starting agent imports besides: its command, and the emulated and process backends."""
    probe = ("import sys, halyard.cli.agent, halyard.agent.emulated, halyard.agent.process\n"
             "print(','.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert _heavy(out.stdout.strip().split(",")) == []
