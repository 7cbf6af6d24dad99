"""Elastic and pipeline costs: EasyScale time slicing, its plan throughput, Crius' pipeline latency.

- EasyScale (papers/easyscale-elastic-training.txt §3.2, §3.4): a job keeps a fixed
  number of logical workers (ESTs); a GPU that holds ``A`` of them runs their local
  steps one after another (time slicing at mini-batch boundaries), copying each
  finished EST's gradients to the host while the next EST computes (only the last
  one's all-reduce is on the critical path), then all GPUs all-reduce.
  :func:`est_step_s` is that step time; :func:`~halyard.parallelism.easyscale_plan_throughput` is the
  paper's analytical plan model, Eq. 1a-1d, as printed and (``per_gpu=True``) with
  the erratum of Eq. 1c corrected; :func:`~halyard.parallelism.best_est_mapping` is the companion
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

from collections.abc import Sequence

from halyard.parallelism import D2_COSTLY_MODELS

# Determinism (§3.3): D1 keeps results identical across GPU counts (virtual ranks, bucket
# indices in the checkpoint), D2 across GPU types (hardware-agnostic kernels, fixed algo ids).
DETERMINISM_D1_OVERHEAD = 0.01
"""Extra step time of D0+D1, the default of every EasyScale job: §5.1.3, Fig. 12 "less than 1%
overhead" for every model on V100, P100 and T4 (upper bound taken)."""
DETERMINISM_D2_OVERHEAD = 2.36
"""Extra step time of D1+D2 for models whose speed relies on vendor convolution kernels (cuDNN
algorithm choice turned off): §5.1.3 "considerable overhead (i.e., 236% on average)" for
ShuffleNetV2, ResNet50, VGG19 and YOLOv3; other models stay under 1% (:data:`DETERMINISM_D1_OVERHEAD`)."""


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
