"""Halyard: a control plane for GPU clusters that run deep-learning training jobs.

The shared data model lives in :mod:`halyard.datamodel`; the subsystems are
``halyard.traces`` (trace schema and loaders), ``halyard.emulator`` (the one
performance model), ``halyard.policies`` (pure decision code),
``halyard.scheduling`` (scheduling core and simulator), ``halyard.controlplane``
(the daemon) and ``halyard.agent``.
"""

import os as _os
import sys as _sys

__version__ = "0.1.0"

# Forecasts fork the control plane (controlplane/forecast.py: the child's memory is the snapshot).
# gRPC's C core, with its fork support on (its default), runs fork handlers that abort a child
# forked while gRPC's threads poll; so it is off here unless the user set it. gRPC reads the
# variable when it is imported: if it was imported before halyard, forking is not known to be safe.
GRPC_FORK_SAFE = "grpc" not in _sys.modules and _os.environ.setdefault(
    "GRPC_ENABLE_FORK_SUPPORT", "false").strip().lower() in ("0", "false", "no", "off")
