"""Synergy-OPT (§4.1.1): the ILP that gives every runnable job its CPU and memory.

Idealised setting: the CPU cores and memory of all schedulable servers form one
super machine. Variables ``y[j, (c, m)]`` in {0, 1} pick one point of job j's
sensitivity matrix (per GPU; the job takes ``g_j`` times it):

    maximise   sum_j sum_(c,m) W_j[c, m] y[j, (c, m)]                       (1)
    subject to sum_j sum c g_j y <= C,  sum_j sum m g_j y <= M              (2), (3)
               sum_(c,m) y[j, (c, m)] = 1                   for every j      (4)
               sum_(c,m) W_j[c, m] y[j, (c, m)] >= W_j[C_g, M_g]  for every j (5)

``W_j`` is normalised to 1.0 at the proportional share, so (5) keeps only points
with ``W >= 1`` (and the all-proportional solution is always feasible). Only
the Pareto points of each matrix are variables (a point another one beats on
throughput with no more CPU and memory is never chosen by an optimum). Solved
with ``scipy.optimize.milp`` (HiGHS). The second LP of §4.1.2 (spreading the
super machine's vectors over the servers) is :mod:`halyard.policies.synergy_opt_placement`;
the ILP's objective is kept as the pass's upper bound (``Opt.last_bound``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from halyard.policies.view import ClusterView, JobInfo

if TYPE_CHECKING:
    from halyard.policies.synergy_profile import SensitivityProfile

# No wall-clock limit: a time limit made the answer depend on the machine's speed (a slow
# machine got a worse incumbent). The ILP is solved to HiGHS' optimality (its default relative
# MIP gap, 1e-4, a property of the problem, not of the machine), or the pass says it was not solved.
# Its work is bounded by a branch-and-bound node count instead, which is deterministic: OPT's time
# grows exponentially with the cluster (Synergy §5.6), and one pass must not hang the control
# plane. Our choice of bound; a pass that reaches it is reported as not solved.
ILP_NODE_LIMIT = 10_000


def pareto_points(profile: SensitivityProfile, max_cpus: int, max_memory_mb: int) -> list[tuple[int, int, float]]:
    """(cpus, memory MB, W) per GPU with W >= 1, no more than the caps, none dominated."""
    points = []
    for i, c in enumerate(profile.cpus):
        if c > max_cpus:
            break
        if c not in profile.measured:  # only profiled CPU points: their W is measured, not interpolated
            continue
        for k, m in enumerate(profile.memory_mb):
            if m > max_memory_mb:
                break
            w = float(profile.matrix[i, k])
            if w >= 1.0 - 1e-9:
                points.append((c, m, w))
    keep = []
    for c, m, w in points:
        if not any(c2 <= c and m2 <= m and w2 >= w - 1e-12 and (c2, m2) != (c, m) for c2, m2, w2 in points):
            keep.append((c, m, w))
    if not keep:  # the proportional point (W = 1) is always there on a grid that includes it
        keep.append((profile.proportional_cpus, profile.proportional_memory_mb, 1.0))
    return keep


def opt_vectors(view: ClusterView, jobs: Sequence[JobInfo], profiles: Sequence[SensitivityProfile],
                caps: Sequence[tuple[int, int]], *, node_limit: int = ILP_NODE_LIMIT,
                ) -> tuple[dict[str, tuple[int, int]] | None, float | None]:
    """The ILP's (CPUs, memory MB) per GPU for each job, and its objective; (None, None) when HiGHS
    does not report an optimum (status 0) within ``node_limit`` branch-and-bound nodes."""
    if not jobs:
        return {}, 0.0
    free = view.free
    schedulable = free.schedulable
    cpus_total = float(sum(n.cpus for n in view.cluster.nodes if schedulable[n.index]))
    memory_total = float(sum(n.memory_mb for n in view.cluster.nodes if schedulable[n.index]))
    cols: list[tuple[int, int, int, float]] = []  # (job index, cpus, memory, W)
    for j, (profile, (cap_c, cap_m)) in enumerate(zip(profiles, caps, strict=True)):
        for c, m, w in pareto_points(profile, cap_c, cap_m):
            cols.append((j, c, m, w))
    n = len(cols)
    gpus = np.array([jobs[j].num_gpus for j, _, _, _ in cols], dtype=float)
    cost_c = np.array([c for _, c, _, _ in cols], dtype=float) * gpus
    cost_m = np.array([m for _, _, m, _ in cols], dtype=float) * gpus
    weight = np.array([w for _, _, _, w in cols])
    owner = np.array([j for j, _, _, _ in cols])
    one = coo_matrix((np.ones(n), (owner, np.arange(n))), shape=(len(jobs), n))
    constraints = [
        LinearConstraint(np.vstack([cost_c, cost_m]), -np.inf, np.array([cpus_total, memory_total])),
        LinearConstraint(one, 1.0, 1.0),
    ]
    result = milp(-weight, constraints=constraints, integrality=np.ones(n), bounds=Bounds(0, 1),
                  options={"node_limit": node_limit})
    if result.status != 0 or result.x is None:
        return None, None
    chosen: dict[str, tuple[int, int]] = {}
    for col in np.flatnonzero(result.x > 0.5):
        j, c, m, _ = cols[col]
        chosen[jobs[j].job_id] = (c, m)
    return chosen, float(-result.fun)
