"""What a policy sees: a read-only view of the cluster at one instant.

The core builds a :class:`ClusterView` for each scheduling pass. Its job
entries are the core's own records typed as :class:`JobInfo`, a read-only
protocol, so building a view costs nothing per job; a policy that writes to
them breaks the contract (the core re-validates every action anyway).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from halyard.datamodel import Allocation, Cluster, JobEvent, JobSpec, JobState, StagePlan, StageProfile
from halyard.policies.facts import ClusterFacts, ClusterShape
from halyard.policies.reasons import Unplaced
from halyard.policies.resources import FreeResources

if TYPE_CHECKING:
    from halyard.policies.profiles import ProfileSource

# Round instants are computed as k x round_s by both drivers, so they are exact; the slack only
# absorbs a replay whose trace origin was added to them (whole rounds, exact in practice).
ROUND_BOUNDARY_TOLERANCE_S = 1e-6


def at_round_boundary(now: float, round_s: float, slack_s: float = ROUND_BOUNDARY_TOLERANCE_S) -> bool:
    """Whether ``now`` is a whole number of ``round_s`` rounds on the cluster clock, up to ``slack_s`` late
    (:attr:`ClusterView.at_round_boundary`; the core asks it without building a view)."""
    offset = math.remainder(now, round_s)
    return -ROUND_BOUNDARY_TOLERANCE_S <= offset <= slack_s


class JobInfo(Protocol):
    """A job's scheduling state, as policies may read it."""

    @property
    def spec(self) -> JobSpec: ...
    @property
    def job_id(self) -> str: ...
    @property
    def state(self) -> JobState: ...
    @property
    def allocation(self) -> Allocation | None: ...
    @property
    def num_gpus(self) -> int:
        """GPUs held when running, else GPUs requested."""
        ...
    @property
    def iterations_total(self) -> int: ...
    @property
    def ideal_iteration_s(self) -> float:
        """Iteration time on the tightest placement of the requested GPUs."""
        ...
    @property
    def iteration_s(self) -> float:
        """Current iteration time when running, else :attr:`ideal_iteration_s`."""
        ...
    @property
    def arrival_seq(self) -> int:
        """Position in arrival order; breaks ties between equal submit times."""
        ...
    @property
    def pending_since(self) -> float: ...
    @property
    def last_assignment_time(self) -> float | None:
        """When the job last got (or lost) GPUs; None if it never ran."""
        ...
    @property
    def preemptions(self) -> int: ...
    def iterations_done(self, now: float) -> float: ...
    def remaining_iterations(self, now: float) -> float: ...
    def attained_gpu_s(self, now: float) -> float:
        """GPU-seconds held so far (Tiresias' attained service)."""
        ...
    def service_line(self) -> tuple[float, int, float | None]:
        """``(banked, gpus, since)``: :meth:`attained_gpu_s` in closed form, ``banked + gpus x (now - since)``
        while running (``banked`` when ``since`` is None), for evaluating many jobs at once. They change only
        when the core logs an event for the job."""
        ...
    def run_time_s(self, now: float) -> float:
        """Seconds spent running so far."""
        ...
    @property
    def epoch(self) -> Hashable:
        """Changes whenever the job's progress changes course (it stops, gets a new rate, reports
        progress): with the allocation, it fixes :meth:`progress_line`."""
        ...
    def progress_line(self) -> tuple[float, float, float, float, float]:
        """``(done, since, rate, run_s, run_from)``: :meth:`iterations_done` and :meth:`run_time_s` in
        closed form, for evaluating many jobs at once (``JobRecord.progress_line`` says how)."""
        ...


def allocation_of(job: JobInfo) -> Allocation:
    """What a running job holds (every job of ``ClusterView.running`` holds an allocation; a pending job
    none): the narrowing policies need where they read a running job's allocation."""
    allocation = job.allocation
    if allocation is None:
        raise ValueError(f"job {job.job_id} holds no allocation: it is not running")
    return allocation


