"""Factories shared by the tests: a small real cluster and job specs."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from halyard.datamodel import JobSpec

# 2 racks x 2 nodes x 4 GPUs: small enough to reason about every placement.
SMALL_CLUSTER_TOML = """
name = "small"
[[racks]]
name = "r{i}"
count = 2
uplink_gbit_s = 400
[[racks.nodes]]
name = "{rack}-n{i}"
count = 2
gpu_type = "V100"
gpus = 4
cpus = 12
memory_gb = 250
fabric = "nvlink"
fabric_gbyte_s = 150
nic_gbit_s = 200
"""


@dataclass(frozen=True)
class Servers:
    """One ``[[racks.nodes]]`` group of a cluster file (docs/cluster-format.md): ``count`` servers named
    ``name`` (``{rack}``, ``{i}`` as there) of ``gpus`` GPUs of ``gpu_type`` each."""

    name: str
    gpu_type: str
    gpus: int
    fabric: str
    fabric_gbyte_s: float
    nic_gbit_s: float
    cpus: int = 12
    memory_gb: int = 250
    count: int = 1

    def toml(self) -> str:
        return (f'[[racks.nodes]]\nname = "{self.name}"\ncount = {self.count}\ngpu_type = "{self.gpu_type}"\n'
                f"gpus = {self.gpus}\ncpus = {self.cpus}\nmemory_gb = {self.memory_gb}\nfabric = \"{self.fabric}\"\n"
                f"fabric_gbyte_s = {self.fabric_gbyte_s:g}\nnic_gbit_s = {self.nic_gbit_s:g}\n")


def mixed_toml(*groups: Servers, racks: int = 1, uplink_gbit_s: float = 400, name: str = "mixed") -> str:
    """A cluster file of ``racks`` identical racks (``r0``, ``r1``, ...) each holding ``groups`` in order
    (node order is what first fit follows): the one builder for the tests' mixed-GPU clusters."""
    head = f'name = "{name}"\n[[racks]]\nname = "r{{i}}"\ncount = {racks}\nuplink_gbit_s = {uplink_gbit_s:g}\n'
    return head + "".join(group.toml() for group in groups)


def two_type_toml(nodes: int, gpus: int) -> str:
    """One rack of ``nodes`` A40 servers then ``nodes`` A10 servers of ``gpus`` GPUs each (crius-64's
    GPU types and NICs, src/halyard/data/clusters/crius-64.toml); node indices run on over the rack."""
    return mixed_toml(*(Servers(f"{{rack}}-{kind.lower()}-{{i}}", kind, gpus, "pcie", 32, nic, cpus=48, memory_gb=512,
                                count=nodes) for kind, nic in (("A40", 100), ("A10", 200))), name="two-types")


_ids = itertools.count()


def job(num_gpus: int = 1, *, submit: float = 0.0, iterations: int = 1000, model: str = "resnet50",
        job_id: str | None = None, **kw) -> JobSpec:
    return JobSpec(job_id=job_id or f"j{next(_ids)}", submit_time=submit, model=model,
                   num_gpus=num_gpus, iterations=iterations, **kw)


def record_plans(policy) -> list[tuple[float, list, dict]]:
    """Wrap ``policy.schedule`` on this instance so that each pass's time, actions and reasons are kept in
    the list returned (for comparing two paths of a policy pass by pass)."""
    plans: list[tuple[float, list, dict]] = []
    schedule = policy.schedule

    def recorded(view, state):
        plan = schedule(view, state)
        plans.append((view.now, list(plan.actions), dict(plan.unplaced)))
        return plan

    policy.schedule = recorded
    return plans
