"""Elastic and pipeline costs: EasyScale time slicing, its plan throughput, Crius' pipeline latency.

- EasyScale (papers/easyscale-elastic-training.txt §3.2, §3.4): a job keeps a fixed
  number of logical workers (ESTs); a GPU that holds ``A`` of them runs their local
  steps one after another (time slicing at mini-batch boundaries), copying each
  finished EST's gradients to the host while the next EST computes (only the last
  one's all-reduce is on the critical path), then all GPUs all-reduce.
  :func:`est_step_s` is that step time; :func:`easyscale_plan_throughput` is the
  paper's analytical plan model, Eq. 1a-1d, as printed and (``per_gpu=True``) with
  the erratum of Eq. 1c corrected; :func:`best_est_mapping` is the companion
  module's load balancing for one GPU set; :func:`determinism_factor` is the
  cost of bitwise-consistent training (§3.3, §5.1.3).
- Crius (papers/crius-cell-scheduling.txt §5): a Cell's pipeline latency is the first
  micro-batch through all stages plus ``(B - 1)`` times the slowest stage, whose
  communication with the previous stage overlaps computation and is subtracted:
  :func:`pipeline_latency_s`; :func:`stage_latency_s` costs one stage under its
  DP x TP plan.

Checkpoint, restore and restart costs by model size are methods of
:class:`~halyard.emulator.PerformanceModel` (``checkpoint_s``, ``restore_s``,
``restart_cost_s``, ``reconfigure_cost_s``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


# ---------------------------------------------------------------- EasyScale
@dataclass(frozen=True, slots=True)
class PlanThroughput:
    """EasyScale Eq. 1: mini-batches per second of a plan, its waste and overload factor."""

    throughput: float
    waste: float
    overload: float
    ests: int
    ests_per_gpu: Mapping[str, int] | None = None  # A_i, set by :func:`best_est_mapping`

    @property
    def steps_per_s(self) -> float:
        """Global steps per second: ``1 / f_overload`` (a step is every EST's local step)."""
        return 1.0 / self.overload

    def waste_fraction(self, gpus: Mapping[str, int], capability: Mapping[str, float]) -> float:
        """Waste over the GPUs' whole capability ``sum_i N_i C_i``: what the artifact's 0.30
        threshold is compared against."""
        return self.waste / sum(n * capability[t] for t, n in gpus.items() if n > 0)


def easyscale_plan_throughput(gpus: Mapping[str, int], capability: Mapping[str, float],
                              ests_per_gpu: Mapping[str, int], max_p: int, *, per_gpu: bool = False
                              ) -> PlanThroughput:
    """EasyScale Eq. 1a-1d for ``N_i`` GPUs of type i (``gpus``), each doing ``C_i``
    mini-batches per second (``capability``) and holding ``A_i`` ESTs (``ests_per_gpu``):

        nEST = sum_i N_i A_i >= maxP                                   (1a)
        f_overload = max_{i, N_i > 0} A_i / C_i                        (1b)
        waste = sum_{i, N_i > 0} (C_i - A_i / f_overload) + (nEST - maxP) / f_overload   (1c)
        throughput = sum_i N_i C_i - waste                             (1d)

    With ``per_gpu=False`` (1c) is applied as printed: the per-type term is counted
    once per GPU type, not per GPU. That is an erratum: every one of the ``N_i`` GPUs
    of an under-loaded type idles ``C_i - A_i / f`` of its capability, so the sum must
    weigh each type's term by ``N_i``. Printed, 2 V100 (C=4) and 2 T4 (C=2) with
    A=(3, 1) and maxP=8 give 11.33 mini-batches/s; the step really takes
    ``f_overload`` = 0.75 s for 8 ESTs, 10.67/s. ``per_gpu=True`` is the corrected
    form, which reduces to ``throughput = maxP / f_overload`` (the intra-job
    scheduler uses it, :func:`best_est_mapping`).
    """
    used = [t for t, n in gpus.items() if n > 0]
    if not used:
        raise ValueError("a plan needs at least one GPU")
    n_est = sum(gpus[t] * ests_per_gpu.get(t, 0) for t in used)
    if n_est < max_p:
        raise ValueError(f"the plan holds {n_est} ESTs, fewer than maxP = {max_p} (Eq. 1a)")
    overload = max(ests_per_gpu.get(t, 0) / capability[t] for t in used)
    weight = {t: gpus[t] if per_gpu else 1 for t in used}
    waste = (sum(weight[t] * (capability[t] - ests_per_gpu.get(t, 0) / overload) for t in used)
             + (n_est - max_p) / overload)
    throughput = sum(gpus[t] * capability[t] for t in used) - waste
    return PlanThroughput(throughput=throughput, waste=waste, overload=overload, ests=n_est)


def best_est_mapping(gpus: Mapping[str, int], capability: Mapping[str, float], max_p: int) -> PlanThroughput:
    """The companion module's plan for one GPU set (EasyScale §3.4): the per-type EST
    counts ``A_i`` that minimise ``f_overload`` (Eq. 1b) subject to Eq. 1a, every GPU
    running at least one EST, scored by the corrected Eq. 1c-1d.

    ``f`` only takes the values ``a / C_i``; at a given ``f`` each type can hold
    ``floor(f C_i)`` ESTs per GPU without becoming the bottleneck, so the smallest
    candidate ``f`` whose capacities add up to ``maxP`` is optimal. The returned
    ``ests_per_gpu`` is that capacity (``nEST >= maxP``); :func:`spread_ests` hands
    out exactly ``maxP``.
    """
    used = sorted(t for t, n in gpus.items() if n > 0)
    if not used:
        raise ValueError("a plan needs at least one GPU")
    total = sum(gpus[t] for t in used)
    if total > max_p:
        raise ValueError(f"{total} GPUs cannot each run one of maxP = {max_p} ESTs")
    floor_f = max(1.0 / capability[t] for t in used)  # every GPU runs >= 1 EST
    candidates = sorted({a / capability[t] for t in used for a in range(1, max_p + 1)
                         if a / capability[t] >= floor_f * (1 - 1e-12)})
    for f in candidates:
        per = {t: max(1, math.floor(f * capability[t] * (1 + 1e-12))) for t in used}
        if sum(gpus[t] * per[t] for t in used) >= max_p:
            return _plan_with(gpus, capability, per, max_p)
    raise AssertionError("unreachable: f = maxP / min C_i always covers maxP")


def _plan_with(gpus: Mapping[str, int], capability: Mapping[str, float], per: Mapping[str, int],
               max_p: int) -> PlanThroughput:
    plan = easyscale_plan_throughput(gpus, capability, per, max_p, per_gpu=True)
    return PlanThroughput(plan.throughput, plan.waste, plan.overload, plan.ests, dict(per))


def spread_ests(gpu_types: Sequence[str], capacity: Mapping[str, int], capability: Mapping[str, float],
                max_p: int) -> list[int]:
    """Exactly ``maxP`` ESTs over GPUs of ``gpu_types`` (in order), at most ``capacity[t]`` on a GPU
    of type t (the plan's ``A_i``): fill every GPU to its capacity, then take the surplus
    (``nEST - maxP``, the over-provisioning of Eq. 1a) back one EST at a time from the GPU whose
    local steps take longest (``A / C`` largest; ties: the later GPU), which never raises the step time."""
    counts = [capacity[t] for t in gpu_types]
    surplus = sum(counts) - max_p
    if surplus < 0:
        raise ValueError(f"capacities hold {sum(counts)} ESTs, fewer than maxP = {max_p}")
    for _ in range(surplus):
        g = max((i for i in range(len(counts)) if counts[i] > 1),
                key=lambda i: (counts[i] / capability[gpu_types[i]], i))
        counts[g] -= 1
    return counts


# Determinism (§3.3): D1 keeps results identical across GPU counts (virtual ranks, bucket
# indices in the checkpoint), D2 across GPU types (hardware-agnostic kernels, fixed algo ids).
DETERMINISM_D1_OVERHEAD = 0.01
"""Extra step time of D0+D1, the default of every EasyScale job: §5.1.3, Fig. 12 "less than 1%
overhead" for every model on V100, P100 and T4 (upper bound taken)."""
DETERMINISM_D2_OVERHEAD = 2.36
"""Extra step time of D1+D2 for models whose speed relies on vendor convolution kernels (cuDNN
algorithm choice turned off): §5.1.3 "considerable overhead (i.e., 236% on average)" for
ShuffleNetV2, ResNet50, VGG19 and YOLOv3; other models stay under 1% (:data:`DETERMINISM_D1_OVERHEAD`)."""
D2_COSTLY_MODELS = frozenset({
    # §5.1.3's second category, by name:
    "shufflenetv2", "resnet50", "vgg19", "yolov3",
    # the catalog's other convolution networks, by the paper's criterion (§3.3: models that rely on
    # hardware-specific convolution kernels): an extension, not a measured list
    "alexnet", "resnet18", "mobilenetv2", "mobilenetv3", "vgg11", "m5",
})
"""Models for which D2 costs :data:`DETERMINISM_D2_OVERHEAD`; EasyScale keeps them on one GPU type (§3.3)."""


def needs_homogeneous(model: str) -> bool:
    """EasyScale's model scan (§3.3): a model that relies on hardware-specific kernels trains on
    homogeneous GPUs only, because D2 would cost it :data:`DETERMINISM_D2_OVERHEAD`."""
    return model in D2_COSTLY_MODELS


def determinism_factor(model: str, heterogeneous: bool) -> float:
    """Step-time factor of EasyScale's accuracy-consistent training (§5.1.3, Fig. 12): D1 on one
    GPU type; D1+D2 on mixed types, which costs a D2-costly model ``1 + 2.36``."""
    if heterogeneous and model in D2_COSTLY_MODELS:
        return 1.0 + DETERMINISM_D2_OVERHEAD
    return 1.0 + DETERMINISM_D1_OVERHEAD


def est_step_s(est_compute_s: Sequence[float], ests: Sequence[int], gradient_copy_s: Sequence[float],
               allreduce_exposed_s: float = 0.0) -> float:
    """One global step of ESTs time-sliced on GPUs.

    GPU g runs ``ests[g]`` local steps of ``est_compute_s[g]`` each; after each of
    the first ``ests[g] - 1`` it copies the gradients to the host in
    ``gradient_copy_s[g]``, overlapped with the next EST's forward and backward
    (EasyScale §3.2, Fig. 13), so only ``max(0, copy - compute)`` shows. The step
    ends when the slowest GPU has finished and the all-reduce's exposed part is done.
    """
    if not (len(est_compute_s) == len(ests) == len(gradient_copy_s)) or not ests:
        raise ValueError("give compute, EST count and copy time for every GPU")
    local = max(a * t + max(0, a - 1) * max(0.0, c - t)
                for t, a, c in zip(est_compute_s, ests, gradient_copy_s, strict=True) if a > 0)
    return local + allreduce_exposed_s


# ---------------------------------------------------------------- Crius
def pipeline_latency_s(stage_compute_s: Sequence[float], stage_comm_s: Sequence[float], micro_batches: int) -> float:
    """Crius §5 (Fig. 10): ``sum_i T_i + (B - 1) x (T_s - T_comm,s)``.

    ``T_i = compute_i + comm_i`` is stage i's latency for one micro-batch, its
    communication being the transfer from the previous stage; ``s`` is the
    slowest stage (largest ``T_i``); in the steady state its communication
    overlaps computation and is subtracted.
    """
    if len(stage_compute_s) != len(stage_comm_s) or not stage_compute_s:
        raise ValueError("give compute and communication for every stage")
    if micro_batches < 1:
        raise ValueError("a pipeline needs at least one micro-batch")
    latency = [c + m for c, m in zip(stage_compute_s, stage_comm_s, strict=True)]
    s = max(range(len(latency)), key=latency.__getitem__)
    return sum(latency) + (micro_batches - 1) * (latency[s] - stage_comm_s[s])


def stage_latency_s(compute_one_gpu_s: float, data: int, tensor: int, tensor_comm_s: float = 0.0,
                    recv_s: float = 0.0) -> tuple[float, float]:
    """One stage under a DP x TP plan (Crius' per-stage choice): ``(compute, comm)``.

    ``compute_one_gpu_s`` is the stage's compute for one micro-batch on one GPU;
    data parallelism splits the micro-batch over ``data`` GPUs, tensor
    parallelism splits every layer over ``tensor`` GPUs and adds its
    activation all-reduces (``tensor_comm_s``, on the critical path). ``recv_s``
    is the transfer from the previous stage.
    """
    if data < 1 or tensor < 1:
        raise ValueError("data and tensor degrees are >= 1")
    return compute_one_gpu_s / (data * tensor) + (tensor_comm_s if tensor > 1 else 0.0), recv_s
