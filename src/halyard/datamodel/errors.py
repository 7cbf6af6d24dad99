"""Errors raised on bad input; each names where the problem is."""

from __future__ import annotations


class HalyardError(Exception):
    """Base class for every error Halyard raises on purpose."""


class ValidationError(HalyardError, ValueError):
    """Input that does not satisfy the schema.

    ``source`` is a file path (or another name for where the input came from),
    ``line`` a 1-based line number when the input is line-oriented, and
    ``field`` the offending field. ``str()`` gives one line naming all three.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = []
        if self.source:
            where.append(self.source if self.line is None else f"{self.source}:{self.line}")
        elif self.line is not None:
            where.append(f"line {self.line}")
        if self.field:
            where.append(f"field '{self.field}'")
        prefix = ", ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message

    def at(self, *, source: str | None = None, line: int | None = None) -> ValidationError:
        """The same error with its location filled in where it was missing."""
        return ValidationError(
            self.message,
            source=self.source or source,
            line=self.line if self.line is not None else line,
            field=self.field,
        )


class InvalidTransition(HalyardError):
    """A job state change the state machine does not allow."""
