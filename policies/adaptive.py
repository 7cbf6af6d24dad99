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
two dividing the GPUs, at most the model's layers), each ``data x tensor`` alike
(:func:`~halyard.parallelism.uniform_plans`, the one plan enumeration), costed by the
performance model (``view.perf.job_timing``) on these very GPUs, OOM plans dropped (Fig. 3).
:func:`fastest_fitting` is that search, which Crius' estimator and tuner share. "Fits" is one rule,
``perf.fits_plan``, under which a single-stage plan may accumulate gradients as ``fits_memory``
lets a data-parallel worker do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from halyard.datamodel import Allocation, JobSpec, StagePlan
from halyard.parallelism import uniform_plans
from halyard.policies.view import ClusterView


def with_runtime_plan(view: ClusterView, spec: JobSpec, allocation: Allocation) -> Allocation:
    """``allocation`` with the plan the job runs under on it (module docstring); unchanged when it
    already fits, or when no plan fits (the core then refuses it, naming the memory)."""
    if _fits(view, spec, allocation):
        return allocation
    layers = view.perf.layers(spec.model)
    if layers <= 0:
        return allocation
    shape = tuple((view.cluster.node(p.node).gpu_type, len(p.gpus)) for p in allocation.nodes if p.gpus)
    key = (spec.model, spec.batch_size, spec.parallelism, spec.num_gpus, shape)
    best = view.facts.memo("adaptive/plan", key, lambda: fastest_fitting(
        view, spec, allocation, uniform_plans(allocation.num_gpus, layers)))
    return allocation if best is None else dataclasses.replace(allocation, stages=best[1])  # keeps a time-shift


def _fits(view: ClusterView, spec: JobSpec, allocation: Allocation) -> bool:
    """The one memory rule, ``fits_plan``; without a stage plan that is ``fits_memory`` of the job's
    worker on each GPU type (equal to ``fits_plan`` of its one data-parallel stage, micro-batches
    included: tests/test_policies_adaptive.py), memoised per type."""
    if allocation.stages:
        return view.perf.fits_plan(spec, allocation, view.cluster)
    return all(view.perf.fits_memory(spec, view.cluster.node(p.node).gpu_type, allocation.num_gpus)
               for p in allocation.nodes if p.gpus)


def fastest_fitting(view: ClusterView, spec: JobSpec, allocation: Allocation,
                    plans: Iterable[tuple[StagePlan, ...]]) -> tuple[float, tuple[StagePlan, ...]] | None:
    """The fastest of ``plans`` on ``allocation``'s GPUs whose every GPU holds its share (``fits_plan``;
    Crius Fig. 3: OOM plans are infeasible), with its iteration time (``job_timing``), or None. The
    earlier plan wins a tie."""
    best: tuple[float, tuple[StagePlan, ...]] | None = None
    for plan in plans:
        trial = Allocation(allocation.nodes, stages=plan)
        if not view.perf.fits_plan(spec, trial, view.cluster):
            continue
        t = float(view.perf.job_timing(spec, trial, view.cluster).iteration.total_s)  # type: ignore[attr-defined]
        if best is None or t < best[0]:
            best = (t, plan)
    return best
