"""What one stage of a parallelism plan costs: the performance model's timing and a ``Profile`` answer.

Crius §5.1 (Fig. 9) profiles each Cell twice -- every stage data-parallel-only, then every
stage tensor-parallel-only -- and assembles the ``2^S`` plans from the per-stage figures.
:class:`StageCost` holds the figures the assembly reads; the performance model's
``StageTiming`` (``emulator/parallel.py``) extends it with the stage's GPU type, and
:class:`StageProfile` -- one stage of one profiling, what an agent of the Cell's GPU type sends
back (``ProfileResult``) on a live control plane -- extends it with memory per GPU. One set of
fields, so the model's timing and the wire's answer cannot drift apart, and both feed the same
assembly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StageCost:
    """One pipeline stage under a DP x TP split, per micro-batch (Crius §5.1, Fig. 10's ``T_i``).

    ``compute_s``: forward + backward of the stage's micro-batch on its ``data x tensor`` GPUs;
    ``tensor_comm_s``: its tensor-parallel collectives on the critical path; ``expert_comm_s``: its
    MoE layers' expert-parallel all-to-alls (GShard's dispatch and combine, forward and backward), on
    the critical path too; ``recv_s``: the activation and gradient transfer from the previous stage;
    ``allreduce_s``: its gradients' data-parallel all-reduce; ``optimizer_s``: the optimizer step of
    one GPU's shard.
    """

    data: int
    tensor: int
    compute_s: float
    tensor_comm_s: float
    expert_comm_s: float
    recv_s: float
    allreduce_s: float
    optimizer_s: float

    def __post_init__(self) -> None:
        if self.data < 1 or self.tensor < 1:
            raise ValueError(f"stage degrees must be >= 1, got data {self.data}, tensor {self.tensor}")
        _check_finite(self, _COST_SECONDS)

    @property
    def critical_s(self) -> float:
        """What one micro-batch holds the stage for: compute and the collectives on its critical path."""
        return self.compute_s + self.tensor_comm_s + self.expert_comm_s


@dataclass(frozen=True, slots=True)
class StageProfile(StageCost):
    """One stage of one profiling: its :class:`StageCost` and ``memory_bytes``, what one GPU of the
    stage holds, against ``capacity_bytes`` (§5.1: "If the memory usage exceeds the memory limit of the
    used GPU, the corresponding parallelism plan is dropped for the stage")."""

    memory_bytes: float
    capacity_bytes: float

    def __post_init__(self) -> None:
        StageCost.__post_init__(self)
        _check_finite(self, ("memory_bytes", "capacity_bytes"))

    @classmethod
    def of(cls, cost: StageCost, memory_bytes: float, capacity_bytes: float) -> StageProfile:
        """The profile of a stage the performance model costed: the one conversion from a timing."""
        return cls(**{f.name: getattr(cost, f.name) for f in dataclasses.fields(StageCost)},
                   memory_bytes=memory_bytes, capacity_bytes=capacity_bytes)

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.capacity_bytes


def _check_finite(stage: StageCost, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(stage, name)
        if not (value >= 0.0 and value < float("inf")):
            raise ValueError(f"stage profile {name} must be finite and >= 0, got {value}")


_COST_SECONDS = tuple(f.name for f in dataclasses.fields(StageCost) if f.name not in ("data", "tensor"))
STAGE_PROFILE_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(StageProfile))
