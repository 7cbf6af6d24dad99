"""The client commands' errors, kept apart from :mod:`halyard.cli.client` so that ``halyard`` can tell
them apart without importing the command that raised them."""

from __future__ import annotations

from halyard.datamodel import HalyardError


class RpcFailed(HalyardError):
    """The control plane answered with an error status; the message says which."""


class ServerUnreachable(RpcFailed):
    """No control plane answered at the address (the command exits with its own status)."""
