"""Profilings a policy asks the driver for before a job's first pass: the generic preparation hook.

A policy that estimates jobs from measurements rather than from the performance model alone declares
:class:`~halyard.policies.capabilities.NeedsProfiles` (it says which :class:`ProfileRequest` a job
takes); the driver prepares them -- the simulator answers from the performance model
(:class:`ModelProfiles`), a live control plane asks its agents and caches their answers -- and hands
the pass a :class:`ProfileSource` as ``ClusterView.profiles``. The core carries that source without
knowing which policy reads it or why. Crius' Cells are the first user (papers/crius-cell-scheduling.txt
§5.1: a Cell profiled data-parallel-only and tensor-parallel-only, :mod:`halyard.policies.crius_profiles`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from halyard.datamodel import Allocation, Cluster, JobSpec, StageProfile

if TYPE_CHECKING:
    from halyard.policies.view import ClusterView, PerformanceEstimator


class ProfileRefused(Exception):
    """A profiling the source could not give (e.g. the agent asked refused it): the Cell is left out of
    this pass but not remembered as infeasible, since another agent of the type may answer later."""


class ProfilesPending(Exception):
    """A profiling asked of an agent has not been answered yet (live control plane only): the pass
    that needs it gives its jobs a wait reason, and the answer's arrival runs another pass."""


@dataclass(frozen=True, slots=True)
class ProfileRequest:
    """One profiling: ``spec``'s model and batch on ``allocation`` (consolidated GPUs of ``gpu_type``,
    e.g. a Crius Cell's), under the plan ``allocation.stages``."""

    spec: JobSpec
    gpu_type: str
    allocation: Allocation

    @property
    def key(self) -> tuple[object, ...]:
        """What the answer depends on: the model and the batch it trains (``num_gpus`` sets a Cell's
        global batch when no ``parallelism`` is given), the GPU type and count and the stage plan."""
        s = self.spec
        return (s.model, s.batch_size, s.parallelism, s.num_gpus if s.parallelism is None else 0,
                self.gpu_type, self.allocation.num_gpus, self.allocation.stages)


class ProfileSource(Protocol):
    """Where the estimator's profilings come from (simulation: the model; live: the agents)."""

    def stage_profiles(self, request: ProfileRequest) -> tuple[StageProfile, ...] | None:
        """The profiling's stages in order; None if it cannot be had (an agent said why; the Cell is
        then not estimated). Raises :class:`ProfilesPending` while an answer is awaited."""
        ...


class ModelProfiles:
    """:class:`ProfileSource` of the simulator: the performance model profiles each plan (what an
    emulated agent answers to ``Profile``)."""

    def __init__(self, perf: PerformanceEstimator, cluster: Cluster) -> None:
        self.perf = perf
        self.cluster = cluster

    def stage_profiles(self, request: ProfileRequest) -> tuple[StageProfile, ...]:
        return tuple(self.perf.profile_stages(request.spec, request.allocation, self.cluster))


def profiles_of(view: ClusterView) -> ProfileSource:
    """The view's profile source: the driver's (``view.profiles``), else the performance model."""
    if view.profiles is not None:
        return view.profiles
    return view.facts.memo("crius/model-profiles", None, lambda: ModelProfiles(view.perf, view.cluster))
