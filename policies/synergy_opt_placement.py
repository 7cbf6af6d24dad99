"""Synergy-OPT's second LP (§4.1.2): spread the ILP's per-job vectors over the machines.

The ILP of §4.1.1 (:mod:`halyard.policies.synergy_opt`) gives each job ``j`` its GPUs
``g_j`` and its CPU ``c_j*`` and memory ``m_j*`` (eqs. (6), (7)) on one super machine.
§4.1.2 finds where they go: variables ``x[i, j]`` in [0, 1], ``x[i, j] = 1`` meaning job j's
``(g_j, c_j*, m_j*)`` is on machine i, a fraction meaning the job is split. The paper gives
the constraints in words and the full formulation only in its extended version [38] (not in
``shared/papers``); written out here as the words say:

    sum_i x[i, j] = 1                                   for every job j      (placed once)
    sum_j g_j x[i, j] <= G_i                            for every machine i  (GPUs)
    sum_j c_j* x[i, j] <= C_i,  sum_j m_j* x[i, j] <= M_i  for every machine i  (CPU, memory)
    0 <= x[i, j] <= 1

"Minimise the number of jobs that get fragmented" is not a linear objective; the paper's
bound ("at most 3s jobs fragmented") is the property of a *basic* (vertex) solution of this
LP: it has n + 3s rows, so at most n + 3s non-zero variables, one or more per job, hence at
most 3s jobs with two or more. Solved with ``scipy.optimize.linprog`` and HiGHS' dual
simplex (``highs-ds``), which returns a basic solution, with a zero objective.

At a round the LP re-places running jobs too. Servers with the same free resources, type and
eligibility are interchangeable in it, so its answer may put them in any order; :func:`renew_leases`
picks the order that leaves the most running GPUs where they are (§4.3: "every job requests for a
lease update to continue running on the same server"), a maximum-weight assignment per class of
identical servers (``scipy.optimize.linear_sum_assignment``) that changes no job's fragmentation.

Halyard's rounding (the paper leaves it to "a heuristic rounding off strategy", §4.1.3,
because fractional GPUs cannot be realised): a job the LP puts whole on one machine goes
there; a job it splits is placed by Synergy-TUNE's placement of its ILP vector (whole GPUs,
the fewest servers). :mod:`halyard.policies.synergy` does both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment, linprog
from scipy.sparse import coo_matrix

WHOLE = 1.0 - 1e-6  # an x[i, j] this close to 1 is the job placed whole on machine i


@dataclasses.dataclass(frozen=True)
class SpreadJob:
    """One job of the second LP: its GPUs, its ILP CPUs and memory (totals, eqs. (6), (7)),
    and the machines it may use (its GPU type, schedulable servers)."""

    job_id: str
    gpus: int
    cpus: float
    memory_mb: float
    allowed: np.ndarray  # bool per machine


@dataclasses.dataclass(frozen=True)
class Spread:
    """The second LP's answer. ``status`` is ``"optimal"``, ``"infeasible"`` or ``"unsolved"``
    (HiGHS stopped without an answer); ``x`` (jobs x machines) only when optimal."""

    status: str
    x: np.ndarray | None
    job_ids: tuple[str, ...]

    @property
    def whole(self) -> dict[str, int]:
        """Jobs the LP places on exactly one machine: job -> machine index."""
        if self.x is None:
            return {}
        return {job_id: int(np.argmax(row)) for job_id, row in zip(self.job_ids, self.x, strict=True)
                if row.max() >= WHOLE}

    @property
    def split(self) -> tuple[str, ...]:
        """Jobs the LP spreads over two or more machines (fragmented, §4.1.2)."""
        if self.x is None:
            return ()
        return tuple(job_id for job_id, row in zip(self.job_ids, self.x, strict=True) if row.max() < WHOLE)


def spread(jobs: Sequence[SpreadJob], gpus: np.ndarray, cpus: np.ndarray, memory_mb: np.ndarray) -> Spread:
    """Solve §4.1.2's LP for ``jobs`` on machines with free ``gpus``, ``cpus``, ``memory_mb``."""
    gpus, cpus, memory_mb = (np.asarray(a, dtype=float) for a in (gpus, cpus, memory_mb))
    s = len(gpus)
    if not (len(cpus) == len(memory_mb) == s):
        raise ValueError(f"synergy-opt second LP: capacities per machine differ in length "
                         f"(gpus {s}, cpus {len(cpus)}, memory {len(memory_mb)})")
    for job in jobs:
        if len(job.allowed) != s or min(job.gpus, job.cpus, job.memory_mb) < 0:
            raise ValueError(f"synergy-opt second LP: job {job.job_id!r} needs a machine mask of {s} entries "
                             f"and non-negative GPUs, CPUs and memory (got {len(job.allowed)} entries, "
                             f"{job.gpus}, {job.cpus}, {job.memory_mb})")
    ids = tuple(j.job_id for j in jobs)
    if min(gpus.min(initial=0), cpus.min(initial=0), memory_mb.min(initial=0)) < 0:
        return Spread("infeasible", None, ids)
    if not jobs:
        return Spread("optimal", np.zeros((0, s)), ids)
    cols = [(j, i) for j, job in enumerate(jobs) for i in range(s) if job.allowed[i]]
    if len({j for j, _ in cols}) < len(jobs):  # a job with no machine at all
        return Spread("infeasible", None, ids)
    n = len(cols)
    owner = np.array([j for j, _ in cols])
    machine = np.array([i for _, i in cols])
    once = coo_matrix((np.ones(n), (owner, np.arange(n))), shape=(len(jobs), n))
    rows, vals = [], []
    for d, attr in enumerate(("gpus", "cpus", "memory_mb")):
        rows.append(d * s + machine)
        vals.append(np.array([float(getattr(jobs[j], attr)) for j in owner]))
    fit = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.tile(np.arange(n), 3))), shape=(3 * s, n))
    result = linprog(np.zeros(n), A_ub=fit, b_ub=np.concatenate([gpus, cpus, memory_mb]),
                     A_eq=once, b_eq=np.ones(len(jobs)), bounds=(0, 1), method="highs-ds")
    if result.status == 2:
        return Spread("infeasible", None, ids)
    if result.status != 0 or result.x is None:
        return Spread("unsolved", None, ids)
    x = np.zeros((len(jobs), s))
    x[owner, machine] = np.clip(result.x, 0.0, 1.0)
    return Spread("optimal", x, ids)


def renew_leases(answer: Spread, jobs: Sequence[SpreadJob], home: np.ndarray, alike: Sequence[object]) -> Spread:
    """``answer`` with its servers permuted within each class of identical ones (``alike[i]``: a key
    equal for interchangeable servers) so that the most GPUs of running jobs stay where they run.
    ``home[j, i]``: the GPUs job j holds on server i now (0 for new jobs). Each permuted column is
    feasible wherever the original was (same free resources, same eligible jobs)."""
    if answer.x is None:
        return answer
    x = answer.x
    gpus = np.array([float(j.gpus) for j in jobs])
    out = x.copy()
    classes: dict[object, list[int]] = {}
    for i, key in enumerate(alike):
        classes.setdefault(key, []).append(i)
    for members in classes.values():
        if len(members) < 2:
            continue
        idx = np.array(members)
        # gain[a, b]: running GPUs that stay where they are if the LP's server a is server b
        gain = np.minimum(x[:, idx, None] * gpus[:, None, None], home[:, None, idx]).sum(axis=0)
        rows, cols = linear_sum_assignment(gain, maximize=True)
        out[:, idx[cols]] = x[:, idx[rows]]
    return Spread(answer.status, out, answer.job_ids)
