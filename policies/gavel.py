"""Gavel's heterogeneity-aware max-throughput policy (Narayanan et al., OSDI'20), Crius' baseline.

Crius §8.1: "Gavel is a heterogeneity-aware scheduler designed for various scheduling policies,
including throughput maximization. Although it considers the GPU heterogeneity, it does not support
the scaling of GPU numbers"; and baselines schedule "with data profiled from data parallelism".

* **Throughput matrix**: ``T[j, t]``, iterations per second of job j's requested GPUs on GPU type
  t, data parallel and consolidated (``view.perf.consolidated_iteration_time``), 0 where it does
  not fit the type's memory.
* **Allocation LP** (Gavel §4, max-sum-throughput): maximise ``sum_j sum_t T[j,t] / max_t T[j,t]
  x X[j,t]`` over the time fractions ``X[j,t] >= 0`` with ``sum_t X[j,t] <= 1`` per job and
  ``sum_j X[j,t] x gpus_j <= GPUs of type t``, solved with ``scipy.optimize.linprog`` (HiGHS).
  Normalising each job by its best type keeps the objective in "jobs' worth of throughput" (the
  raw sum would favour fast models).
* **Rounds** (Gavel §5): the pass at each round boundary (the round timer, ``view.round_s``) ranks
  (job, type) pairs by ``X[j,t] / share received``, the share being the fraction of the job's time
  in the system it has run (ours: Gavel counts rounds received per type; this counts time on any
  type), and gives each job at most one type while the type's GPUs last; running jobs that keep
  their type keep their GPUs (Gavel's lease extension), those that lose their GPUs are preempted,
  those moved to another type migrate.
* **Only at round boundaries.** Gavel decides once a round: its simulator adds a job that arrives
  mid-round at the next round, and GPUs a job frees mid-round stay idle until then (code
  stanford-futuredata/gavel ``scheduler/scheduler.py`` ``simulate``: the loop advances from round end
  to round end, ``_schedule_jobs_on_workers`` runs once per round, ``time_per_iteration=360``). A
  pass between boundaries (an arrival, a completion) changes nothing. Before this rule every event
  re-ranked and re-assigned, so an arrival could preempt a job a few seconds into its round: on
  crius-64 1,255 of 1,907 preemptions fell between boundaries. ``fill_between_rounds`` (ours, off)
  starts pending jobs on idle GPUs between boundaries, in the same ranking, preempting nothing.
* **Raw throughput sum** (``raw_throughput_sum``, off by default): the objective of Gavel's code for
  ``max_sum_throughput_perf`` (``scheduler/policies/max_sum_throughput.py``,
  ``ThroughputNormalizedByCostSumWithPerfSLOs.get_allocation``, commit c4fa400) is
  ``sum(throughputs / instance_costs * x)`` with unit costs: steps per second summed over jobs, not
  normalised (it computes ``scale = 1 / throughputs.sum(axis=1)`` and never uses it), so a job of
  many cheap steps (an LM at 28 steps/s) outweighs one of few costly steps (a Transformer at 1.5).
  Measured beside Gavel's simulator: docs/reproductions/gavel-public-comparison.md (benchmarks/gavel_public_perjob.py).
* **Work conserving** (``work_conserving``, off by default): Gavel's per-type priority lists hold every
  job with a non-zero throughput on the type, allocation 0 included (priority 0), and the round's pass
  (``scheduler.py`` ``_schedule_jobs_on_workers_helper``: only FIFO skips priority 0) goes down them
  until the type's workers run out, so GPUs the rounded allocation leaves idle go to jobs the LP gave
  nothing, the v100 list before the p100 one (``worker_types = ["v100", "p100", "k80"]``). With it,
  after the ranked pass each type in the cluster's order gives its idle GPUs to jobs still without a
  type, by priority then arrival.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

from halyard.datamodel import Allocation, JobSpec
from halyard.policies.adaptive import with_runtime_plan
from halyard.policies.adjusting import OwnPass, act_without_pending, described
from halyard.policies.moves import emit_in_order
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, choose_nodes, usable_gpus
from halyard.policies.plan import Plan
from halyard.policies.reasons import by_policy, never_fits
from halyard.policies.view import ClusterView, JobInfo, allocation_of

# Ours: the smallest received share, so a job that never ran ranks by X / this (Gavel starts a
# new job's rounds-received count at 0 and breaks the division the same way).
MIN_SHARE = 1e-3
# Ours: the relative slack on the optimum when ``spread_ties`` re-solves over the optimal face
# (a floating-point tolerance, not a modelling figure).
TIE_TOLERANCE = 1e-9


def throughputs(view: ClusterView, spec: JobSpec) -> np.ndarray:
    """``T[j, t]`` over ``view.cluster.gpu_types``: iterations per second of the job's requested GPUs
    on each type, data parallel and consolidated; 0 where it does not fit or the type is too small."""
    def compute() -> np.ndarray:
        types = view.gpu_types_for(spec)
        out = []
        for t in view.cluster.gpu_types:
            ok = (types is None or t in types) and view.shape.total_gpus(t) >= spec.num_gpus
            out.append(1.0 / view.perf.consolidated_iteration_time(spec, view.cluster, t) if ok else 0.0)
        return np.array(out)
    return view.facts.memo("gavel/throughput", (spec.model, spec.batch_size, spec.num_gpus, spec.gpu_type), compute)


def max_throughput_allocation(thr: np.ndarray, gpus: np.ndarray, capacity: np.ndarray, *,
                              spread_ties: bool = False, raw: bool = False) -> np.ndarray:
    """Gavel's max-sum-throughput LP: ``X`` (jobs x types) maximising normalised throughput under
    one unit of time per job and the GPUs of each type (module docstring).

    The LP is degenerate when jobs tie (equal normalised throughput per GPU): the solver returns a
    vertex where some jobs get all their time and another gets ``X = 0`` and waits until the others
    finish. ``spread_ties`` (ours, off by default: Gavel's paper has no such rule) solves a second LP
    over the optimal face: keep the optimum and maximise the least total time fraction any runnable
    job gets, so tied jobs share the GPUs across rounds instead. ``raw`` maximises the steps per second
    summed over jobs, as Gavel's code does (module docstring), not each job's share of its best type."""
    n, k = thr.shape
    best = thr.max(axis=1, keepdims=True)
    norm = thr if raw else np.divide(thr, best, out=np.zeros_like(thr), where=best > 0)
    a_job = np.kron(np.eye(n), np.ones((1, k)))  # sum_t X[j,t] <= 1
    a_type = np.kron(gpus.reshape(1, n), np.eye(k))  # sum_j gpus_j X[j,t] <= capacity_t
    bounds = [(0.0, 1.0 if v > 0 else 0.0) for v in thr.ravel()]
    res = linprog(-norm.ravel(), A_ub=np.vstack([a_job, a_type]), b_ub=np.concatenate([np.ones(n), capacity]),
                  bounds=bounds, method="highs")
    if not res.success:  # pragma: no cover - the zero allocation is always feasible
        raise RuntimeError(f"Gavel LP failed: {res.message}")
    if not spread_ties or n < 2:
        return res.x.reshape(n, k)
    # Variables [X, z]: maximise z subject to sum_t X[j,t] >= z for runnable jobs and the optimum kept.
    runnable = (thr > 0).any(axis=1)
    floor = np.hstack([-a_job[runnable], np.ones((int(runnable.sum()), 1))])  # z - sum_t X[j,t] <= 0
    keep = np.append(-norm.ravel(), 0.0).reshape(1, -1)  # -objective <= -(optimum - tolerance)
    optimum = -res.fun
    a_ub = np.vstack([np.hstack([a_job, np.zeros((n, 1))]), np.hstack([a_type, np.zeros((k, 1))]), floor, keep])
    b_ub = np.concatenate([np.ones(n), capacity, np.zeros(int(runnable.sum())),
                           [-(optimum - TIE_TOLERANCE * max(1.0, optimum))]])
    fair = linprog(np.append(np.zeros(n * k), -1.0), A_ub=a_ub, b_ub=b_ub, bounds=[*bounds, (0.0, 1.0)],
                   method="highs")
    return fair.x[:-1].reshape(n, k) if fair.success else res.x.reshape(n, k)


class Gavel(OwnPass):
    """Max-throughput Gavel with its round-based mechanism (module docstring); adjusters, if any, run
    after its pass (:class:`~halyard.policies.adjusting.OwnPass`)."""

    def __init__(self, name: str = "gavel", *, spread_ties: bool = False, fill_between_rounds: bool = False,
                 raw_throughput_sum: bool = False, work_conserving: bool = False) -> None:
        self.name = name
        self.spread_ties = spread_ties
        self.raw_throughput_sum = raw_throughput_sum
        self.work_conserving = work_conserving
        self.fill_between_rounds = fill_between_rounds

    @property
    def needs_rounds(self) -> bool:
        return True  # priorities change as service accrues

    @property
    def acts_without_pending(self) -> bool:
        return act_without_pending(self.adjusters)

    def stages(self) -> list[tuple[str, str]]:
        return [("policy", self.name), *described(self.adjusters)]

    def own_pass(self, view: ClusterView, state: PassState) -> Plan:
        plan = Plan()
        jobs: list[JobInfo] = [*view.running.values(), *view.pending]
        if not jobs:
            return plan
        if not view.at_round_boundary and not self.fill_between_rounds:  # module docstring
            for job in view.pending:
                plan.wait(job.job_id, by_policy(self.name, "Gavel assigns GPUs at round boundaries (every {:g} s)",
                                                view.round_s))
            return plan
        between = not view.at_round_boundary  # fill_between_rounds: idle GPUs only, running jobs stay
        types = list(view.cluster.gpu_types)
        thr = np.array([throughputs(view, j.spec) for j in jobs])
        demand = np.array([j.spec.num_gpus for j in jobs], dtype=float)
        capacity = np.array([float(view.shape.total_gpus(t)) for t in types])
        x = max_throughput_allocation(thr, demand, capacity, spread_ties=self.spread_ties,
                                      raw=self.raw_throughput_sum)
        share = np.array([max(j.run_time_s(view.now) / max(view.now - j.spec.submit_time, 1e-9), MIN_SHARE)
                          for j in jobs])
        priority = x / share[:, None]
        order = sorted((-priority[i, t], jobs[i].arrival_seq, i, t) for i in range(len(jobs))
                        for t in range(len(types)) if x[i, t] > 1e-9)
        left = {t: int(sum(usable_gpus(view.free, view.shape, t)) + (0 if between else sum(
            j.num_gpus for j in view.running.values() if self._type(view, j) == t))) for t in types}
        chosen: dict[str, str] = {}
        if between:
            chosen = {j.job_id: held for j in view.running.values() if (held := self._type(view, j)) is not None}
        for _, _, i, t in order:
            job, best = jobs[i], types[t]
            if job.job_id in chosen or job.spec.num_gpus > left[best]:
                continue
            chosen[job.job_id] = best
            left[best] -= job.spec.num_gpus
        if self.work_conserving:  # module docstring
            for t, type_name in enumerate(types):
                for i in sorted((i for i in range(len(jobs)) if thr[i, t] > 0),
                                key=lambda i: (-priority[i, t], jobs[i].arrival_seq)):
                    job = jobs[i]
                    if job.job_id not in chosen and job.spec.num_gpus <= left[type_name]:
                        chosen[job.job_id] = type_name
                        left[type_name] -= job.spec.num_gpus
        free = view.free.copy()
        for job in view.running.values():  # a running job that keeps its type keeps its GPUs
            if chosen.get(job.job_id) != self._type(view, job):
                if job.job_id not in chosen:
                    plan.preempt(job.job_id)
                free.give(allocation_of(job))
        after = free.copy()  # what the core sees after the preemptions
        for job in view.running.values():
            if job.job_id in chosen and chosen[job.job_id] != self._type(view, job):
                after.take(allocation_of(job))  # still held until it migrates
        targets: list[tuple[JobInfo, Allocation]] = []
        for i, job in enumerate(jobs):
            gpu_type = chosen.get(job.job_id)
            if gpu_type is None:
                if job.allocation is None:
                    plan.wait(job.job_id, never_fits(self.name, "no GPU type of the cluster holds its {:#GPU}",
                                                     job.spec.num_gpus) if not thr[i].any() else
                              by_policy(self.name, "the max-throughput allocation gives the GPUs to jobs of higher "
                                                   "priority this round"))
                continue
            if gpu_type == self._type(view, job):
                continue
            picked = choose_nodes(usable_gpus(free, view.shape, gpu_type), view.shape, job.spec.num_gpus)
            if picked is None:  # CPU/memory fragmentation: not this round
                if job.allocation is not None:
                    plan.preempt(job.job_id)
                    after.give(job.allocation)
                else:
                    plan.wait(job.job_id, by_policy(self.name, "its {:#GPU} of type {} are fragmented this round",
                                                    job.spec.num_gpus, gpu_type))
                continue
            alloc = with_runtime_plan(view, job.spec, build_allocation(free, picked))  # Crius §8.1
            free.take(alloc)
            targets.append((job, alloc))
        emit_in_order(plan, after, targets, self.name)
        return plan

    @staticmethod
    def _type(view: ClusterView, job: JobInfo) -> str | None:
        alloc = job.allocation
        if alloc is None:
            return None
        types = {view.cluster.node(p.node).gpu_type for p in alloc.nodes if p.gpus}
        return next(iter(types)) if len(types) == 1 else None
