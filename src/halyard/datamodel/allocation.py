"""Allocations: the resources a running job holds, per node."""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class StagePlan:
    """One pipeline stage of a Cell plan: its GPUs and its DP x TP split."""

    gpus: int
    data: int = 1
    tensor: int = 1


@dataclass(frozen=True, slots=True)
class NodeAllocation:
    """GPU indices, CPU cores and memory a job holds on one node."""

    node: str
    gpus: tuple[int, ...]
    cpus: int
    memory_mb: int

    def __post_init__(self) -> None:
        if len(set(self.gpus)) != len(self.gpus):
            raise ValueError(f"node {self.node}: GPU indices repeat in {self.gpus}")
        if self.cpus < 0 or self.memory_mb < 0:
            raise ValueError(f"node {self.node}: negative cpus or memory")


@dataclass(frozen=True, slots=True)
class Allocation:
    """Everything a job holds. A job holds at most one allocation at a time."""

    nodes: tuple[NodeAllocation, ...]
    time_shift_s: float = 0.0
    stages: tuple[StagePlan, ...] = ()
    # Cassini time-shift grid: iterations start at epoch + shift + k x period (halyard.timeshift).
    # has_time_shift says a shift is set, so a shift of 0 is a real one; a non-zero
    # time_shift_s always is (allocations built before the flag existed).
    time_shift_period_s: float = 0.0  # 0: the job's own iteration time
    time_shift_epoch_s: float = 0.0
    has_time_shift: bool = False
    # Derived once: priority keys read it for every job in every pass.
    num_gpus: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [n.node for n in self.nodes]
        if not names:
            raise ValueError("an allocation needs at least one node")
        if len(set(names)) != len(names):
            raise ValueError(f"a node appears twice in allocation: {names}")
        object.__setattr__(self, "num_gpus", sum(len(n.gpus) for n in self.nodes))
        if self.time_shift_s != 0.0 and not self.has_time_shift:
            object.__setattr__(self, "has_time_shift", True)

    def with_time_shift(self, seconds: float, period_s: float = 0.0, epoch_s: float = 0.0) -> Allocation:
        """This allocation with iterations on the grid ``epoch_s + seconds + k x period_s``."""
        return replace(self, time_shift_s=seconds, time_shift_period_s=period_s, time_shift_epoch_s=epoch_s,
                       has_time_shift=True)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.node for n in self.nodes)

    def on(self, node: str) -> NodeAllocation | None:
        for n in self.nodes:
            if n.node == node:
                return n
        return None
