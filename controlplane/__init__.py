"""The scheduling core, and the drivers that run it.

:class:`SchedulingCore` holds jobs, the resource ledger and the event log and
applies policy plans; :class:`Simulator` drives it on a virtual clock with a
simulated agent pool. The gRPC control plane (service.py, grpc_api.py, server.py) is the
second driver of the same core; it is imported from its modules so that `simulate` does not load gRPC.
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
