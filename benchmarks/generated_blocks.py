"""Generated blocks in a hand-written page: the page's prose is written by hand and cites tables and
figures that its script renders from stored JSON between ``<!-- generated:NAME ... -->`` and
``<!-- /generated -->``, so no figure in the block is typed (tests/test_reproduction_pages.py checks it).
Shared by the reproduction scripts (benchmarks/ is not a package: found on sys.path)."""

from __future__ import annotations

import re
from pathlib import Path

GENERATED = re.compile(r"(<!-- generated:(\w[\w-]*) [^\n]*-->\n)(.*?)(<!-- /generated -->)", re.S)


def filled(doc: Path, blocks: dict[str, str]) -> str:
    """``doc``'s text with each ``<!-- generated:NAME ... -->`` block replaced by ``blocks[NAME]``; the page's
    blocks and ``blocks`` must name the same set, so a block the script stopped writing (or a new one the page
    lacks) is an error, not a stale figure."""
    text = doc.read_text(encoding="utf-8")
    found = {m.group(2) for m in GENERATED.finditer(text)}
    if found != set(blocks):
        raise SystemExit(f"{doc}: generated blocks {sorted(found)} do not match {sorted(blocks)}")
    return GENERATED.sub(lambda m: m.group(1) + blocks[m.group(2)] + m.group(4), text)
