"""The scheduling core, and the in-process simulator that drives it: pure code.

:class:`SchedulingCore` holds jobs, the resource ledger and the event log and applies
policy plans; :class:`Simulator` drives it on a virtual clock with a simulated agent pool.
The control plane daemon (:mod:`halyard.controlplane`) is the second driver of the same core.
Nothing here touches sockets, threads or a database, and nothing here imports
halyard.controlplane or halyard.agent (tests/test_layering.py; docs/architecture.md).
"""

from halyard.scheduling.core import PlanError, SchedulingCore
from halyard.scheduling.eventlog import EventLog, describe
from halyard.scheduling.metrics import job_metrics, summarize
from halyard.scheduling.records import JobRecord
from halyard.scheduling.simulator import Rejected, SimulatedPool, SimulationRun, Simulator

__all__ = [
    "EventLog", "JobRecord", "PlanError", "Rejected", "SchedulingCore", "SimulatedPool",
    "SimulationRun", "Simulator", "describe", "job_metrics", "summarize",
]
