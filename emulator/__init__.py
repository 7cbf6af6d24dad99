"""The performance model: how long an iteration takes for a model on a placement.

``PerformanceModel`` is the one model the simulator and the emulated agents
call. v0 covers per-GPU compute from a sourced catalog (``data/models.toml``),
gradient all-reduce over the slowest network tier a placement crosses, its
overlap with backward compute, and restart costs. Formulas and sources:
``docs/performance-model.md``.
"""

from halyard.emulator.catalog import Catalog, Constants, ModelProfile, load_catalog, parse_catalog
from halyard.emulator.collectives import hierarchical_allreduce_s, ring_allreduce_s
from halyard.emulator.performance import IterationTime, PerformanceModel, UnsupportedGPUError

__all__ = [
    "Catalog", "Constants", "IterationTime", "ModelProfile", "PerformanceModel", "UnsupportedGPUError",
    "hierarchical_allreduce_s", "load_catalog", "parse_catalog", "ring_allreduce_s",
]
