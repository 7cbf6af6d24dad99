"""Allocations: the resources a running job holds, per node.

Besides GPUs, CPU cores and memory, an allocation says how the job runs on them:
its pipeline stages (Crius' Cells, papers/crius-cell-scheduling.txt §4.2: a job x
GPU count x pipeline stages, each stage split DP x TP) and, for a job with logical
workers, how many of them each GPU runs (EasyScale's EST-to-GPU mapping,
papers/easyscale-elastic-training.txt §3.2, §3.4). Each node's counts are checked
here against its GPUs; :class:`halyard.controlplane.SchedulingCore` checks a
policy's allocation as a whole against the job (its GPU range, its logical
workers, stages that hold all its GPUs), and the performance model refuses a
plan it cannot cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class StagePlan:
    """One pipeline stage of a Cell plan: its GPUs and its DP x TP split (``data x tensor = gpus``)."""

    gpus: int
    data: int = 1
    tensor: int = 1

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.data < 1 or self.tensor < 1:
            raise ValueError(f"stage gpus, data and tensor must be >= 1, got {self.gpus}, {self.data}, {self.tensor}")
        if self.data * self.tensor != self.gpus:
            raise ValueError(f"stage of {self.gpus} GPUs split data {self.data} x tensor {self.tensor} "
                             f"= {self.data * self.tensor}")


@dataclass(frozen=True, slots=True)
class NodeAllocation:
    """GPU indices, CPU cores and memory a job holds on one node.

    ``workers[i]`` is how many of the job's logical workers GPU ``gpus[i]`` runs,
    time-sliced (EasyScale's ESTs); empty for a job without logical workers (one
    worker per GPU).
    """

    node: str
    gpus: tuple[int, ...]
    cpus: int
    memory_mb: int
    workers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(set(self.gpus)) != len(self.gpus):
            raise ValueError(f"node {self.node}: GPU indices repeat in {self.gpus}")
        if self.cpus < 0 or self.memory_mb < 0:
            raise ValueError(f"node {self.node}: negative cpus or memory")
        if self.workers:
            if len(self.workers) != len(self.gpus):
                raise ValueError(f"node {self.node}: {len(self.workers)} worker counts for {len(self.gpus)} GPUs")
            if min(self.workers) < 1:
                raise ValueError(f"node {self.node}: every GPU runs at least one logical worker, got {self.workers}")


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
        counted = [bool(n.workers) for n in self.nodes if n.gpus]
        if any(counted) and not all(counted):
            raise ValueError("give logical-worker counts for the GPUs of every node or of none")
        if self.time_shift_s != 0.0 and not self.has_time_shift:
            object.__setattr__(self, "has_time_shift", True)

    def with_time_shift(self, seconds: float, period_s: float = 0.0, epoch_s: float = 0.0) -> Allocation:
        """This allocation with iterations on the grid ``epoch_s + seconds + k x period_s``."""
        return replace(self, time_shift_s=seconds, time_shift_period_s=period_s, time_shift_epoch_s=epoch_s,
                       has_time_shift=True)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.node for n in self.nodes)

    @property
    def logical_workers(self) -> int:
        """Logical workers over all GPUs; 0 when the allocation gives no per-GPU counts."""
        return sum(sum(n.workers) for n in self.nodes)

    def on(self, node: str) -> NodeAllocation | None:
        for n in self.nodes:
            if n.node == node:
                return n
        return None

    def with_resources(self, per_node: tuple[tuple[int, int], ...]) -> Allocation:
        """This allocation with (CPU cores, memory MB) ``per_node[i]`` on its i-th node: same GPUs, stages,
        workers and time-shift (built directly: Synergy's re-pack makes these by the hundred thousand)."""
        if len(per_node) != len(self.nodes):
            raise ValueError(f"{len(per_node)} CPU/memory pairs for an allocation on {len(self.nodes)} nodes")
        parts = tuple([NodeAllocation(p.node, p.gpus, c, m, p.workers)
                       for p, (c, m) in zip(self.nodes, per_node, strict=True)])
        return replace(self, nodes=parts)

    def with_workers(self, logical_workers: int) -> Allocation:
        """This allocation with ``logical_workers`` spread as evenly as integers allow over its
        GPUs, in allocation order (the first GPUs take one more): EasyScale's balanced
        mapping on a homogeneous GPU set (§3.4, Eq. 1 with equal ``C_i``)."""
        gpus = self.num_gpus
        if not 1 <= gpus <= logical_workers:
            raise ValueError(f"{logical_workers} logical workers cannot cover {gpus} GPUs")
        base, extra = divmod(logical_workers, gpus)
        parts, k = [], 0
        for n in self.nodes:
            counts = tuple(base + (1 if k + i < extra else 0) for i in range(len(n.gpus)))
            k += len(n.gpus)
            parts.append(NodeAllocation(n.node, n.gpus, n.cpus, n.memory_mb, counts if n.gpus else ()))
        return replace(self, nodes=tuple(parts))  # keeps the stages and any time-shift grid
