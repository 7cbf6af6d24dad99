"""An agent's answer to ``Profile``: a stage profiling of a Crius Cell (papers/crius-cell-scheduling.txt §5.1).

The control plane sends a Cell's GPUs and one plan to profile (every stage data-parallel-only,
or every stage tensor-parallel-only); the agent answers per stage with what the plan costs
(``ProfileResult.stages``). Backends whose GPUs are the performance model's -- the emulated
one, and the process one, which runs real processes on no GPU -- answer from the model, so
replay's estimates are the simulator's. A backend that cannot profile says why in
``ProfileResult.error`` (the gpu backend: §5.1's single-device profiling needs a compiler of
distributed-equivalent stages, which it does not run).
"""

from __future__ import annotations

from halyard.datamodel import Cluster, HalyardError
from halyard.emulator import PerformanceModel, extend_catalog, load_catalog
from halyard.v1 import agent_service_pb2 as apb
from halyard.wire import allocation_from_pb, spec_from_pb, stage_profile_to_pb


def model_for(registered: apb.Registered, current: PerformanceModel | None) -> PerformanceModel:
    """The performance model the control plane runs (its catalog and data-stall setting win over
    ours): ``current`` when it already is that model."""
    if (current is not None and registered.data_stalls == current.data_stalls
            and registered.catalog_toml == current.catalog.profile_text):
        return current
    catalog = (extend_catalog(load_catalog(), registered.catalog_toml, source="<control plane's --catalog>")
               if registered.catalog_toml else None)
    return PerformanceModel(catalog, data_stalls=registered.data_stalls)


def refused(profile: apb.Profile, node: str, backend: str, why: str) -> apb.ProfileResult:
    """The answer of an agent that cannot profile: the request echoed, and why."""
    return apb.ProfileResult(job_id=profile.job_id, request_id=profile.request_id,
                             error=f"node {node}'s agent (backend {backend}) cannot profile: {why}")


def model_profiling(perf: PerformanceModel, cluster: Cluster | None, node: str, backend: str,
                    profile: apb.Profile) -> apb.ProfileResult:
    """A stage profiling answered from ``perf`` on this node's cluster; a request that is not one
    (no allocation: a CPU/memory profile), or that the model cannot cost, is refused with the reason."""
    if not profile.HasField("allocation"):
        return refused(profile, node, backend, "it answers stage profilings (Profile.allocation) only, "
                                               "not CPU/memory profiles")
    if cluster is None:
        return refused(profile, node, backend, "it holds no cluster file yet")
    try:
        spec = spec_from_pb(profile.spec, submit_time=0.0, prefix="profile.spec")
        allocation = allocation_from_pb(profile.allocation, cluster, prefix="profile.allocation")
        if not allocation.stages:
            return refused(profile, node, backend, "profile.allocation has no stages to profile")
        stages = perf.profile_stages(spec, allocation, cluster)
    except (HalyardError, ValueError) as exc:  # the model's UnsupportedParallelismError is a ValueError
        return refused(profile, node, backend, str(exc))
    return apb.ProfileResult(job_id=profile.job_id, request_id=profile.request_id,
                             stages=[stage_profile_to_pb(s) for s in stages])
