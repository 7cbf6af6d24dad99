"""``1 GPU``, ``2 GPUs``: counts in messages, in the number they need (never "1 usable GPUs").

A module of its own, importing nothing, so that every layer (policies' wait reasons, the core's
plan errors, the commands' notes) can say a count the same way without importing another layer.
"""

from __future__ import annotations


def plural(n: int, noun: str, many: str | None = None) -> str:
    """The count and the noun in the number it needs (``many``: an irregular plural)."""
    return f"{n:,} {noun if n == 1 else (many or noun + 's')}"
