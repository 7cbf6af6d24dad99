"""Pure scheduling decisions: a read-only :class:`ClusterView` in, a :class:`Plan` out.

Nothing here touches sockets, clocks, threads or storage, and nothing imports
from ``halyard.controlplane`` or ``halyard.agent``.
"""

from halyard.policies.ordering import Fifo, Las, Srtf
from halyard.policies.placement import FirstFitConsolidated
from halyard.policies.plan import Action, Migrate, Plan, Preempt, Resize, SetResources, SetTimeShift, Start
from halyard.policies.registry import make_policy, policy_names
from halyard.policies.resources import FreeResources, OverAllocation
from halyard.policies.staged import StagedPolicy
from halyard.policies.stages import (
    Admission,
    AdmitAll,
    FixedSize,
    NetworkAugmenter,
    NoAugmentation,
    Ordering,
    Placement,
    Policy,
    Sizing,
)
from halyard.policies.view import ClusterView, JobInfo, PerformanceEstimator

__all__ = [
    "Action",
    "Admission",
    "AdmitAll",
    "ClusterView",
    "Fifo",
    "FirstFitConsolidated",
    "FixedSize",
    "FreeResources",
    "JobInfo",
    "Las",
    "Migrate",
    "NetworkAugmenter",
    "NoAugmentation",
    "Ordering",
    "OverAllocation",
    "PerformanceEstimator",
    "Placement",
    "Plan",
    "Policy",
    "Preempt",
    "Resize",
    "SetResources",
    "SetTimeShift",
    "Sizing",
    "Srtf",
    "StagedPolicy",
    "Start",
    "make_policy",
    "policy_names",
]
