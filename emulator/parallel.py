"""Iteration time and per-link demand of a job under data, tensor, pipeline or hybrid parallelism.

:meth:`halyard.emulator.PerformanceModel.job_timing` is the one entry point; the
simulator's pacer, the fabric and the emulated agents all call it, so the Up/Down
phases a job puts on a link are the ones its iteration time was computed with.

A data-parallel job (``JobSpec.parallelism`` None or data-only, no multi-stage
``Allocation.stages``) keeps the data-parallel model of
:class:`~halyard.emulator.PerformanceModel` unchanged, with its all-reduce profile
(Cassini Fig. 4.1a) on the NIC of every node it spans and the uplink of every
rack when it spans racks. Any other plan is costed here:

- **Stages.** ``Allocation.stages`` (a Crius Cell's per-stage DP x TP plan), else
  ``parallelism.pipeline`` stages of ``data x tensor`` GPUs. The allocation's GPUs,
  in allocation order, fill the stages in turn (an allocation of another size
  than ``num_gpus`` -- an elastic resize -- keeps the tensor and pipeline
  degrees and changes the data degree); inside a stage tensor-parallel
  groups are consecutive GPUs (Megatron-LM's rank order: tensor innermost, so a
  group stays inside a node's NVSwitch when it can) and data-parallel groups take
  every ``tensor``-th GPU. Each stage holds ``1/stages`` of the layers (Crius
  §6.1 cuts stages by FLOPs, so equal compute).
- **Micro-batches.** ``B = 4 x stages`` (Crius §5.1, Fig. 10: "Crius follows GPipe
  to set it to 4x the number of stages"); 1 without a pipeline. Under a uniform
  ``parallelism`` plan a micro-batch is the job's per-GPU batch ``b`` for each of
  its ``parallelism.data`` replicas (Megatron-LM's convention; with 1F1B a stage
  keeps one micro-batch per stage in flight). A Cell's stage plan
  (``Allocation.stages``) splits the job's global batch into the ``B``
  micro-batches, as GPipe does, so every Cell of a job trains the same samples
  per iteration (:func:`_cell_split`).
- **Stage latency** per micro-batch (forward + backward), Crius'
  ``T_i = compute_i + comm_i``: the compute of the stage's share of the layers
  for its samples on its slowest GPU, divided over its DP x TP GPUs
  (:func:`~halyard.emulator.elastic.stage_latency_s`), plus the tensor-parallel
  collectives of every layer on the critical path -- with sequence parallelism
  two all-gathers and two reduce-scatters per layer in forward and the same in
  backward (Korthikanti et al., MLSys'23 §4.2.2), each a ring of ``t - 1``
  steps moving ``(t-1)/t`` of one layer's output over the slowest tier the group
  spans -- plus, for a GShard MoE model (catalog ``moe_layers``), the
  expert-parallel all-to-alls of each of its MoE layers (:func:`expert_all_to_all`)
  -- plus the send/recv of the activation (forward) and its gradient
  (backward) from the previous stage over the tier crossed.
- **Pipeline** (Crius §5.1): ``sum_i T_i + (B - 1) x (T_s - T_comm,s)``
  (:func:`~halyard.emulator.elastic.pipeline_latency_s`).
- **Data-parallel all-reduce per stage**: each stage's gradients (its share,
  divided over its tensor shards) all-reduced in DDP buckets by each
  data-parallel group, as a ring over the slowest tier the group spans; it
  overlaps the last micro-batch's backward (the model's overlap rule) and the
  slowest stage's exposed part ends the iteration, followed by the optimizer
  step of each GPU's shard.
- **Links.** Groups that run at once and cross the same NIC or uplink share it:
  a collective never runs faster than its bytes on the busiest link it crosses
  allow. Per link, the profile is one iteration of Up/Down phases (Cassini
  Fig. 4.1c/d): the forward micro-batches (tensor collectives and activation
  sends), the backward ones, the stage all-reduce, then Down for the rest.
- **Heterogeneous GPUs.** A stage waits for its slowest GPU; the pipeline for
  its slowest stage.

Data stalls (Synergy) are applied to data-parallel jobs only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from halyard.datamodel import Allocation, Cluster, JobSpec, LinkKey, StageCost, StagePlan, StageProfile, Tier
from halyard.emulator.collectives import GBYTE, all_to_all_s, buckets_for, exposed_s
from halyard.emulator.contention import DemandProfile, Phase, profile_from_iteration
from halyard.emulator.elastic import pipeline_latency_s, stage_latency_s
from halyard.parallelism import uniform_plans

if TYPE_CHECKING:
    from halyard.emulator.compute import ComputeTime
    from halyard.emulator.iteration_time import IterationTime
    from halyard.emulator.memory import MemoryFootprint

# Crius §5.1 (Fig. 10 caption): "Crius follows GPipe to set [the micro-batches B] to 4x the number
# of stages" (GPipe, Huang et al. 2019, §2.2: B >= 4 x stages makes the bubble negligible).
MICRO_BATCHES_PER_STAGE = 4
# Megatron-LM with sequence parallelism (Korthikanti et al., MLSys'23 §4.2.2, Fig. 5): per
# transformer layer two all-gathers and two reduce-scatters in the forward pass, and the same
# in the backward pass, each of one layer's output activation.
TP_COLLECTIVES_PER_LAYER = 8
# GShard MoE (Lepikhin et al., ICLR'21, §2.2 and Algorithm 1's top-2 gating; Alpa's moe.py ``top2_gating``, which
# Crius' MoE benchmarks run): expert capacity ``C = 2 S / E``, so the dispatched tensor ``[E, C, M]`` of a group of
# ``S`` tokens holds 2 token slots of ``M`` hidden values per token -- what an all-to-all moves.
MOE_SLOTS_PER_TOKEN = 2
# Per MoE layer: the dispatch all-to-all (tokens to their experts' devices) and the combine all-to-all (the
# experts' outputs back) in the forward pass (GShard §2.2: "AllToAll" before and after the experts), and the
# same two, transposed, in the backward pass. The forward recomputed under rematerialisation is not counted,
# as for the tensor collectives.
MOE_ALL_TO_ALLS_PER_LAYER = 4


class UnsupportedParallelismError(ValueError):
    """A plan the model cannot cost: no layer figures, or stages that do not match the allocation."""


@dataclass(frozen=True, slots=True)
class LinkLoad:
    """A job's demand on one shared link over one iteration (running alone).

    ``kind`` is ``"nic"`` (``name`` a node), ``"uplink"`` (``name`` a rack) or ``"switch"``
    (``name`` a switch link ``"a~b"``), as in :class:`halyard.emulator.fabric.Link`.
    """

    kind: str
    name: str
    profile: DemandProfile

    @property
    def gbytes(self) -> float:
        return self.profile.gbytes


@dataclass(frozen=True, slots=True)
class StageTiming(StageCost):
    """One pipeline stage as the model costs it: the :class:`~halyard.datamodel.StageCost` a profiling
    reports (:func:`profile_plan` converts it with ``StageProfile.of``) and the GPU type it waits for."""

    gpu_type: str


@dataclass(frozen=True, slots=True)
class JobTiming:
    """The answer of :meth:`~halyard.emulator.PerformanceModel.job_timing`.

    ``iteration``: compute, communication, exposed and total time of one iteration
    and the slowest tier crossed; ``links``: the per-link Up/Down profile (empty
    when the job crosses no NIC); ``micro_batches`` and ``stages`` for a pipeline
    (1 and empty for data parallelism).
    """

    iteration: IterationTime
    links: tuple[LinkLoad, ...]
    micro_batches: int = 1
    stages: tuple[StageTiming, ...] = ()


def with_up_demand(timing: JobTiming, gbyte_s: float) -> JobTiming:
    """``timing`` with every Up phase of every link it loads at ``gbyte_s`` (Down phases, the phases'
    durations and the iteration unchanged): a measured traffic level in place of the modelled one
    (``PerformanceModel(measured_up_demand=...)``)."""
    loads = tuple(LinkLoad(load.kind, load.name,
                           DemandProfile(tuple(Phase(p.duration_s, gbyte_s if p.up else 0.0)
                                               for p in load.profile.phases)))
                  for load in timing.links)
    return replace(timing, links=loads)


class PlanTimer(Protocol):
    """What costing a plan reads of the performance model: the compute part (catalog, one GPU's time),
    the network's options, and the job timing it answers with (which :func:`profile_plan` profiles).
    :class:`~halyard.emulator.iteration_time.IterationTimeModel` is one, and so is the facade."""

    @property
    def compute(self) -> ComputeTime: ...
    @property
    def overlap(self) -> str: ...
    def tier_latency_s(self, tier: Tier) -> float: ...
    def job_timing(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> JobTiming: ...


# ------------------------------------------------------------------ data parallel
def data_parallel_timing(pm: PlanTimer, spec: JobSpec, allocation: Allocation, cluster: Cluster,
                         timing: IterationTime) -> JobTiming:
    """The data-parallel model: ``timing`` (``pm.iteration_time``, already computed) and its all-reduce
    profile on each NIC and uplink.

    A model with a ``[tier_overhead]`` table (Dally's Table 1) puts no load on any link: its
    exposed time is ArtISt-sim's measured overhead of the tier (§4.2.1), which already holds
    the communication, so the fabric slowing it again would count the network twice."""
    nodes = [p.node for p in allocation.nodes if p.gpus]
    if len(nodes) < 2 or timing.communication_s <= 0.0 or spec.model in pm.compute.catalog.tier_overhead:
        return JobTiming(timing, ())
    expert = data_parallel_expert_gbytes(pm, spec.model, spec.batch_size, allocation.num_gpus,
                                         max(len(p.gpus) for p in allocation.nodes))
    reduced = pm.compute.profile(spec.model).reduced_gradient_bytes(allocation.num_gpus)
    profile = profile_from_iteration(timing, link_gbytes(reduced, len(nodes)) + expert)
    racks = sorted({cluster.node(n).rack_index for n in nodes})
    loads = [LinkLoad("nic", n, profile) for n in nodes]
    if len(racks) > 1:
        loads += [LinkLoad(kind, name, profile) for kind, name in cluster.inter_rack_links(racks)]
    return JobTiming(timing, tuple(loads))


def data_parallel_expert_s(pm: PlanTimer, model: str, batch: int, gpus: int, gpus_per_node: int,
                           intra_gbyte_s: float, nic_gbyte_s: float, latency_s: float) -> float:
    """A data-parallel GShard MoE job's all-to-alls per iteration (0 for a dense model): one expert-parallel
    group of all its ``gpus`` GPUs (GShard §2.2 shards the experts over the devices that split the batch),
    each GPU's ``batch`` sequences (0: the reference batch) in ``MOE_SLOTS_PER_TOKEN`` slots per token,
    ``MOE_ALL_TO_ALLS_PER_LAYER`` per MoE layer; the node holding ``gpus_per_node`` of them is the busiest."""
    profile = pm.compute.profile(model)
    if profile.moe_layers <= 0 or gpus < 2:
        return 0.0
    gpu_bytes = MOE_SLOTS_PER_TOKEN * profile.layer_output_bytes * (batch or profile.reference_batch)
    return MOE_ALL_TO_ALLS_PER_LAYER * profile.moe_layers * all_to_all_s(gpu_bytes, gpus, gpus_per_node,
                                                                          intra_gbyte_s, nic_gbyte_s, latency_s)


def data_parallel_expert_gbytes(pm: PlanTimer, model: str, batch: int, gpus: int, gpus_per_node: int) -> float:
    """GB the NIC of a node holding ``gpus_per_node`` of a data-parallel MoE job's GPUs sends per iteration in
    :func:`data_parallel_expert_s`'s all-to-alls (its GPUs' bytes for the other nodes)."""
    profile = pm.compute.profile(model)
    k = min(gpus_per_node, gpus)
    if profile.moe_layers <= 0 or k >= gpus:
        return 0.0
    gpu_bytes = MOE_SLOTS_PER_TOKEN * profile.layer_output_bytes * (batch or profile.reference_batch)
    return MOE_ALL_TO_ALLS_PER_LAYER * profile.moe_layers * k * (gpus - k) / gpus * gpu_bytes / GBYTE


def link_gbytes(gradient_bytes: float, nodes: int) -> float:
    """GB one node's NIC (and a rack's uplink, for a ring ordered by rack) carries per iteration
    in the two-level all-reduce: ``2 (m-1)/m x S`` for ``m`` nodes (reduce-scatter + all-gather)."""
    return 2.0 * (nodes - 1) / nodes * gradient_bytes / GBYTE


def plan_stages(spec: JobSpec, allocation: Allocation | None) -> tuple[tuple[int, int], ...]:
    """The (data, tensor) degree of each pipeline stage: ``allocation.stages`` when given,
    else ``parallelism.pipeline`` stages of ``data x tensor``; one data-parallel stage otherwise."""
    if allocation is not None and allocation.stages:
        return tuple((s.data, s.tensor) for s in allocation.stages)
    par = spec.parallelism
    gpus = allocation.num_gpus if allocation is not None else spec.num_gpus
    if par is None:
        return ((gpus, 1),)
    per_replica = par.tensor * par.pipeline
    data = gpus // per_replica if gpus % per_replica == 0 else par.data  # resized: more or fewer replicas
    return ((data, par.tensor),) * par.pipeline


def _replicas(spec: JobSpec, allocation: Allocation, stages: Sequence[tuple[int, int]]) -> int:
    """Data-parallel replicas of the job's batch: the uniform plan's data degree (which follows the
    allocation's size), else ``parallelism.data`` for a Cell's stage plan (``num_gpus`` when not given)."""
    if allocation.stages:
        # The job's data degree as submitted: parallelism.data, or num_gpus for a pure data-parallel
        # job, so a Cell of another size trains the same global batch (Crius §8.1 counts iterations
        # by global batch size).
        return spec.parallelism.data if spec.parallelism is not None else spec.num_gpus
    return stages[0][0]


def _cell_split(allocation: Allocation, micro: int) -> int:
    """How many micro-batches a Cell's global batch is split into: ``B`` for a Cell's stage plan
    (``allocation.stages``; GPipe, which Crius §5.1 follows, splits the mini-batch into ``B``
    micro-batches, so an iteration trains the job's global batch whatever its plan), 1 for a uniform
    ``parallelism`` plan, whose micro-batch is the per-GPU batch of each replica (Megatron-LM's
    convention: the global batch is ``B x data x batch``)."""
    return micro if allocation.stages else 1


def is_data_parallel(spec: JobSpec, allocation: Allocation | None) -> bool:
    """Whether the job runs as one data-parallel stage (the model of PerformanceModel.iteration_time).

    An explicit Cell plan (``allocation.stages``, Crius §4.2) never does, even as one data-parallel
    stage: it keeps the job's global batch whatever its GPU count, which :func:`plan_timing` models."""
    if allocation is not None and allocation.stages:
        return False
    stages = plan_stages(spec, allocation)
    return len(stages) == 1 and stages[0][1] == 1


# ------------------------------------------------------------------ tensor / pipeline / hybrid
@dataclass(frozen=True, slots=True)
class _Gpu:
    node: str
    gpu_type: str
    rack: int
    fabric_gbyte_s: float
    nic_gbyte_s: float


_LinkKey = LinkKey  # ("nic", node), ("uplink", rack name) or ("switch", "a~b")


class _Links:
    """Bytes per link and the phases they fall in, accumulated over a plan's collectives."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.capacity: dict[_LinkKey, float] = {}
        # link -> segment ("fwd", "bwd", "dp") -> [GB per iteration, span of the stage's segment]
        self.load: dict[_LinkKey, dict[str, list[float]]] = {}

    def key_nic(self, node: str) -> _LinkKey:
        key = ("nic", node)
        self.capacity.setdefault(key, self.cluster.node(node).nic_gbyte_s)
        return key

    def keys_between(self, racks: Sequence[int]) -> tuple[_LinkKey, ...]:
        """The links between ``racks`` (ring order): their uplinks, or the switch links of the routes."""
        keys = self.cluster.inter_rack_links(racks)
        for key in keys:
            if key not in self.capacity:
                self.capacity[key] = self.cluster.link_gbyte_s(key)
        return keys

    def add(self, key: _LinkKey, segment: str, gbytes: float, span_s: float) -> None:
        slot = self.load.setdefault(key, {}).setdefault(segment, [0.0, 0.0])
        slot[0] += gbytes
        slot[1] = max(slot[1], span_s)


def _crossed(nodes: Sequence[_Gpu], links: _Links) -> list[_LinkKey]:
    """The links a ring over ``nodes`` (one entry per node) crosses: each node's NIC, the links between racks."""
    if len(nodes) < 2:
        return []
    keys = [links.key_nic(g.node) for g in nodes]
    racks = sorted({g.rack for g in nodes})
    if len(racks) > 1:
        keys += links.keys_between(racks)
    return keys


def _ring_groups(pm: PlanTimer, groups: Sequence[Sequence[_Gpu]], edge_bytes: float, steps: int,
                 links: _Links) -> tuple[float, Tier, dict[_LinkKey, float]]:
    """Concurrent rings, one per group, each moving ``edge_bytes`` over every ring edge in ``steps``
    latency-paying steps (nccl-tests' alpha-beta ring; REFERENCE-NUMBERS "Collective cost").

    A group inside one node runs at its fabric; across nodes at the slowest of the NICs
    (and the intra-node fabric where a node holds two or more of its GPUs, and the rack
    uplinks over the spine oversubscription when it spans racks). Groups crossing the
    same link share it: the time is at least the bytes on the busiest link over its
    capacity. Returns the time, the slowest tier and the GB each link carries.
    """
    latency = pm.tier_latency_s
    slowest, tier = 0.0, Tier.GPU
    per_link: dict[_LinkKey, float] = {}
    for group in groups:
        if len(group) < 2:
            continue
        by_node: dict[str, list[_Gpu]] = {}
        for g in group:
            by_node.setdefault(g.node, []).append(g)
        heads = [gs[0] for gs in by_node.values()]
        if len(heads) == 1:
            t_group, t_tier = edge_bytes / (heads[0].fabric_gbyte_s * GBYTE) + steps * latency(Tier.NODE), Tier.NODE
        else:
            bw = min(g.nic_gbyte_s for g in heads)
            shared = [gs[0].fabric_gbyte_s for gs in by_node.values() if len(gs) > 1]
            if shared:
                bw = min(bw, *shared)
            racks = {g.rack for g in heads}
            t_tier = Tier.SPINE if len(racks) > 1 else Tier.RACK
            if t_tier is Tier.SPINE:
                bw = min(bw, *(links.capacity[k] for k in links.keys_between(sorted(racks))))
            t_group = edge_bytes / (bw * GBYTE) + steps * latency(t_tier)
            for key in _crossed(heads, links):
                per_link[key] = per_link.get(key, 0.0) + edge_bytes / GBYTE
        slowest, tier = max(slowest, t_group), max(tier, t_tier)
    for key, gb in per_link.items():
        slowest = max(slowest, gb / links.capacity[key] + steps * latency(Tier.SPINE if key[0] != "nic"
                                                                           else Tier.RACK))
    return slowest, tier, per_link


def expert_all_to_all(pm: PlanTimer, spec: JobSpec, groups: Sequence[Sequence[_Gpu]], gpu_samples: float,
                      share: float, links: _Links) -> tuple[float, Tier, dict[_LinkKey, float]]:
    """A stage's expert-parallel all-to-alls per micro-batch, for a GShard MoE model (catalog ``moe_layers``):
    ``(seconds on the critical path, slowest tier, GB per link in the forward half)``; nothing for a dense model.

    GShard shards the experts over the devices that split the batch (§2.2), so the expert-parallel groups
    are the stage's data-parallel groups. Each GPU holds ``gpu_samples`` sequences of the micro-batch (its
    replica's share, and ``1/tensor`` of it under sequence parallelism) and sends them in
    ``MOE_SLOTS_PER_TOKEN`` slots per token: ``2 x layer_output_bytes x gpu_samples`` per all-to-all,
    ``MOE_ALL_TO_ALLS_PER_LAYER`` all-to-alls per MoE layer, the stage holding ``share`` of the layers."""
    profile = pm.compute.profile(spec.model)
    count = MOE_ALL_TO_ALLS_PER_LAYER * profile.moe_layers * share
    if count <= 0 or all(len(g) < 2 for g in groups):
        return 0.0, Tier.GPU, {}
    one, tier, per_link = _all_to_all_groups(pm, groups, MOE_SLOTS_PER_TOKEN * profile.layer_output_bytes * gpu_samples,
                                             links)
    return count * one, tier, {k: gb * count / 2.0 for k, gb in per_link.items()}


def _all_to_all_groups(pm: PlanTimer, groups: Sequence[Sequence[_Gpu]], gpu_bytes: float,
                       links: _Links) -> tuple[float, Tier, dict[_LinkKey, float]]:
    """Concurrent all-to-alls, one per group, each GPU holding ``gpu_bytes``
    (:func:`~halyard.emulator.collectives.all_to_all_s` per node of the group: its fabric and its NIC, over
    the spine's links when the group spans racks). Groups crossing the same link share it. Returns the
    time, the slowest tier and the GB each link carries (a node's NIC: what its GPUs send to other nodes;
    a link between racks: what the busiest rack sends to the others)."""
    latency = pm.tier_latency_s
    slowest, tier = 0.0, Tier.GPU
    per_link: dict[_LinkKey, float] = {}
    for group in groups:
        n = len(group)
        if n < 2:
            continue
        by_node: dict[str, list[_Gpu]] = {}
        for g in group:
            by_node.setdefault(g.node, []).append(g)
        racks = sorted({g.rack for g in group})
        t_tier = Tier.NODE if len(by_node) == 1 else Tier.SPINE if len(racks) > 1 else Tier.RACK
        spine = min((links.capacity[k] for k in links.keys_between(racks)), default=math.inf)
        t_group = 0.0
        for node, gs in by_node.items():
            k = len(gs)
            t_group = max(t_group, all_to_all_s(gpu_bytes, n, k, gs[0].fabric_gbyte_s, min(gs[0].nic_gbyte_s, spine),
                                                latency(t_tier)))
            if k < n:
                key = links.key_nic(node)
                per_link[key] = per_link.get(key, 0.0) + k * (n - k) / n * gpu_bytes / GBYTE
        if len(racks) > 1:
            in_rack = [sum(1 for g in group if g.rack == r) for r in racks]
            off_rack = max(c * (n - c) / n * gpu_bytes / GBYTE for c in in_rack)
            for key in links.keys_between(racks):
                per_link[key] = per_link.get(key, 0.0) + off_rack
        slowest, tier = max(slowest, t_group), max(tier, t_tier)
    for key, gb in per_link.items():
        slowest = max(slowest, gb / links.capacity[key])
    return slowest, tier, per_link


def _transfer(pm: PlanTimer, src: Sequence[_Gpu], dst: Sequence[_Gpu], gbytes: float,
              links: _Links) -> tuple[float, Tier, dict[_LinkKey, float]]:
    """Send/recv of ``gbytes`` from one stage's GPUs to the next's, split evenly over GPU pairs
    (pair j: the j-th GPU of each stage, wrapping the smaller); the time of the busiest pair or link."""
    pairs = max(len(src), len(dst))
    share = gbytes / pairs
    per_link: dict[_LinkKey, float] = {}
    intra, tier = 0.0, Tier.GPU
    for j in range(pairs):
        a, b = src[j % len(src)], dst[j % len(dst)]
        if a.node == b.node:
            intra, tier = max(intra, share / a.fabric_gbyte_s), max(tier, Tier.NODE)
            continue
        keys = [links.key_nic(a.node), links.key_nic(b.node)]
        if a.rack != b.rack:
            keys += links.keys_between((a.rack, b.rack))
        tier = max(tier, Tier.SPINE if a.rack != b.rack else Tier.RACK)
        for key in keys:
            per_link[key] = per_link.get(key, 0.0) + share
    if tier is Tier.GPU:
        return 0.0, tier, per_link
    busiest = max((gb / links.capacity[key] for key, gb in per_link.items()), default=0.0)
    return max(intra, busiest) + pm.tier_latency_s(tier), tier, per_link


def plan_timing(pm: PlanTimer, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> JobTiming:
    """Tensor, pipeline or hybrid parallelism on ``allocation`` (see the module docstring)."""
    from halyard.emulator.iteration_time import IterationTime  # which imports this module at its top

    profile = pm.compute.profile(spec.model)
    stages = plan_stages(spec, allocation)
    # One data-parallel stage (a Cell or an elastic resize keeping the global batch) needs no layer
    # figures: no stage boundary to send across and no tensor collective, only compute and all-reduce.
    if (profile.layers <= 0 or profile.layer_output_bytes <= 0) and (len(stages) > 1 or stages[0][1] > 1):
        raise UnsupportedParallelismError(
            f"model {spec.model!r} has no layers / layer_output_bytes in the catalog ({pm.compute.catalog.source}): "
            f"it can run data parallel only (one stage, tensor degree 1), not stages {stages}")
    gpus = [_gpu(cluster, p.node) for p in allocation.nodes for _ in p.gpus]
    if sum(d * t for d, t in stages) != len(gpus):
        raise UnsupportedParallelismError(
            f"job {spec.job_id}: stages {stages} need {sum(d * t for d, t in stages)} GPUs (data x tensor each), "
            f"the allocation holds {len(gpus)}")
    if any(d < 1 or t < 1 for d, t in stages):
        raise UnsupportedParallelismError(f"job {spec.job_id}: stage degrees must be >= 1, got {stages}")
    n_stages = len(stages)
    micro = MICRO_BATCHES_PER_STAGE * n_stages if n_stages > 1 else 1
    replicas = _replicas(spec, allocation, stages)
    split = _cell_split(allocation, micro)
    samples = replicas * (spec.batch_size or profile.reference_batch) / split  # one micro-batch, all replicas
    share = 1.0 / n_stages  # of the layers, compute and gradients (Crius §6.1: stages cut by FLOPs)
    bwd = profile.backward_fraction
    constants = pm.compute.catalog.constants
    links = _Links(cluster)

    stage_gpus: list[list[_Gpu]] = []
    at = 0
    for d, t in stages:
        stage_gpus.append(gpus[at:at + d * t])
        at += d * t

    timings: list[StageTiming] = []
    dp_loads: list[dict[_LinkKey, float]] = []
    fwd_loads: list[dict[_LinkKey, float]] = []
    opt_s: list[float] = []
    tier = Tier.GPU
    for i, ((d, t), members) in enumerate(zip(stages, stage_gpus, strict=True)):
        gpu_type = max({g.gpu_type for g in members}, key=lambda g: (pm.compute.ideal_iteration_time(spec, g), g))
        fixed = pm.compute.optimizer_step_s(spec.model, gpu_type)
        per_gpu = pm.compute.ideal_iteration_time(spec, gpu_type)
        fixed = min(fixed, per_gpu)
        one_gpu = (per_gpu - fixed) * replicas * share / split  # the stage's micro-batch on one GPU
        tp_groups = [members[k * t:(k + 1) * t] for k in range(d)]
        dp_groups = [members[r::t] for r in range(t)]
        message = profile.layer_output_bytes * samples / d  # one layer's output on one TP group
        collectives = TP_COLLECTIVES_PER_LAYER * profile.layers * share
        tp_one, tp_tier, tp_links = _ring_groups(pm, tp_groups, (t - 1) / t * message, t - 1, links)
        compute, _ = stage_latency_s(one_gpu, d, t)
        tp_s = collectives * tp_one
        expert_s, ep_tier, ep_fwd = expert_all_to_all(pm, spec, dp_groups, samples / d / t, share, links)
        recv_s = 0.0
        fwd_link: dict[_LinkKey, float] = {}
        if i > 0:
            one_way, p_tier, fwd_link = _transfer(pm, stage_gpus[i - 1], members,
                                                  profile.layer_output_bytes * samples / GBYTE, links)
            recv_s, tier = 2.0 * one_way, max(tier, p_tier)  # activation forward, its gradient backward
        grads = profile.reduced_gradient_bytes(d) * share / t
        buckets = buckets_for(grads, constants.ddp_bucket_bytes)
        ar_s, dp_tier, dp_link = _ring_groups(pm, dp_groups, 2.0 * (d - 1) / d * grads, 2 * (d - 1) * buckets,
                                              links)
        tier = max(tier, tp_tier, dp_tier, ep_tier)
        opt_s.append(fixed * share / t)
        timings.append(StageTiming(data=d, tensor=t, compute_s=compute, tensor_comm_s=tp_s, expert_comm_s=expert_s,
                                   recv_s=recv_s, allreduce_s=ar_s, optimizer_s=opt_s[-1], gpu_type=gpu_type))
        fwd_loads.append({k: gb * collectives / 2.0 for k, gb in tp_links.items()})
        for k, gb in (*fwd_link.items(), *ep_fwd.items()):
            fwd_loads[-1][k] = fwd_loads[-1].get(k, 0.0) + gb
        dp_loads.append(dp_link)

    latency, tail = _latency_and_tail(pm, spec, timings, micro)
    compute_only = pipeline_latency_s([s.compute_s for s in timings], [0.0] * n_stages, micro)
    total = latency + tail
    compute_total = compute_only + max(opt_s)
    communication = max(micro * (s.tensor_comm_s + s.expert_comm_s + s.recv_s) + s.allreduce_s for s in timings)
    iteration = IterationTime(compute_s=compute_total, communication_s=communication,
                              exposed_s=total - compute_total, total_s=total, tier=tier)

    # Per link: forward micro-batches, backward micro-batches, the stage all-reduce (Cassini Fig. 4.1d).
    for s, fwd, dp in zip(timings, fwd_loads, dp_loads, strict=True):
        busy = s.critical_s
        for key, gb in fwd.items():  # sends and collectives: the same bytes each way
            links.add(key, "fwd", micro * gb, micro * ((1.0 - bwd) * busy + s.recv_s / 2.0))
            links.add(key, "bwd", micro * gb, micro * (bwd * busy + s.recv_s / 2.0))
        for key, gb in dp.items():
            links.add(key, "dp", gb, s.allreduce_s)
    loads = tuple(LinkLoad(kind, name, _profile(links.load[(kind, name)], total))
                  for kind, name in sorted(links.load))
    return JobTiming(iteration, loads, micro, tuple(timings))


def _latency_and_tail(pm: PlanTimer, spec: JobSpec, stages: Sequence[StageCost],
                      micro: int) -> tuple[float, float]:
    """The pipeline (Crius §5.1: ``sum_i T_i + (B - 1) x (T_s - T_comm,s)``) and what follows the last
    micro-batch: the slowest stage's exposed all-reduce plus its optimizer step. :func:`plan_timing` and
    the assembly of profiled stages (:func:`assembled_iteration_s`) both end here, so an assembled plan
    costs exactly what running it costs."""
    profile = pm.compute.profile(spec.model)
    share = 1.0 / len(stages)
    bwd = profile.backward_fraction
    latency = pipeline_latency_s([s.critical_s for s in stages], [s.recv_s for s in stages], micro)
    tail = 0.0
    for s in stages:
        window = s.compute_s if pm.overlap == "layerwise" else bwd * s.compute_s
        buckets = buckets_for(profile.reduced_gradient_bytes(s.data) * share / s.tensor,
                              pm.compute.catalog.constants.ddp_bucket_bytes)
        tail = max(tail, (exposed_s(s.allreduce_s, window, buckets) if s.allreduce_s > 0 else 0.0) + s.optimizer_s)
    return latency, tail


def profile_plan(pm: PlanTimer, spec: JobSpec, allocation: Allocation,
                 cluster: Cluster) -> tuple[StageProfile, ...]:
    """One profiling of ``allocation.stages`` (Crius §5.1, Fig. 9: each Cell is profiled with every
    stage data-parallel-only and with every stage tensor-parallel-only): per stage its micro-batch
    compute, communication, optimizer step and memory per GPU, as :func:`plan_timing` and
    :func:`plan_memory` cost them. A stage's figures depend on its own split and GPUs only, so the
    stages of the two profilings assemble into any of the ``2^S`` plans."""
    timing = pm.job_timing(spec, allocation, cluster)
    memory = plan_memory(pm.compute, spec, allocation, cluster)
    return tuple(StageProfile.of(s, m.total_bytes, m.capacity_bytes)
                 for s, m in zip(timing.stages, memory, strict=True))


def assembled_iteration_s(pm: PlanTimer, spec: JobSpec, stages: Sequence[StageProfile]) -> float:
    """Iteration time of the plan whose stages are ``stages`` (each from a profiling of the same Cell):
    the pipeline of ``B = 4 x stages`` micro-batches and its tail, as :func:`plan_timing` adds them."""
    if not stages:
        raise UnsupportedParallelismError("an assembled plan needs at least one stage")
    n = len(stages)
    latency, tail = _latency_and_tail(pm, spec, stages, MICRO_BATCHES_PER_STAGE * n if n > 1 else 1)
    return latency + tail


def _profile(segments: dict[str, list[float]], total_s: float) -> DemandProfile:
    """Up phases for the forward, backward and all-reduce segments, Down for the rest of the iteration;
    spans that add up to more than the iteration (the all-reduce overlaps backward) are scaled to fit."""
    order = [segments[k] for k in ("fwd", "bwd", "dp") if k in segments and segments[k][0] > 0]
    busy = sum(span for _, span in order)
    scale = min(1.0, total_s / busy) if busy > 0 else 1.0
    phases = [Phase(span * scale, gb / (span * scale)) for gb, span in order if span > 0]
    rest = total_s - sum(p.duration_s for p in phases)
    if rest > 1e-12 * total_s or not phases:
        phases.append(Phase(max(rest, 0.0)))
    return DemandProfile(tuple(phases))


def _gpu(cluster: Cluster, node: str) -> _Gpu:
    nd = cluster.node(node)
    return _Gpu(node, nd.gpu_type, nd.rack_index, nd.fabric_gbyte_s, nd.nic_gbyte_s)


def plan_memory(compute: ComputeTime, spec: JobSpec, allocation: Allocation,
                cluster: Cluster) -> tuple[MemoryFootprint, ...]:
    """Memory per GPU of each stage under the job's plan, against the stage's smallest GPU.

    State: ``state_bytes_per_parameter x parameters / stages / tensor`` (the stage's layers,
    sharded over its tensor group). Activations: the micro-batches a stage keeps in flight
    under 1F1B, ``min(B, stages - i)`` for stage i (Narayanan et al., SC'21 §2.2), each of
    ``parallelism.data x batch / data`` samples through the stage's layers, over ``tensor``
    shards. A data-parallel job is one stage: :meth:`PerformanceModel.memory_footprint`.
    """
    stages = plan_stages(spec, allocation)
    if sum(d * t for d, t in stages) != allocation.num_gpus:
        raise UnsupportedParallelismError(
            f"job {spec.job_id}: stages {stages} need {sum(d * t for d, t in stages)} GPUs, "
            f"the allocation holds {allocation.num_gpus}")
    types = [cluster.node(p.node).gpu_type for p in allocation.nodes for _ in p.gpus]
    return _footprints(compute, spec, stages, types, _replicas(spec, allocation, stages), bool(allocation.stages))


def _footprints(compute: ComputeTime, spec: JobSpec, stages: Sequence[tuple[int, int]], types: Sequence[str],
                replicas: int, cell: bool) -> tuple[MemoryFootprint, ...]:
    """:func:`plan_memory` on GPUs of ``types`` (one per GPU, in stage order); ``cell``: a Cell's stage plan."""
    from halyard.emulator.memory import MemoryFootprint  # which imports this module at its top

    profile = compute.profile(spec.model)
    c = compute.catalog.constants
    n = len(stages)
    micro = MICRO_BATCHES_PER_STAGE * n if n > 1 else 1
    batch = spec.batch_size or profile.reference_batch
    split = micro if cell else 1  # _cell_split
    out: list[MemoryFootprint] = []
    at = 0
    for i, (d, t) in enumerate(stages):
        smallest = min(types[at:at + d * t], key=compute.gpu_memory_bytes)
        at += d * t
        in_flight = min(micro, n - i)
        samples = replicas * batch / d / split
        per_sample = in_flight * profile.activation_bytes / profile.reference_batch / n / t
        state = c.state_bytes_per_parameter * profile.held_parameters(d) / n / t
        capacity = compute.gpu_memory_bytes(smallest)
        # One memory rule with PerformanceModel.memory_footprint: a single-stage plan of a job left at
        # its reference batch may accumulate gradients over micro-batches (a pipeline already splits
        # its batch into B micro-batches).
        k = (accumulation_steps(state + c.framework_reserve_bytes, per_sample, samples, capacity)
             if n == 1 and spec.batch_size == 0 else 1)
        activations = per_sample * (samples if k == 1 else math.ceil(samples / k))
        out.append(MemoryFootprint(state_bytes=state, activation_bytes=activations,
                                   reserve_bytes=c.framework_reserve_bytes, capacity_bytes=capacity,
                                   micro_batches=k, batch=batch))
    return tuple(out)


def accumulation_steps(fixed_bytes: float, per_sample_bytes: float, samples: float, capacity_bytes: float) -> int:
    """Gradient-accumulation steps a worker of ``samples`` per-GPU samples needs: the least ``k`` for which
    ``fixed + per_sample x ceil(samples / k)`` fits ``capacity`` (1 if the whole batch fits), or
    ``ceil(samples)`` (one sample per step, the least it can run with) if none does. The iteration time
    is unchanged: compute is linear in the batch and the optimizer step and all-reduce run once."""
    whole = max(math.ceil(samples - 1e-9), 1)
    if fixed_bytes + per_sample_bytes * samples <= capacity_bytes:
        return 1
    room = capacity_bytes - fixed_bytes
    largest = math.floor(room / per_sample_bytes) if per_sample_bytes > 0 and room > 0 else 0  # samples that fit
    k = whole if largest < 1 else min(whole, math.ceil(whole / largest))
    while k < whole and fixed_bytes + per_sample_bytes * math.ceil(whole / k) > capacity_bytes:
        k += 1  # only against rounding in the division above
    return k


def fitting_cell_plan(compute: ComputeTime, spec: JobSpec, gpu_type: str, gpus: int) -> tuple[StagePlan, ...] | None:
    """The first plan of :func:`uniform_plans` on ``gpus`` GPUs of ``gpu_type`` under which every GPU holds
    its share of the job (Crius Fig. 3: plans that run out of memory are infeasible), or None: the fewest
    pipeline stages, then the least tensor degree. Data parallelism alone is the first candidate; a model
    without layer figures has no other."""
    replicas = spec.parallelism.data if spec.parallelism is not None else spec.num_gpus
    for plan in uniform_plans(gpus, compute.layers(spec.model)):
        stages = tuple((st.data, st.tensor) for st in plan)
        if all(f.fits for f in _footprints(compute, spec, stages, [gpu_type] * gpus, replicas, True)):
            return plan
    return None
