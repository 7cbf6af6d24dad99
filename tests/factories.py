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


_ids = itertools.count()


def job(num_gpus: int = 1, *, submit: float = 0.0, iterations: int = 1000, model: str = "resnet50",
        job_id: str | None = None, **kw) -> JobSpec:
    return JobSpec(job_id=job_id or f"j{next(_ids)}", submit_time=submit, model=model,
                   num_gpus=num_gpus, iterations=iterations, **kw)
