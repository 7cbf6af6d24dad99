"""Optional packages and the extras that install them (pyproject.toml's ``[project.optional-dependencies]``).

A plain ``pip install halyard`` simulates, schedules and runs agents. ``[fast]`` adds numba (the fabric's
compiled loops; without it the same loops run as Python, emulator/link_kernels.py) and ``[reports]`` adds
pyarrow and matplotlib (the tables of ``--out-dir``, ``halyard compare``'s report, the reproduction scripts).
A command that needs a missing one stops with one line naming the extra, not an ImportError's traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from halyard.datamodel import HalyardError

# Top-level module -> the extra that installs it.
EXTRA_OF = {"numba": "fast", "pyarrow": "reports", "matplotlib": "reports"}


class MissingExtra(HalyardError):
    """An optional package is not installed; the message names the extra to install (the CLI exits 2)."""

    def __init__(self, module: str, what: str) -> None:
        self.module = module
        self.extra = EXTRA_OF[module]
        super().__init__(f"{module} is not installed, and {what} needs it: pip install 'halyard[{self.extra}]'")


def require(module: str, what: str) -> ModuleType:
    """``module`` (one of :data:`EXTRA_OF`'s, or a submodule of one), imported; :class:`MissingExtra` naming
    its extra and ``what`` needs it when it is not installed. A module that is installed but fails to import
    raises as it would anyway: that is no missing extra."""
    top = module.partition(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != top:
            raise
        raise MissingExtra(top, what) from None


def require_reports(what: str) -> None:
    """Fail now, before a run, when the ``[reports]`` extra ``what`` needs is not installed."""
    for module in ("pyarrow", "matplotlib"):
        require(module, what)
