"""Request errors of the control plane, each mapped to one gRPC status code."""

from __future__ import annotations

from halyard.datamodel import HalyardError


class NotFound(HalyardError):
    """NOT_FOUND: the named job or node does not exist."""


class AlreadyExists(HalyardError):
    """ALREADY_EXISTS: a job with this id was submitted before."""


class FailedPrecondition(HalyardError):
    """FAILED_PRECONDITION: the request is valid but not in this state (cancel a finished job)."""
