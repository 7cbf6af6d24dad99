"""What a policy derives from the cluster and the performance model alone, computed once.

The cluster is fixed for a run and the performance model is a pure function, so
a node-shape array, the GPU types a job fits or a job's compute-only iteration
time are the same in every pass. :class:`ClusterFacts` memoises them for all
the policy's stages (one per core, reached through ``ClusterView.facts``): no
stage keeps its own shape cache, and nothing here depends on the jobs' state,
which is per pass (:class:`~halyard.policies.passstate.PassState`) or the
policy's learning (``on_applied``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

from halyard.datamodel import Cluster, JobSpec

if TYPE_CHECKING:
    from halyard.policies.view import PerformanceEstimator

# The GPU types a job may be placed on: one type, a set of types, or None for any
# (:meth:`ClusterFacts.gpu_types_for` gives a job's, memory included).
GpuTypes = str | frozenset[str] | None


class ClusterShape:
    """Static per-cluster arrays: GPUs, CPUs, memory and rack of every node, by node index."""

    def __init__(self, cluster: Cluster) -> None:
        nodes = cluster.nodes
        self.gpus = np.array([n.gpus for n in nodes], dtype=np.int64)
        self.cpus = np.array([n.cpus for n in nodes], dtype=np.int64)
        self.memory_mb = np.array([n.memory_mb for n in nodes], dtype=np.int64)
        self.rack = np.array([n.rack_index for n in nodes], dtype=np.int64)
        self.n_racks = len(cluster.racks)
        self.rack_nodes = [np.array(r.node_indices, dtype=np.int64) for r in cluster.racks]
        # Row r: rack r's node indices, padded with len(nodes) (an index past the last node) to the largest rack's
        # size, so a per-node array with one 0 appended reads every rack's nodes at once (topology.on_rack).
        width = max((len(r) for r in self.rack_nodes), default=0)
        self.rack_matrix = np.full((self.n_racks, width), len(nodes), dtype=np.int64)
        for r, members in enumerate(self.rack_nodes):
            self.rack_matrix[r, :len(members)] = members
        self._types = tuple(n.gpu_type for n in nodes)
        self._excluded: dict[GpuTypes, np.ndarray] = {}
        self._largest: dict[GpuTypes, tuple[int, int]] = {}
        self._total: dict[GpuTypes, int] = {}

    def excluded(self, gpu_types: GpuTypes) -> np.ndarray | None:
        """Mask of the nodes whose GPU type is not in ``gpu_types`` (None: no restriction)."""
        if gpu_types is None:
            return None
        mask = self._excluded.get(gpu_types)
        if mask is None:
            allowed = (gpu_types,) if isinstance(gpu_types, str) else gpu_types
            mask = self._excluded[gpu_types] = np.array([t not in allowed for t in self._types], dtype=bool)
        return mask

    def largest(self, gpu_types: GpuTypes) -> tuple[int, int]:
        """(GPUs of the largest node, GPUs of the largest rack) counting nodes of ``gpu_types`` (0 if none)."""
        sizes = self._largest.get(gpu_types)
        if sizes is None:
            excluded = self.excluded(gpu_types)
            gpus = self.gpus if excluded is None else np.where(excluded, 0, self.gpus)
            rack = np.bincount(self.rack, weights=gpus, minlength=self.n_racks)
            sizes = self._largest[gpu_types] = (int(gpus.max(initial=0)), int(rack.max(initial=0)))
        return sizes

    def max_gpus_per_node(self, gpu_types: GpuTypes) -> int:
        """GPUs of the largest node of ``gpu_types`` (any type if None; 0 if there is none)."""
        return self.largest(gpu_types)[0]

    def total_gpus(self, gpu_types: GpuTypes) -> int:
        """GPUs of ``gpu_types`` in the whole cluster, schedulable or not (worked out once per type set: a
        reason for every waiting job of a pass asks it)."""
        total = self._total.get(gpu_types)
        if total is None:
            excluded = self.excluded(gpu_types)
            total = self._total[gpu_types] = int(self.gpus.sum() if excluded is None else self.gpus[~excluded].sum())
        return total


_MISSING = object()


class ClusterFacts:
    """Memoised pure functions of (cluster, performance model) that stages share."""

    def __init__(self, cluster: Cluster, perf: PerformanceEstimator) -> None:
        self.cluster = cluster
        self.perf = perf
        self.shape = ClusterShape(cluster)
        self._memo: dict[tuple[str, Hashable], Any] = {}

    def memo(self, namespace: str, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per (``namespace``, ``key``); for values that depend on nothing but
        the cluster and the performance model (a profile of a model, a compute time)."""
        full = (namespace, key)
        value = self._memo.get(full, _MISSING)
        if value is _MISSING:
            value = self._memo[full] = compute()
        return value

    def gpu_types_for(self, spec: JobSpec, gpus: int = 0) -> frozenset[str] | None:
        """The GPU types ``spec`` may be placed on by a policy that schedules from the data-parallel
        profile (Crius §8.1's baselines), or None for every type of the cluster.

        Of :meth:`allowed_types`, those on which one data-parallel worker fits the GPU memory
        (``perf.fits_memory``, micro-batch fallback included). A job whose worker fits none of them
        (a model too large for one GPU) gets the types where some tensor/pipeline plan of ``gpus``
        GPUs (default its ``num_gpus``) fits (``perf.runs_on``), and runs that plan
        (:mod:`halyard.policies.adaptive`). Crius itself weighs every allowed type: its Cells are
        estimated there and a Cell no plan fits is infeasible (Fig. 3). None is the common case -- no
        constraint and every type fits -- so placement needs no mask; an empty set means no node will do.
        """
        gpus = gpus or spec.num_gpus
        return self.memo("gpu-types", (spec.model, spec.batch_size, spec.parallelism, spec.gpu_type, spec.num_gpus,
                                       gpus), lambda: self._gpu_types(spec, gpus))

    def allowed_types(self, spec: JobSpec) -> tuple[str, ...]:
        """The cluster's GPU types the job's ``gpu_type`` constraint allows (all when it has none),
        in cluster order: the one type rule, before memory."""
        present = self.cluster.gpu_types
        return tuple(present) if spec.gpu_type is None else tuple(t for t in present if t == spec.gpu_type)

    def _gpu_types(self, spec: JobSpec, gpus: int) -> frozenset[str] | None:
        wanted = self.allowed_types(spec)
        fit = frozenset(t for t in wanted if self.perf.fits_memory(spec, t))
        if not fit:  # fits no eligible type data parallel: where a tensor/pipeline plan of its GPUs fits
            fit = frozenset(t for t in wanted if self.perf.runs_on(spec, t, gpus))
        return None if spec.gpu_type is None and len(fit) == len(self.cluster.gpu_types) else fit

    def compute_s(self, spec: JobSpec, gpu_type: str) -> float:
        """Compute-only seconds per iteration on one GPU of ``gpu_type`` (Dally's ideal run time)."""
        return self.memo("compute-s", (spec.model, spec.batch_size, gpu_type),
                         lambda: self.perf.ideal_iteration_time(spec, gpu_type))

    def reference_compute_s(self, spec: JobSpec) -> float:
        """Compute-only seconds per iteration of ``spec`` on one GPU of its reference type: its
        constraint, else the fastest type it fits (:meth:`gpu_types_for`). One figure per job,
        wherever it runs (Dally §4.3.1: "running a single training iteration of the model on a
        single GPU")."""
        key = (spec.model, spec.batch_size, spec.parallelism, spec.gpu_type, spec.num_gpus)
        return self.memo("reference-compute-s", key, lambda: self._reference_compute_s(spec))

    def _reference_compute_s(self, spec: JobSpec) -> float:
        if spec.gpu_type is not None:
            return self.compute_s(spec, spec.gpu_type)
        allowed = self.gpu_types_for(spec)
        types = [t for t in self.cluster.gpu_types if allowed is None or t in allowed]
        if not types:  # fits no type: the cluster's first, so the figure is still defined
            return self.compute_s(spec, self.cluster.gpu_types[0])
        return min(self.compute_s(spec, t) for t in types)
