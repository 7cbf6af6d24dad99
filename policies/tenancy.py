"""Priorities and tenant quotas: Kubernetes' priority preemption and Kueue's ClusterQueues as stages.

* :class:`PriorityFirst` wraps any ordering: a higher ``JobSpec.priority`` goes first, the wrapped
  ordering breaks ties (Kubernetes PriorityClass values: a larger number is more important).
* :class:`TenantQuota` is an admission stage. Each tenant has a nominal GPU quota (the cluster
  TOML's ``[quotas]`` table, Kueue's ``nominalQuota``); a job that fits its tenant's unused quota
  is admitted; one that does not may **borrow** quota other tenants leave idle (Kueue's cohort
  borrowing) if ``borrowing`` is on; otherwise it waits, ``WAITING_BY_POLICY``, naming the quota.
* Preemption stages (Kubernetes' PostFilter): when a job is admitted but cannot be placed, the
  staged pass asks each in turn for victims and places the job on what they free.
  :class:`PriorityPreemption` takes running jobs of a lower priority, lowest first;
  :class:`QuotaReclaim` takes jobs of tenants running above their nominal quota (borrowers), for a
  job within its own quota (Kueue's reclaim).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from halyard.policies.passstate import PassState
from halyard.policies.plan import Plan
from halyard.policies.reasons import by_policy
from halyard.policies.stages import Admission, Ordering, Preemption
from halyard.policies.view import ClusterView, JobInfo

BORROWED_KEY = "tenancy/borrowing"  # PassState: ids of the jobs admitted on borrowed quota this pass


def usage_by_tenant(view: ClusterView) -> Counter[str]:
    """GPUs held by each tenant's running jobs."""
    used: Counter[str] = Counter()
    for job in view.running.values():
        used[job.spec.tenant] += job.num_gpus
    return used


class PriorityFirst(Ordering):
    """A higher ``priority`` first, then the wrapped ordering; preemptive if the wrapped one is."""

    honours = frozenset({"priority"})
    relies_on = frozenset({"priority"})

    def __init__(self, inner: Ordering) -> None:
        self.inner = inner
        self.name = f"priority>{inner.name}"
        self.preemptive = inner.preemptive
        self.needs_rounds = inner.needs_rounds
        self.arrival_order = False
        self.remembers = inner.remembers

    def key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], Any]:
        inner = self.inner.key(view, state)
        return lambda job: (-job.spec.priority, inner(job))

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        self.inner.on_applied(view, plan, state)

    def on_rejected(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        self.inner.on_rejected(view, plan, state)


class TenantQuota(Admission):
    """Kueue-style admission by nominal GPU quota per tenant, with borrowing of idle quota."""

    relies_on = frozenset({"quotas"})  # without the cluster's [quotas] table it admits every job

    def __init__(self, borrowing: bool = True) -> None:
        self.borrowing = borrowing
        self.name = "tenant-quota" if borrowing else "tenant-quota-strict"

    def admit(self, view: ClusterView, jobs: Sequence[JobInfo], plan: Plan, state: PassState) -> Iterable[JobInfo]:
        quotas = view.cluster.quotas
        if not quotas:
            return jobs
        used = usage_by_tenant(view)
        # The cohort's capacity is every nominal quota, and the GPUs no quota names (Kueue lets a
        # tenant borrow whatever of it nobody uses); idle is what nobody uses now.
        idle = max(sum(quotas.values()), view.cluster.total_gpus) - sum(used.values())
        borrowing: set[str] = state.setdefault(BORROWED_KEY, set)
        admitted = []
        for job in jobs:
            tenant, gpus = job.spec.tenant, job.spec.num_gpus
            nominal = quotas.get(tenant, 0)
            if used[tenant] + gpus <= nominal:
                pass  # within its own quota: admitted, reclaiming from borrowers if it must
            elif self.borrowing and gpus <= idle:
                borrowing.add(job.job_id)
            else:
                plan.wait(job.job_id, by_policy(
                    self.name, "tenant {}: {} of its {:#GPU} of quota in use, needs {} more{}", tenant,
                    used[tenant], nominal, gpus, "; borrowing is off" if not self.borrowing else
                    f"; {max(idle, 0)} idle to borrow"))
                continue
            used[tenant] += gpus
            idle -= gpus
            admitted.append(job)
        return admitted


class PriorityPreemption(Preemption):
    """Running jobs of a lower priority than the waiting job, lowest priority first, then the most
    recently started (it loses the least work), as Kubernetes' default preemption picks victims."""

    name = "priority"
    honours = frozenset({"priority"})
    relies_on = frozenset({"priority"})

    def victims(self, view: ClusterView, job: JobInfo, plan: Plan, state: PassState) -> list[JobInfo]:
        lower = [r for r in view.running.values() if r.spec.priority < job.spec.priority]
        return sorted(lower, key=lambda r: (r.spec.priority, -(r.last_assignment_time or 0.0), -r.arrival_seq))


class QuotaReclaim(Preemption):
    """Kueue's reclaim: a job within its tenant's nominal quota takes GPUs back from jobs of tenants
    above theirs (borrowers), the most recently started first."""

    name = "quota-reclaim"
    relies_on = frozenset({"quotas"})

    def victims(self, view: ClusterView, job: JobInfo, plan: Plan, state: PassState) -> list[JobInfo]:
        quotas = view.cluster.quotas
        used = usage_by_tenant(view)
        tenant = job.spec.tenant
        if job.job_id in state.get(BORROWED_KEY, ()) or used[tenant] + job.spec.num_gpus > quotas.get(tenant, 0):
            return []  # only a job within its own quota reclaims
        over = {t for t, g in used.items() if g > quotas.get(t, 0)}
        borrowers = [r for r in view.running.values() if r.spec.tenant in over]
        return sorted(borrowers, key=lambda r: (-(r.last_assignment_time or 0.0), -r.arrival_seq))
