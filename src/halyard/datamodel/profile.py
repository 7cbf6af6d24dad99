"""What one stage of a profiled parallelism plan costs: the answer of a ``Profile`` request.

Crius §5.1 (Fig. 9) profiles each Cell twice -- every stage data-parallel-only, then every
stage tensor-parallel-only -- and assembles the ``2^S`` plans from the per-stage figures. A
:class:`StageProfile` is one stage of one such profiling; the performance model produces it
in simulation, an agent of the Cell's GPU type sends it back (``ProfileResult``) on a live
control plane, so both feed the same assembly.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StageProfile:
    """One pipeline stage under a DP x TP split, per micro-batch (Crius §5.1, Fig. 10's ``T_i``).

    ``compute_s``: forward + backward of the stage's micro-batch on its ``data x tensor`` GPUs;
    ``tensor_comm_s``: its tensor-parallel collectives on the critical path; ``recv_s``: the
    activation and gradient transfer from the previous stage; ``allreduce_s``: its gradients'
    data-parallel all-reduce; ``optimizer_s``: the optimizer step of one GPU's shard;
    ``memory_bytes``: what one GPU of the stage holds, against ``capacity_bytes`` (§5.1: "If the
    memory usage exceeds the memory limit of the used GPU, the corresponding parallelism plan is
    dropped for the stage").
    """

    data: int
    tensor: int
    compute_s: float
    tensor_comm_s: float
    recv_s: float
    allreduce_s: float
    optimizer_s: float
    memory_bytes: float
    capacity_bytes: float

    def __post_init__(self) -> None:
        if self.data < 1 or self.tensor < 1:
            raise ValueError(f"stage degrees must be >= 1, got data {self.data}, tensor {self.tensor}")
        for name in ("compute_s", "tensor_comm_s", "recv_s", "allreduce_s", "optimizer_s", "memory_bytes",
                     "capacity_bytes"):
            value = getattr(self, name)
            if not (value >= 0.0 and value < float("inf")):
                raise ValueError(f"stage profile {name} must be finite and >= 0, got {value}")

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.capacity_bytes
