"""Halyard: a control plane for GPU clusters that run deep-learning training jobs.

The shared data model lives in :mod:`halyard.datamodel`; the subsystems are
``halyard.traces`` (trace schema and loaders), ``halyard.emulator`` (the one
performance model), ``halyard.policies`` (pure decision code),
``halyard.controlplane`` (scheduling core and simulator) and ``halyard.agent``.
"""

__version__ = "0.1.0"
