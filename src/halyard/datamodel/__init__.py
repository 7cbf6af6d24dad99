"""The shared vocabulary: clusters, jobs, allocations, events.

Every other package imports from here; this package imports nothing of theirs.
"""

from halyard.datamodel.allocation import Allocation, NodeAllocation, StagePlan
from halyard.datamodel.cluster import Cluster, Fabric, LinkKey, Node, Rack, SwitchLink, Tier
from halyard.datamodel.cluster_toml import (
    builtin_clusters,
    cluster_digest,
    load_cluster,
    parse_cluster,
    read_cluster_text,
)
from halyard.datamodel.errors import HalyardError, InvalidTransition, ValidationError
from halyard.datamodel.events import EventKind, JobEvent
from halyard.datamodel.job import TRANSITIONS, JobSpec, JobState, Parallelism, check_transition
from halyard.datamodel.profile import STAGE_PROFILE_FIELDS, StageCost, StageProfile
from halyard.datamodel.toml_text import parse_toml

__all__ = [
    "STAGE_PROFILE_FIELDS", "TRANSITIONS", "Allocation", "Cluster", "EventKind", "Fabric", "HalyardError",
    "InvalidTransition", "JobEvent", "JobSpec", "JobState", "LinkKey", "Node", "NodeAllocation",
    "Parallelism", "Rack", "StageCost", "StagePlan", "StageProfile", "SwitchLink", "Tier", "ValidationError",
    "builtin_clusters",
    "check_transition", "cluster_digest", "load_cluster", "parse_cluster", "parse_toml", "read_cluster_text",
]
