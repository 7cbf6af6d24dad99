"""Jobs: what a user submits, and the states a job passes through."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from halyard.datamodel import limits as lim
from halyard.datamodel.errors import InvalidTransition, ValidationError

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Parallelism:
    """How a job splits over its GPUs: data x tensor x pipeline degrees."""

    data: int = 1
    tensor: int = 1
    pipeline: int = 1

    @property
    def world_size(self) -> int:
        return self.data * self.tensor * self.pipeline


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as submitted. Immutable; progress lives in the scheduler.

    ``iterations`` is the work to do. A trace that gives a run time instead
    sets ``duration_s`` and leaves ``iterations`` at 0; the performance model
    then converts it (:meth:`halyard.emulator.PerformanceModel.iterations_for`)
    so that the job's ideal run time matches the trace.

    An elastic job gives a GPU range ``min_gpus..max_gpus`` around ``num_gpus``
    (its initial size: Crius' ``N_G``, whose Cells use ``N_G/2, N_G, 2 N_G`` GPUs,
    papers/crius-cell-scheduling.txt §6), and the core accepts any allocation in
    that range. ``logical_workers`` is EasyScale's ``maxP`` (papers/easyscale-elastic-training.txt
    §3.2): the job always trains as that many data-parallel workers, time-sliced
    over however many GPUs it holds, so its global batch and its results do not
    depend on its size; 0 means one worker per GPU.
    """

    job_id: str
    submit_time: float
    model: str
    num_gpus: int
    iterations: int = 0
    batch_size: int = 0  # per GPU; 0: the model's reference batch size
    tenant: str = "default"
    user: str = ""
    gpu_type: str | None = None
    min_gpus: int | None = None  # elastic jobs only
    max_gpus: int | None = None
    logical_workers: int = 0  # EasyScale ESTs (maxP); 0: one worker per GPU
    parallelism: Parallelism | None = None  # None: pure data parallel over num_gpus
    priority: int = 0
    deadline: float | None = None
    duration_s: float | None = None
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    extra: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # original trace fields

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        def bad(fieldname: str, msg: str) -> ValidationError:
            return ValidationError(msg, field=fieldname)

        if not self.job_id or not self.job_id.strip():
            raise bad("job_id", "must be a non-empty string")
        lim.check_seconds(self.submit_time, "submit_time", lim.MAX_TIME_S)
        if not self.model:
            raise bad("model", "must be a non-empty model name")
        if self.num_gpus < 1:
            raise bad("num_gpus", f"must be >= 1, got {self.num_gpus}")
        lim.check_int(self.num_gpus, "num_gpus", 1, lim.MAX_GPUS)
        if self.iterations < 0:
            raise bad("iterations", f"must be >= 0, got {self.iterations}")
        lim.check_int(self.iterations, "iterations", 0, lim.MAX_ITERATIONS)
        if self.iterations == 0 and (self.duration_s is None or self.duration_s <= 0):
            raise bad("iterations", "give iterations > 0 or a positive duration_s")
        if self.duration_s is not None:
            lim.check_seconds(self.duration_s, "duration_s", lim.MAX_DURATION_S, positive=True)
        if self.batch_size < 0:
            raise bad("batch_size", f"must be >= 0, got {self.batch_size}")
        lim.check_int(self.batch_size, "batch_size", 0, lim.MAX_BATCH_SIZE)
        if self.min_gpus is not None and not 1 <= self.min_gpus <= self.num_gpus:
            # 0 is refused: a job that holds no GPUs is PENDING, which already says "waits for its first allocation".
            raise bad("min_gpus", f"must be between 1 and num_gpus ({self.num_gpus}), got {self.min_gpus}")
        if self.max_gpus is not None and self.max_gpus < self.num_gpus:
            raise bad("max_gpus", f"must be >= num_gpus ({self.num_gpus}), got {self.max_gpus}")
        if self.max_gpus is not None:
            lim.check_int(self.max_gpus, "max_gpus", self.num_gpus, lim.MAX_GPUS)
        lim.check_int(self.logical_workers, "logical_workers", 0, lim.MAX_LOGICAL_WORKERS)
        if self.logical_workers:
            most = self.gpu_range[1]
            if self.logical_workers < most:
                raise bad("logical_workers", f"{self.logical_workers} logical workers cannot cover up to {most} GPUs "
                                             "(every GPU runs at least one)")
            if self.parallelism is not None and (self.parallelism.tensor > 1 or self.parallelism.pipeline > 1):
                raise bad("logical_workers", "logical workers are data-parallel replicas (EasyScale §3.2); "
                                             "tensor and pipeline degrees must be 1")
        if self.parallelism is not None:
            for name in ("data", "tensor", "pipeline"):
                lim.check_int(getattr(self.parallelism, name), f"parallelism.{name}", 1, lim.MAX_GPUS)
            if self.parallelism.world_size != self.num_gpus:
                raise bad("parallelism", f"data x tensor x pipeline = {self.parallelism.world_size}, "
                                         f"but num_gpus = {self.num_gpus}")
        lim.check_int(self.priority, "priority", -lim.MAX_PRIORITY, lim.MAX_PRIORITY)
        if self.deadline is not None:
            if self.deadline < self.submit_time:
                raise bad("deadline", "must not be before submit_time")
            lim.check_seconds(self.deadline - self.submit_time, "deadline", lim.MAX_DEADLINE_S)


    @property
    def gpu_range(self) -> tuple[int, int]:
        """The fewest and most GPUs the job may hold (both ``num_gpus`` for a fixed-size job)."""
        return (self.min_gpus or self.num_gpus, self.max_gpus or self.num_gpus)

    @property
    def elastic(self) -> bool:
        """Whether the job may run on another GPU count than ``num_gpus``."""
        low, high = self.gpu_range
        return low != high


class JobState(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})

# DESIGN.md: PENDING -> RUNNING -> (PREEMPTED -> PENDING)* -> COMPLETED | FAILED | CANCELLED.
# A pending or preempted job may also be cancelled, and a running job may fail.
TRANSITIONS: Mapping[JobState, frozenset[JobState]] = MappingProxyType({
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.FAILED}),
    JobState.RUNNING: frozenset({JobState.PREEMPTED, JobState.COMPLETED, JobState.FAILED,
                                 JobState.CANCELLED}),
    JobState.PREEMPTED: frozenset({JobState.PENDING, JobState.CANCELLED, JobState.FAILED}),
    JobState.COMPLETED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
})


def check_transition(job_id: str, old: JobState, new: JobState) -> None:
    """Raise :class:`InvalidTransition` unless ``old -> new`` is allowed."""
    if new not in TRANSITIONS[old]:
        raise InvalidTransition(f"job {job_id}: {old.value} -> {new.value} is not allowed")
