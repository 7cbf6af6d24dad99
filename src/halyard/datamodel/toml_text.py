"""TOML parsing with errors that name the file and line."""

from __future__ import annotations

import re
import tomllib
from typing import Any

from halyard.datamodel.errors import ValidationError


def parse_toml(text: str, *, source: str) -> dict[str, Any]:
    """``tomllib.loads``, but a syntax error becomes a :class:`ValidationError` with its line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise ValidationError(f"not valid TOML: {exc}", source=source,
                              line=int(m.group(1)) if m else None) from None
