"""No stale figure can land (issue 35, item 6): every reproduction page is its script's rendering of its JSON.

Each ``benchmarks/reproduce_*.py`` (and the EasyScale side-by-side) has a ``pages(docs)`` function that
renders, from the JSON stored in ``docs/``, the text of every page the script writes, without
simulating anything. A page edited by hand, or a JSON regenerated without its page (or the other way
round), makes the committed text differ from the rendering, and this test fails. Fast: no simulation.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "reproductions"
SCRIPTS = ("reproduce_synergy", "reproduce_dally", "reproduce_cassini", "reproduce_crius", "reproduce_easyscale",
           "easyscale_public_perjob", "dally_public_perjob", "simulator_cost", "tiresias_public_perjob",
           "gavel_public_perjob", "pollux_public_perjob",
           "forecast_accuracy", "whole_trace", "gpu_predicted_vs_measured")
# A topic page with a generated block stays in docs/ with its JSON (move_repro.sh's KEEP).
KEPT_IN_DOCS = ('forecast_accuracy', 'gpu_predicted_vs_measured')


def docs_of(name: str) -> Path:
    """Where script ``name``'s pages and JSON live."""
    return ROOT / "docs" if name in KEPT_IN_DOCS else DOCS


def script(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (the folder is not a package)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(f"_pages_{name}", ROOT / "benchmarks" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the script runs
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def stale(name: str, docs: Path) -> dict[str, str]:
    """Page name -> a diff, for each page of ``docs`` that differs from what script ``name`` renders."""
    out = {}
    for path, text in script(name).pages(docs).items():
        committed = path.read_text(encoding="utf-8") if path.is_file() else ""
        if committed != text:
            out[path.name] = "".join(list(difflib.unified_diff(committed.splitlines(True), text.splitlines(True),
                                                               f"committed {path.name}", f"rendered by {name}"))[:40])
    return out


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_page_is_its_json_rendered(name: str) -> None:
    assert script(name).pages(docs_of(name)), f"{name}.pages() rendered nothing from {DOCS}"
    found = stale(name, docs_of(name))
    assert not found, (f"{sorted(found)} differ from what {name}.py renders from their JSON; regenerate them "
                       "(the script's run, or its render from the stored JSON), do not edit them by hand:\n"
                       + "\n".join(found.values()))


def test_every_reproduction_json_has_a_renderer() -> None:
    """A new reproduction JSON in docs/ must come with a page its script renders (or this list grows)."""
    covered = {p for name in SCRIPTS for p in script(name).pages(docs_of(name))}
    stems = {p.name.removesuffix("-table.md").removesuffix(".md") for p in covered}
    for stored in sorted(DOCS.glob("*.json")):
        assert stored.stem in stems, f"{stored.name}: no script in {SCRIPTS} renders a page from it"


def test_a_hand_edited_figure_is_caught(tmp_path: Path) -> None:
    """The check can fail: one figure typed into a committed page, and the page is reported stale."""
    for path in DOCS.glob("crius-reproduction.*"):
        (tmp_path / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    page = DOCS / "crius-reproduction-table.md"
    text = page.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| crius |"))
    cells = row.split(" | ")
    cells[1] = f"{float(cells[1]) + 0.01:.2f}"
    (tmp_path / page.name).write_text(text.replace(row, " | ".join(cells)), encoding="utf-8")
    assert set(stale("reproduce_crius", tmp_path)) == {page.name}
