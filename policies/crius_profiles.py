"""Crius' agile estimation from stage profiles (papers/crius-cell-scheduling.txt §5.1, Fig. 9).

A Cell is profiled twice -- every stage data-parallel-only, then every stage
tensor-parallel-only -- and its ``2^S`` assembled plans are costed from those per-stage
figures alone ("at the cost of only 2 physical-device profilings"); plans whose stage
exceeds a GPU's memory are dropped. The estimator asks a :class:`ProfileSource` for each
profiling (a :class:`ProfileRequest`: model, GPU type, GPU count, stage split):

* in simulation, :class:`ModelProfiles` answers from the performance model;
* on a live control plane, ``halyard.controlplane.profiling.AgentProfiles`` sends ``Profile``
  to an agent of the Cell's GPU type and caches its ``ProfileResult``; an emulated agent
  answers from the same model, so the figures -- and the schedule -- are the same in both.

Either way the assembly is the performance model's (``perf.assembled_iteration_s``: the
pipeline of §5.1 and its tail), the part of the estimate Crius computes from "pre-profiled
communication operators" rather than measures. :func:`cell_accuracy` is §8.2's estimation
accuracy of a Cell's estimate against the best plan of its whole space.
"""

from __future__ import annotations

from collections.abc import Sequence

from halyard.datamodel import Allocation, JobSpec, StagePlan
from halyard.policies.profiles import (
    ModelProfiles,
    ProfileRefused,
    ProfileRequest,
    ProfileSource,
    ProfilesPending,
    profiles_of,
)
from halyard.policies.view import ClusterView

# The generic profiling vocabulary (policies/profiles.py), re-exported where Crius' callers found it.
__all__ = ["ModelProfiles", "ProfileRefused", "ProfileRequest", "ProfileSource", "ProfilesPending", "best_assembled",
           "cell_accuracy", "profiles_of", "profilings"]


def profilings(spec: JobSpec, gpu_type: str, base: Allocation, stage_gpus: Sequence[int]) -> tuple[ProfileRequest,
                                                                                                      ProfileRequest]:
    """§5.1's two profilings of a Cell whose stages hold ``stage_gpus``: data-parallel-only, tensor-parallel-only."""
    dp = tuple(StagePlan(g, data=g, tensor=1) for g in stage_gpus)
    tp = tuple(StagePlan(g, data=1, tensor=g) for g in stage_gpus)
    return (ProfileRequest(spec, gpu_type, Allocation(base.nodes, stages=dp)),
            ProfileRequest(spec, gpu_type, Allocation(base.nodes, stages=tp)))


def best_assembled(view: ClusterView, spec: JobSpec, gpu_type: str, base: Allocation, stage_gpus: Sequence[int],
                   plans: Sequence[tuple[StagePlan, ...]]) -> tuple[float, tuple[StagePlan, ...]] | None:
    """The fastest of ``plans`` (each stage data- or tensor-parallel-only) that fits memory, costed from
    the Cell's two profilings: ``(iteration seconds, plan)``, or None if none fits. Raises
    :class:`ProfileRefused` if a profiling cannot be had, :class:`ProfilesPending` while one is awaited."""
    source = profiles_of(view)
    dp_req, tp_req = profilings(spec, gpu_type, base, stage_gpus)
    dp, tp = source.stage_profiles(dp_req), source.stage_profiles(tp_req)
    if dp is None or tp is None:
        raise ProfileRefused(f"{spec.model} on {sum(stage_gpus)} {gpu_type} GPU(s)")
    if len(dp) != len(stage_gpus) or len(tp) != len(stage_gpus):
        raise ValueError(f"a profiling of {len(stage_gpus)} stages answered {len(dp)} and {len(tp)} stages")
    best: tuple[float, tuple[StagePlan, ...]] | None = None
    for plan in plans:
        stages = tuple(dp[i] if p.tensor == 1 else tp[i] for i, p in enumerate(plan))
        if not all(s.fits for s in stages):
            continue
        t = float(view.perf.assembled_iteration_s(spec, stages))
        if best is None or t < best[0]:
            best = (t, plan)
    return best


def cell_accuracy(view: ClusterView, spec: JobSpec, cell: object) -> float | None:
    """§8.2's estimation accuracy ``1 - |Te - Td| / Td`` of ``cell``: ``Te`` its estimate from the
    exchanged profiles, ``Td`` the best plan of its whole space run on the model (what the Cell-guided
    tuner finds, §5.2); None if the Cell has no plan that fits."""
    from halyard.policies.crius import estimate_cell, estimation_accuracy, tuned_cell  # crius imports this module

    te, td = estimate_cell(view, spec, cell), tuned_cell(view, spec, cell)  # type: ignore[arg-type]
    if te is None or td is None:
        return None
    return estimation_accuracy(te.iteration_s, td.iteration_s)
