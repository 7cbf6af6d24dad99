"""Pure scheduling decisions: a read-only :class:`ClusterView` in, a :class:`Plan` out.

Nothing here touches sockets, clocks, threads or storage, and nothing imports
from ``halyard.controlplane`` or ``halyard.agent``.
"""

from halyard.policies.capabilities import Adjustable, HasOrdering, HasPlacement, NeedsProfiles, TakesDallyOptions
from halyard.policies.facts import ClusterFacts, ClusterShape
from halyard.policies.ordering import Fifo, FinishTimeFairness, Las, Srtf
from halyard.policies.passstate import PassState
from halyard.policies.placement import FirstFitConsolidated
from halyard.policies.plan import Action, Drop, Migrate, Plan, Preempt, Resize, SetResources, SetTimeShift, Start
from halyard.policies.reasons import Unplaced, WaitCode
from halyard.policies.registry import STAGES, make_policy, policy_names, stage_names
from halyard.policies.reliance import unmet_reliance
from halyard.policies.resources import FreeResources, OverAllocation
from halyard.policies.staged import StagedPolicy
from halyard.policies.stages import (
    Adjuster,
    Admission,
    AdmitAll,
    BatchPlacement,
    FixedSize,
    Ordering,
    Placement,
    Policy,
    Preemption,
    Sizing,
    Stage,
)
from halyard.policies.view import ClusterView, JobInfo, PerformanceEstimator

__all__ = [
    "STAGES",
    "Action",
    "Adjustable",
    "Adjuster",
    "Admission",
    "AdmitAll",
    "BatchPlacement",
    "ClusterFacts",
    "ClusterShape",
    "ClusterView",
    "Drop",
    "Fifo",
    "FinishTimeFairness",
    "FirstFitConsolidated",
    "FixedSize",
    "FreeResources",
    "HasOrdering",
    "HasPlacement",
    "JobInfo",
    "Las",
    "Migrate",
    "NeedsProfiles",
    "Ordering",
    "OverAllocation",
    "PassState",
    "PerformanceEstimator",
    "Placement",
    "Plan",
    "Policy",
    "Preempt",
    "Preemption",
    "Resize",
    "SetResources",
    "SetTimeShift",
    "Sizing",
    "Srtf",
    "Stage",
    "StagedPolicy",
    "Start",
    "TakesDallyOptions",
    "Unplaced",
    "WaitCode",
    "make_policy",
    "policy_names",
    "stage_names",
    "unmet_reliance",
]
