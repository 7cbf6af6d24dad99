"""The scheduling core, and the drivers that run it.

:class:`SchedulingCore` holds jobs, the resource ledger and the event log and
applies policy plans; :class:`Simulator` drives it on a virtual clock with a
simulated agent pool. The gRPC control plane (service.py, grpc_api.py, server.py) is the
second driver of the same core; it is imported from its modules so that `simulate` does not load gRPC.

The scheduling core and the simulator moved to :mod:`halyard.scheduling`; the names below are re-exported
from there so that code written against ``halyard.controlplane`` keeps working.
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
