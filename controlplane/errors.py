"""Request errors of the control plane, each mapped to one gRPC status code."""

from __future__ import annotations

from halyard.datamodel import HalyardError


class NotFound(HalyardError):
    """NOT_FOUND: the named job or node does not exist."""


class AlreadyExists(HalyardError):
    """ALREADY_EXISTS: a job with this id was submitted before."""


class FailedPrecondition(HalyardError):
    """FAILED_PRECONDITION: the request is valid but not in this state (cancel a finished job)."""


class PermissionDenied(HalyardError):
    """PERMISSION_DENIED: the caller is known but may not do this (another tenant's job, another node)."""


class Unauthenticated(HalyardError):
    """UNAUTHENTICATED: no valid credentials came with the request."""


class TooManyFailures(Unauthenticated):
    """RESOURCE_EXHAUSTED (HTTP 429): this peer presented too many bad tokens lately; retry after a while."""

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unavailable(HalyardError):
    """UNAVAILABLE: the control plane cannot take this now (its store failed; it is stopping). Retry later."""
