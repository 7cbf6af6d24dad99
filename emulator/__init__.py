"""The performance model: how long an iteration takes for a model on a placement.

``PerformanceModel`` is the one model the simulator and the emulated agents
call: per-GPU compute from a sourced catalog (``data/models.toml``) on every
GPU type of its ``[gpus]`` table, memory footprints, bucketed gradient
all-reduce over the slowest network tier a placement crosses and its overlap
with backward compute, and restart costs. Formulas and sources:
``docs/performance-model.md``.
"""

from halyard.emulator.catalog import (
    Catalog,
    Constants,
    GpuSpec,
    ModelProfile,
    extend_catalog,
    load_catalog,
    load_model_catalog,
    parse_catalog,
)
from halyard.emulator.collectives import (
    allreduce_s,
    buckets_for,
    exposed_s,
    hierarchical_allreduce_s,
    ring_allreduce_s,
    tree_allreduce_s,
)
from halyard.emulator.contention import (
    DemandProfile,
    Phase,
    shared_link_iteration_times,
)
from halyard.emulator.performance import IterationTime, MemoryFootprint, PerformanceModel, UnsupportedGPUError

__all__ = [
    "Catalog", "Constants", "DemandProfile", "GpuSpec", "IterationTime", "MemoryFootprint", "ModelProfile",
    "PerformanceModel", "Phase", "UnsupportedGPUError", "allreduce_s", "buckets_for",
    "exposed_s", "extend_catalog", "hierarchical_allreduce_s", "load_catalog", "load_model_catalog", "parse_catalog",
    "ring_allreduce_s", "shared_link_iteration_times", "tree_allreduce_s",
]