class LinkDemand(Protocol):
    """A job's demand on one shared link over one iteration: ``kind`` "nic" (``name`` a node) or
    "uplink" (``name`` a rack), its Up/Down ``profile`` and ``gbytes`` (Cassini's input, §4.1)."""

    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def profile(self) -> object: ...
    @property
    def gbytes(self) -> float: ...


class Timing(Protocol):
    """What :meth:`PerformanceEstimator.job_timing` answers: ``iteration`` (``total_s``,
    ``comm_s``, ...) and the per-link ``links`` of the placement."""

    @property
    def iteration(self) -> object: ...
    @property
    def links(self) -> Sequence[LinkDemand]: ...


class PerformanceEstimator(Protocol):
    """The part of the performance model a policy may consult: every method a policy calls is declared
    here (``halyard.emulator.PerformanceModel`` implements them; mypy checks policies against this)."""

    def job_timing(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> Timing:
        """Iteration time and per-link Up/Down profiles of ``spec`` on a (candidate) ``allocation``,
        under its parallelism plan: the links a placement crosses and what it puts on them."""
        ...

    def iteration_time(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> object: ...
    def consolidated_iteration_time(self, spec: JobSpec, cluster: Cluster, gpu_type: str | None = None) -> float: ...
    def ideal_iteration_time(self, spec: JobSpec, gpu_type: str) -> float:
        """Compute-only seconds per iteration on one GPU of ``gpu_type`` (Dally's ideal run time)."""
        ...
    def stalled_compute_s(self, model: str, gpu_type: str, cpus_per_gpu: float, memory_gb_per_gpu: float,
                          batch: int = 0) -> float:
        """Seconds per iteration on one GPU with these CPU cores and memory per GPU (data stalls):
        what Synergy's optimistic profiling measures for one CPU point at full memory."""
        ...
    def cache_fetch_s(self, model: str, memory_gb_per_gpu: float, batch: int = 0) -> float:
        """Seconds per iteration reading cache misses with this memory per GPU (the cache model
        optimistic profiling fills the memory columns with)."""
        ...
    def layers(self, model: str) -> int:
        """The layers a pipeline plan of ``model`` splits (0: data parallel only)."""
        ...
    def reference_batch(self, model: str) -> int:
        """The per-GPU batch a job of ``model`` that gives none trains (``JobSpec.batch_size`` 0)."""
        ...
    def fits_plan(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> bool:
        """Whether every GPU of ``allocation`` holds its pipeline stage's share of ``spec`` (Crius §5.1
        drops a plan whose stage exceeds a GPU's memory)."""
        ...
    def fits_memory(self, spec: JobSpec, gpu_type: str, gpus: int = 0) -> bool:
        """Whether one worker of ``spec`` on ``gpus`` GPUs (0: its ``num_gpus``; a MoE model's experts are
        sharded over them) fits the memory of a ``gpu_type`` GPU (cheap: cached)."""
        ...
    def fitting_plan(self, spec: JobSpec, gpu_type: str, gpus: int) -> tuple[StagePlan, ...] | None:
        """A plan of ``gpus`` GPUs of ``gpu_type`` (equal stages, fewest first, then least tensor degree)
        under which every GPU holds its share of ``spec``, or None (Crius Fig. 3: OOM plans are infeasible)."""
        ...
    def runs_on(self, spec: JobSpec, gpu_type: str, gpus: int) -> bool:
        """Whether ``gpus`` GPUs of ``gpu_type`` run ``spec`` under some plan: its data-parallel worker fits
        (:meth:`fits_memory`) or :meth:`fitting_plan` finds one (Crius §8.1: every job may use Alpa's
        adaptive parallelism)."""
        ...
    def profile_stages(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> Sequence[StageProfile]:
        """One profiling of the plan ``allocation.stages``, per stage (Crius §5.1; what an agent answers)."""
        ...
    def assembled_iteration_s(self, spec: JobSpec, stages: Sequence[StageProfile]) -> float:
        """Iteration time of the plan assembled from profiled ``stages`` (Crius §5.1's pipeline and tail)."""
        ...


class EventHistory(Protocol):
    """The core's event log as a view offers it: its length and the events after a number."""

    def __len__(self) -> int: ...

    def since(self, seq: int) -> Sequence[JobEvent]: ...


class EpochHistory(Protocol):
    """The core's journal of epoch moves (``EpochJournal``) as a view offers it: how many moves so far, and the ids
    of the jobs whose :attr:`JobInfo.epoch` moved from a position on (a job once per move), or None when the
    journal no longer holds them all."""

    def __len__(self) -> int: ...

    def since(self, position: int) -> Sequence[str] | None: ...


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The cluster at ``now``: free resources, running and pending jobs.

    ``pending`` is in arrival order; ``free`` must not be modified (take a
    :meth:`FreeResources.copy` to plan on). ``facts`` are what stages derive from
    the cluster and the performance model alone (the core passes one for all its
    passes; a view built without one gets its own).
    """

    now: float
    cluster: Cluster
    free: FreeResources
    running: Mapping[str, JobInfo]
    pending: Sequence[JobInfo]
    perf: PerformanceEstimator
    round_s: float
    pending_demand: Mapping[int, int]  # requested GPUs -> number of pending jobs
    facts: ClusterFacts = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    # Where the run's time axis starts on the cluster clock (0 in the simulator; replay's trace starts
    # later): a decision that depends on the instant itself, not a duration, takes it from here.
    origin_s: float = 0.0
    # Where the profilings a policy asked for come from (policies/profiles.py; Crius §5.1's stage profilings):
    # None for the performance model (the simulator); the live control plane's asks its agents.
    profiles: ProfileSource | None = field(default=None, repr=False, compare=False)
    # How long after a round boundary a pass still counts as that round's: the deterministic drivers
    # pass at the boundary's exact float; the wall-clock daemon when its event loop reaches the timer.
    round_slack_s: float = ROUND_BOUNDARY_TOLERANCE_S
    # The core's event log (every change it makes to a job is one event, numbered from 1) and every job
    # it knows by id: a stage that keeps work from pass to pass learns from them what changed since
    # (Kubernetes' scheduler cache follows its informers the same way). None in a view built by hand.
    events: EventHistory | None = field(default=None, repr=False, compare=False)
    jobs: Mapping[str, JobInfo] | None = field(default=None, repr=False, compare=False)
    # Why the waiting jobs wait, as the core holds it from the last pass (job id -> reason), for a plan
    # that says only what changed (Plan.changes_from). None in a view built by hand.
    reasons: Mapping[str, Unplaced] | None = field(default=None, repr=False, compare=False)
    # Every move of a job's epoch, in order (the core's journal): a stage that keeps per-job numbers checked by
    # epoch learns from it which jobs' epochs may have moved since it last looked (a rate change logs no event).
    # None in a view built by hand.
    epochs: EpochHistory | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.facts is None:
            object.__setattr__(self, "facts", ClusterFacts(self.cluster, self.perf))

    @property
    def schedulable_gpus(self) -> int:
        """GPUs on nodes that accept new work, free or not."""
        return self.free.schedulable_gpus

    @property
    def at_round_boundary(self) -> bool:
        """Whether ``now`` is a whole number of rounds on the cluster clock: the instants the round
        timer of the simulator and of the control plane both fire at (``floor(now / round_s) + 1``
        rounds), so a round-based stage sees the same boundaries in simulate and replay."""
        return at_round_boundary(self.now, self.round_s, self.round_slack_s)

    @property
    def shape(self) -> ClusterShape:
        return self.facts.shape

    def gpu_types_for(self, spec: JobSpec, gpus: int = 0) -> frozenset[str] | None:
        """The GPU types ``spec`` may be placed on (:meth:`ClusterFacts.gpu_types_for`)."""
        return self.facts.gpu_types_for(spec, gpus)
