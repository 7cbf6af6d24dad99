"""Factories shared by the tests: a small real cluster and job specs."""

from __future__ import annotations

import itertools

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


def two_type_toml(nodes: int, gpus: int) -> str:
    """One rack of ``nodes`` A40 servers then ``nodes`` A10 servers of ``gpus`` GPUs each (crius-64's
    GPU types and NICs, src/halyard/data/clusters/crius-64.toml); node indices run on over the rack."""
    blocks = "".join(f"""
[[racks.nodes]]
name = "{{rack}}-{kind.lower()}-{{i}}"
count = {nodes}
gpu_type = "{kind}"
gpus = {gpus}
cpus = 48
memory_gb = 512
fabric = "pcie"
fabric_gbyte_s = 32
nic_gbit_s = {nic}
""" for kind, nic in (("A40", 100), ("A10", 200)))
    return f'name = "two-types"\n[[racks]]\nname = "r{{i}}"\nuplink_gbit_s = 400\n{blocks}'


_ids = itertools.count()


def job(num_gpus: int = 1, *, submit: float = 0.0, iterations: int = 1000, model: str = "resnet50",
        job_id: str | None = None, **kw) -> JobSpec:
    return JobSpec(job_id=job_id or f"j{next(_ids)}", submit_time=submit, model=model,
                   num_gpus=num_gpus, iterations=iterations, **kw)
