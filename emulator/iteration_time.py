"""How long one iteration takes on an allocation: compute, the gradient all-reduce and how much of it
backward hides, under data, tensor, pipeline or hybrid plans (docs/performance-model.md).

- compute: :class:`~halyard.emulator.compute.ComputeTime` on the allocation's GPU type (the
  slowest type if mixed);
- communication: the model's fp32 gradients all-reduced in DDP buckets over the slowest tier the
  placement crosses (:mod:`halyard.emulator.collectives`);
- overlap: buckets become ready during backward and go out one after another:
  ``exposed = max(C/B, C - (1 - 1/B) x backward)``.

The simulator asks at every job start, so an allocation is reduced to a small hashable
:data:`~halyard.emulator.tightest.Shape` and results are cached per instance. A part of
:class:`~halyard.emulator.PerformanceModel`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from halyard.datamodel import Allocation, Cluster, JobSpec, NodeAllocation, StageProfile, Tier
from halyard.emulator.collectives import GBYTE, allreduce_s, buckets_for, exposed_s, hierarchical_allreduce_s
from halyard.emulator.compute import ComputeTime
from halyard.emulator.elastic import determinism_factor, est_step_s
from halyard.emulator.parallel import (
    JobTiming,
    assembled_iteration_s,
    data_parallel_expert_s,
    data_parallel_timing,
    is_data_parallel,
    plan_timing,
    profile_plan,
    with_up_demand,
)
from halyard.emulator.tightest import ClusterIndex, NodeInfo, Shape, index_cluster, tightest_nodes, tightest_shape


@dataclass(frozen=True, slots=True)
class IterationTime:
    """One iteration of a data-parallel job, in seconds.

    ``communication_s`` is the whole gradient all-reduce; ``exposed_s`` the
    part of it not hidden behind backward compute; ``total_s`` =
    ``compute_s + exposed_s``; ``tier`` the slowest tier the placement crosses.
    """

    compute_s: float
    communication_s: float
    exposed_s: float
    total_s: float
    tier: Tier


class IterationTimeModel:
    """Iteration times and link demands of jobs on allocations; the options are
    :class:`~halyard.emulator.PerformanceModel`'s (checked there)."""

    def __init__(self, compute: ComputeTime, *, allreduce: str, overlap: str, data_stalls: bool,
                 communication: bool, measured_up_demand: Mapping[str, float] | None = None) -> None:
        self.compute = compute
        self._measured = dict(measured_up_demand or {})
        self._allreduce = allreduce
        self._overlap = overlap
        self._data_stalls = data_stalls
        self._communication = communication
        c = compute.catalog.constants
        self._latency = {Tier.GPU: 0.0, Tier.NODE: c.node_latency_s,
                         Tier.RACK: c.rack_latency_s, Tier.SPINE: c.spine_latency_s}
        self._clusters: dict[int, ClusterIndex] = {}
        self._timings: dict[tuple[str, int, Shape], IterationTime] = {}
        self._stalled: dict[tuple[str, int, Shape, float, float], IterationTime] = {}
        self._tightest: dict[tuple[int, str, int], Shape] = {}
        self._plans: dict[tuple[object, ...], JobTiming] = {}

    @property
    def overlap(self) -> str:
        """How the gradient all-reduce overlaps compute: ``ddp`` or ``layerwise``."""
        return self._overlap

    def tier_latency_s(self, tier: Tier) -> float:
        """Latency of one collective step at ``tier`` (the catalog's node/rack/spine constants)."""
        return self._latency[tier]

    # ----------------------------------------------------------------- the answers
    def job_timing(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> JobTiming:
        """The one answer for a job on an allocation: its iteration time and its Up/Down demand
        on every NIC and rack uplink it crosses, under its data, tensor, pipeline or hybrid plan
        (``spec.parallelism``, ``allocation.stages``; :mod:`halyard.emulator.parallel`).

        The simulator's pacer, the fabric and the emulated agents all call this, so the phases
        the fabric charges a job for are the ones its iteration time was computed with. Plans
        other than data parallelism are cached per (model, batch, plan, GPUs per node).
        """
        if (spec.parallelism is None and not allocation.stages) or is_data_parallel(spec, allocation):
            timing = self.iteration_time(spec, allocation, cluster)
            if len(allocation.nodes) < 2 or timing.communication_s <= 0.0:
                return JobTiming(timing, ())  # no NIC crossed (a part without GPUs holds no link either)
            dp_key = (id(cluster), spec.model, timing, tuple(p.node for p in allocation.nodes if p.gpus))
            hit = self._plans.get(dp_key)
            if hit is None:
                hit = self._plans[dp_key] = self._with_measured(
                    spec.model, data_parallel_timing(self, spec, allocation, cluster, timing))
            return hit
        key = (id(cluster), spec.model, spec.batch_size, spec.parallelism, allocation.stages,
               spec.num_gpus if spec.parallelism is None else 0,  # a Cell's global batch (parallel._replicas)
               tuple((p.node, len(p.gpus)) for p in allocation.nodes if p.gpus))
        hit = self._plans.get(key)
        if hit is None:
            self._indexed(cluster)  # keeps the cluster alive, so its id() stays unique while cached
            hit = self._plans[key] = self._with_measured(spec.model, plan_timing(self, spec, allocation, cluster))
        return hit

    def _with_measured(self, model: str, timing: JobTiming) -> JobTiming:
        """``timing`` with ``measured_up_demand``'s demand on its Up phases where the model has one."""
        demand = self._measured.get(model)
        return timing if demand is None else with_up_demand(timing, demand)

    def profile_stages(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> tuple[StageProfile, ...]:
        """One profiling of the plan ``allocation.stages`` (Crius §5.1, Fig. 9), per stage: what an
        agent's ``ProfileResult`` carries (:func:`~halyard.emulator.parallel.profile_plan`)."""
        return profile_plan(self, spec, allocation, cluster)

    def assembled_iteration_s(self, spec: JobSpec, stages: Sequence[StageProfile]) -> float:
        """Iteration time of the plan assembled from profiled ``stages`` (Crius §5.1's assembly; equal
        to :meth:`job_timing` of that plan on the profiled GPUs)."""
        return assembled_iteration_s(self, spec, stages)

    def iteration_time(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> IterationTime:
        """Compute, all-reduce and exposed time of one iteration on ``allocation``.

        Data parallel here; a tensor, pipeline or hybrid plan is :meth:`job_timing`'s iteration.
        """
        if (spec.parallelism is not None or allocation.stages) and not is_data_parallel(spec, allocation):
            return self.job_timing(spec, allocation, cluster).iteration
        index = self._clusters.get(id(cluster))
        if index is None or index.cluster is not cluster:  # (inline: the simulator's most frequent call)
            index = self._indexed(cluster)
        nodes = index.nodes
        gpu_type: str | None = None
        types: set[str] | None = None
        n = m = kmax = 0
        intra = inter = math.inf
        rack = -1
        multi_rack = False
        for na in allocation.nodes:
            k = len(na.gpus)
            if not k:
                continue
            try:
                t, _, fabric, nic, r = nodes[na.node]
            except KeyError:
                raise KeyError(f"allocation names node {na.node!r}, which is not in cluster "
                               f"{cluster.name!r}") from None
            if gpu_type is None:
                gpu_type = t
            elif t != gpu_type:
                types = (types or {gpu_type}) | {t}
            n += k
            m += 1
            if k > kmax:
                kmax = k
            if k > 1 and fabric < intra:
                intra = fabric
            if nic < inter:
                inter = nic
            if r != rack:
                multi_rack = multi_rack or rack >= 0
                rack = r
        if gpu_type is None:
            raise ValueError("allocation holds no GPUs")
        if multi_rack:
            inter = min(inter, index.cluster.inter_rack_gbyte_s({nodes[na.node][4] for na in allocation.nodes
                                                                 if na.gpus}))
            tier = Tier.SPINE
        else:
            tier = Tier.GPU if n == 1 else Tier.NODE if m == 1 else Tier.RACK
        shape: Shape = (
            gpu_type if types is None else tuple(sorted(types)), n, m, kmax,
            intra if kmax > 1 else 0.0, inter if m > 1 else 0.0, tier,
        )
        if self._data_stalls:
            cpus = mem = math.inf
            for na in allocation.nodes:
                k = len(na.gpus)
                if not k:
                    continue
                if na.cpus == 0 and na.memory_mb == 0:  # the allocation does not say: proportional share
                    c, g = index.host[na.node]
                else:
                    c, g = na.cpus / k, na.memory_mb / 1000.0 / k
                cpus, mem = min(cpus, c), min(mem, g)
            timing = self._timing_stalled(spec.model, spec.batch_size, shape, cpus, mem)
        else:
            timing = self._timing(spec.model, spec.batch_size, shape)
        if allocation.logical_workers > n:
            timing = self._time_sliced(spec, allocation, nodes, timing)
        if spec.logical_workers:
            timing = self._deterministic(spec, timing, heterogeneous=types is not None)
        return timing

    def consolidated_iteration_time(
        self, spec: JobSpec, cluster: Cluster, gpu_type: str | None = None
    ) -> float:
        """Iteration time on the tightest placement of ``spec.num_gpus`` GPUs of one type.

        Whole nodes of the type are filled, largest first, inside one rack when
        one rack has enough; a job larger than the cluster's GPUs of that type
        is costed as if the cluster had more copies of its largest node.
        """
        index = self._clusters.get(id(cluster))
        if index is None or index.cluster is not cluster:
            index = self._indexed(cluster)
        gtype = gpu_type or spec.gpu_type or index.reference_gpu
        # The index keeps the cluster alive, so its id() is not reused while cached.
        key = (id(cluster), gtype, spec.num_gpus)
        shape = self._tightest.get(key)
        if shape is None:
            shape = self._tightest[key] = tightest_shape(index, gtype, spec.num_gpus)
        if spec.parallelism is not None and not is_data_parallel(spec, None):
            nodes = tightest_nodes(index, gtype, spec.num_gpus)
            if nodes is not None:  # else (larger than the cluster) costed as data parallel, below
                allocation = Allocation(tuple(NodeAllocation(name, tuple(range(k)), 0, 0) for name, k in nodes))
                return self.job_timing(spec, allocation, cluster).iteration.total_s
        if self._data_stalls:
            best = index.best_host.get(gtype)
            if best is None:  # once per GPU type: this was a scan of every node per call
                best = index.best_host[gtype] = max(
                    (h for name, h in index.host.items() if index.nodes[name][0] == gtype), key=lambda h: (h[0], h[1]))
            cpus, mem = best
            return self._timing_stalled(spec.model, spec.batch_size, shape, cpus, mem).total_s
        return self._timing(spec.model, spec.batch_size, shape).total_s

    def iterations_for(self, spec: JobSpec, cluster: Cluster) -> int:
        """``spec.iterations``, or the iterations whose consolidated run time is ``duration_s``."""
        if spec.iterations > 0:
            return spec.iterations
        if spec.duration_s is None:
            raise ValueError(f"job {spec.job_id}: neither iterations nor duration_s is set")
        return max(1, round(spec.duration_s / self.consolidated_iteration_time(spec, cluster)))

    # ----------------------------------------------------------------- internals
    def _indexed(self, cluster: Cluster) -> ClusterIndex:
        index = self._clusters.get(id(cluster))
        if index is not None and index.cluster is cluster:
            return index
        index = index_cluster(cluster)
        if id(cluster) in self._clusters:  # defensive: drop shapes of an object that had this id
            self._tightest = {k: v for k, v in self._tightest.items() if k[0] != id(cluster)}
        self._clusters[id(cluster)] = index
        return index

    def _timing(self, model: str, batch: int, shape: Shape) -> IterationTime:
        key = (model, batch, shape)
        hit = self._timings.get(key)
        if hit is not None:
            return hit
        profile = self.compute.profile(model)
        catalog = self.compute.catalog
        gpu_key, n, m, kmax, intra, inter, tier = shape
        if isinstance(gpu_key, str):
            compute = self.compute.compute_s(profile, gpu_key, batch)
        else:  # mixed GPU types: data parallelism waits for the slowest
            compute = max(self.compute.compute_s(profile, g, batch) for g in gpu_key)
        overhead = catalog.tier_overhead.get(model)
        if overhead is not None:  # Dally §4.2.1: the tier's exposed-communication % applied to compute
            exposed = 0.0 if tier is Tier.GPU else compute * overhead[tier - Tier.NODE]
            timing = IterationTime(compute_s=compute, communication_s=exposed, exposed_s=exposed,
                                   total_s=compute + exposed, tier=tier)
            self._timings[key] = timing
            return timing
        size = profile.reduced_gradient_bytes(n)
        buckets = buckets_for(size, catalog.constants.ddp_bucket_bytes)
        if not self._communication:
            timing = IterationTime(compute_s=compute, communication_s=0.0, exposed_s=0.0, total_s=compute, tier=tier)
            self._timings[key] = timing
            return timing
        if tier is Tier.GPU:
            comm = 0.0
        elif tier is Tier.NODE:
            comm = allreduce_s("ring", size, n, intra, self._latency[Tier.NODE], messages=buckets)
        else:
            comm = hierarchical_allreduce_s(size, kmax, m, intra, inter,
                                            self._latency[Tier.NODE], self._latency[tier],
                                            messages=buckets, inter_algorithm=self._allreduce)
        window = compute if self._overlap == "layerwise" else profile.backward_fraction * compute
        exposed = exposed_s(comm, window, buckets)
        # A GShard MoE model's all-to-alls sit between its layers' computations: never hidden.
        expert = data_parallel_expert_s(self, model, batch, n, kmax, intra, inter, self._latency[tier])
        timing = IterationTime(compute_s=compute, communication_s=comm + expert, exposed_s=exposed + expert,
                               total_s=compute + exposed + expert, tier=tier)
        self._timings[key] = timing
        return timing

    def _timing_stalled(self, model: str, batch: int, shape: Shape, cpus: float, mem: float) -> IterationTime:
        key = (model, batch, shape, cpus, mem)
        hit = self._stalled.get(key)
        if hit is not None:
            return hit
        base = self._timing(model, batch, shape)
        curve = self.compute.host_curve(model)
        timing = base
        if curve is not None:
            p = self.compute.profile(model)
            scale = (batch or p.reference_batch) / p.reference_batch
            host = scale * max(curve.cpu_s(cpus), curve.fetch_s(mem))
            if host > base.compute_s:  # the GPU waits for input; the all-reduce may hide in the wait
                total = max(host, base.total_s)
                timing = IterationTime(compute_s=host, communication_s=base.communication_s,
                                       exposed_s=total - host, total_s=total, tier=base.tier)
        self._stalled[key] = timing
        return timing

    @staticmethod
    def _deterministic(spec: JobSpec, timing: IterationTime, heterogeneous: bool) -> IterationTime:
        """An EasyScale job trains bit-for-bit reproducibly (D1; D1+D2 on mixed GPU types), which
        slows its compute by :func:`halyard.emulator.elastic.determinism_factor` (§5.1.3)."""
        compute = timing.compute_s * determinism_factor(spec.model, heterogeneous)
        return IterationTime(compute_s=compute, communication_s=timing.communication_s,
                             exposed_s=timing.exposed_s, total_s=compute + timing.exposed_s, tier=timing.tier)

    def _time_sliced(self, spec: JobSpec, allocation: Allocation, nodes: dict[str, NodeInfo],
                     timing: IterationTime) -> IterationTime:
        """One global step of a job whose GPUs time-slice several logical workers each
        (EasyScale §3.2): GPU g runs its ``A_g`` ESTs' local steps one after another, each
        the per-GPU batch's compute on its type (data stalls included: the one-worker compute
        scaled by the same factor), copying gradients behind the next EST
        (:func:`halyard.emulator.elastic.est_step_s`); the all-reduce, once per step, overlaps
        the last EST's backward as it would a single worker's, so it shows as before."""
        ideal = {t: self.compute.ideal_iteration_time(spec, t)
                 for t in {nodes[p.node][0] for p in allocation.nodes if p.gpus}}
        stall = timing.compute_s / max(ideal.values())
        compute = [ideal[nodes[p.node][0]] * stall for p in allocation.nodes for _ in p.workers]
        ests = [a for p in allocation.nodes for a in p.workers]
        copy = (self.compute.profile(spec.model).gradient_bytes
                / (self.compute.catalog.constants.gradient_copy_gbyte_s * GBYTE) if self._communication else 0.0)
        local = est_step_s(compute, ests, [copy] * len(ests))
        return IterationTime(compute_s=local, communication_s=timing.communication_s, exposed_s=timing.exposed_s,
                             total_s=local + timing.exposed_s, tier=timing.tier)
