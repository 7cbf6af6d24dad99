"""The scheduling core, and the drivers that run it.

:class:`SchedulingCore` holds jobs, the resource ledger and the event log and
applies policy plans; :class:`Simulator` drives it on a virtual clock with a
simulated agent pool. (The gRPC server is a second driver of the same core.)
"""

from halyard.controlplane.core import PlanError, SchedulingCore
from halyard.controlplane.eventlog import EventLog, describe
from halyard.controlplane.metrics import job_metrics, summarize
from halyard.controlplane.records import JobRecord
from halyard.controlplane.simulator import Rejected, SimulatedPool, SimulationRun, Simulator

__all__ = [
    "EventLog", "JobRecord", "PlanError", "Rejected", "SchedulingCore", "SimulatedPool",
    "SimulationRun", "Simulator", "describe", "job_metrics", "summarize",
]
