"""Every relative link of README.md and docs/ leads somewhere: the file exists, and a ``#section`` is a heading of it.

Pages move (the decision record left docs/architecture.md for docs/decisions/; reproduction outputs
live under docs/reproductions/), and a link that broke in a move says nothing until a reader follows
it. Anchors are GitHub's: the heading in lower case, punctuation dropped, spaces as hyphens.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*$", text, re.M)}


def broken(page: Path) -> list[str]:
    out = []
    for m in LINK.finditer(FENCE.sub("", page.read_text(encoding="utf-8"))):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            out.append(f"({target}): no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            out.append(f"({target}): no heading with that anchor")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    found = broken(page)
    assert not found, f"{page.relative_to(ROOT)}: " + "; ".join(found)


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading, with `code`\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md#a-heading-with-code) [gone](missing.md) [bad](there.md#nope)\n"
                    "```text\n[not a link](inside-a-fence.md)\n```\n", encoding="utf-8")
    assert broken(page) == ["(missing.md): no such file", "(there.md#nope): no heading with that anchor"]
