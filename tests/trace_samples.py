"""Where the trace samples are: bundled in the package, or in the workspace's shared/ folder."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

BUNDLED = Path(str(resources.files("halyard.data") / "traces"))
# The workspace keeps the full files (and the Alibaba v2023 pod list, which may not be
# redistributed) next to the repository: read them in place, skip when absent.
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


def shared(name: str) -> Path:
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} is not present")
    return path


def write(tmp_path: Path, name: str, lines: list[str], *, end: str = "\n") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + end, encoding="utf-8")
    return path
