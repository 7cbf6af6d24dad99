"""The plan a job trains with on the GPUs a baseline gave it: adaptive parallelism at run time.

Crius §8.1: "For a fair comparison, we enable Alpa's adaptive parallelism in the baselines' job
training process but only allow them to schedule jobs with data profiled from data parallelism."
So FCFS, Gandiva, Gavel and ElasticFlow choose GPU counts and types as they always do (from the
data-parallel profile), and the job then runs the fastest plan that fits the GPUs it got, which is
how a model that does not fit one GPU runs under them at all.

:func:`with_runtime_plan` is that step. An allocation whose data-parallel worker fits its GPUs is
left as it is (a model that fits trains data parallel: Alpa's search finds data parallelism for
it, and the schedules of jobs that fit do not change); otherwise the allocation gets the fastest
of the plans Alpa's inter-operator pass considers here: ``S`` equal pipeline stages (powers of
two dividing the GPUs, at most the model's layers), each ``data x tensor`` alike, costed by the
performance model (``view.perf.job_timing``) on these very GPUs, OOM plans dropped (Fig. 3).
"""

from __future__ import annotations

import dataclasses

from halyard.datamodel import Allocation, JobSpec, StagePlan
from halyard.policies.view import ClusterView


def with_runtime_plan(view: ClusterView, spec: JobSpec, allocation: Allocation) -> Allocation:
    """``allocation`` with the plan the job runs under on it (module docstring); unchanged when it
    already fits, or when no plan fits (the core then refuses it, naming the memory)."""
    if _fits(view, spec, allocation):
        return allocation
    shape = tuple((view.cluster.node(p.node).gpu_type, len(p.gpus)) for p in allocation.nodes if p.gpus)
    key = (spec.model, spec.batch_size, spec.parallelism, spec.num_gpus, shape)
    plan = view.facts.memo("adaptive/plan", key, lambda: _fastest(view, spec, allocation))
    return allocation if plan is None else dataclasses.replace(allocation, stages=plan)  # keeps a time-shift


def _fits(view: ClusterView, spec: JobSpec, allocation: Allocation) -> bool:
    if allocation.stages:
        return view.perf.fits_plan(spec, allocation, view.cluster)
    return all(view.perf.fits_memory(spec, view.cluster.node(p.node).gpu_type) for p in allocation.nodes if p.gpus)


def uniform_plans(gpus: int, layers: int) -> list[tuple[StagePlan, ...]]:
    """``S`` equal stages of ``data x tensor`` GPUs: ``S`` a power of two dividing ``gpus``, at most ``layers``."""
    out: list[tuple[StagePlan, ...]] = []
    s = 1
    while s <= gpus and s <= max(layers, 1):
        if gpus % s == 0:
            per = gpus // s
            out += [(StagePlan(per, data=per // t, tensor=t),) * s for t in range(1, per + 1) if per % t == 0]
        s *= 2
    return out


def _fastest(view: ClusterView, spec: JobSpec, allocation: Allocation) -> tuple[StagePlan, ...] | None:
    layers = view.perf.layers(spec.model)
    if layers <= 0:
        return None
    best: tuple[float, tuple[StagePlan, ...]] | None = None
    for plan in uniform_plans(allocation.num_gpus, layers):
        trial = Allocation(allocation.nodes, stages=plan)
        if not view.perf.fits_plan(spec, trial, view.cluster):
            continue
        t = float(view.perf.job_timing(spec, trial, view.cluster).iteration.total_s)  # type: ignore[attr-defined]
        if best is None or t < best[0]:
            best = (t, plan)
    return None if best is None else best[1]
