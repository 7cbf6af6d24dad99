"""The scheduling core: jobs, the resource ledger, passes and plan application.

Both the in-process simulator and the gRPC control plane drive this class;
what differs is who carries out the applied actions (a simulated agent pool,
or agents over gRPC) and which clock gives ``now``. The core enforces the
invariants centrally, whatever the policy returns:

* no GPU, CPU core or megabyte of memory is given out twice (the ledger);
* a job holds at most one allocation, and only in state RUNNING;
* no job gets GPUs of a type whose memory one of its workers does not fit
  (:meth:`PerformanceModel.fits_memory`; submission refuses a job that fits no type);
* a plan is applied atomically: all its actions or none;
* every state change is an event with the next sequence number.

For persistence the core hands out what changed since the last call
(:meth:`SchedulingCore.take_changes`) and rebuilds itself from stored state
(:meth:`SchedulingCore.restore`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from sortedcontainers import SortedKeyList

from halyard.datamodel import (
    Allocation,
    Cluster,
    EventKind,
    HalyardError,
    JobEvent,
    JobSpec,
    JobState,
    ValidationError,
    check_transition,
)
from halyard.datamodel.limits import MAX_ITERATIONS
from halyard.emulator import PerformanceModel
from halyard.emulator.parallel import UnsupportedParallelismError
from halyard.plural import plural
from halyard.policies import (
    Action,
    ClusterFacts,
    ClusterView,
    Drop,
    FreeResources,
    Migrate,
    NeedsProfiles,
    OverAllocation,
    PassState,
    Plan,
    Policy,
    Preempt,
    Resize,
    SetResources,
    SetTimeShift,
    Start,
    Unplaced,
    WaitCode,
)
from halyard.policies.capabilities import profile_requests_of
from halyard.policies.profiles import ProfileRequest, ProfileSource
from halyard.policies.view import ROUND_BOUNDARY_TOLERANCE_S, allocation_of, at_round_boundary
from halyard.scheduling.backends import EMULATES, RUNS_COMMANDS, NodeBackends, describe_kind, job_kind, no_node_for
from halyard.scheduling.eventcounts import BY_KIND, count, recount
from halyard.scheduling.eventlog import EventLog, describe
from halyard.scheduling.passtimes import PassTimes
from halyard.scheduling.records import EpochJournal, JobRecord
from halyard.scheduling.state import InconsistentState, StoredState


class PlanError(HalyardError):
    """A policy returned an action the core refuses; nothing of the plan was applied."""

    def __init__(self, index: int, action: Action, reason: str) -> None:
        self.index = index
        self.action = action
        super().__init__(f"plan action #{index} {type(action).__name__}({action.job_id}): {reason}")


@dataclasses.dataclass(slots=True)
class _Quiet:
    """What an empty pass leaves for :meth:`SchedulingCore.schedule` to skip repeats of it."""

    view: ClusterView
    events: int  # the log's length then: every change the core makes to a job is an event
    schedulable: bytes  # the nodes' schedulable flags then: the rest of what the free resources say
    policy: Policy  # the instance that made the pass
    until: float | None = None  # the policy's quiet_until(view), once asked
    # For a round-gated policy (Policy.quiet_until): whether the pass was at a round boundary, as the
    # passes it vouches for must be; None: any pass.
    at_round: bool | None = None
    # Left by a pass that acted with the policy's promise (Plan.settles) rather than by an empty pass.
    promised: bool = False


class SchedulingCore:
    def __init__(self, cluster: Cluster, policy: Policy, perf: PerformanceModel,
                 *, round_s: float = 300.0, round_slack_s: float = ROUND_BOUNDARY_TOLERANCE_S,
                 backends: bool = False) -> None:
        self.cluster = cluster
        self.policy = policy
        # Mixed clusters (scheduling/backends.py): each node's kind, as its agent said, and the live
        # (pending or running) jobs of each kind. With ``backends`` (the gRPC control plane) a fresh copy
        # of the policy is kept now, before any pass, for the jobs with a command: a policy's instance
        # keeps state about the jobs it schedules, so the two kinds never share one.
        self.backends = NodeBackends(len(cluster.nodes))
        self._live: Counter[int] = Counter()
        self._command_policy: Policy | None = _fresh_copy(policy) if backends else None
        self.perf = perf
        self.round_s = round_s
        self.round_slack_s = round_slack_s  # ClusterView.round_slack_s: how late a round's pass may run
        # Where the run's time axis starts on the cluster clock: the simulator's is 0; replay
        # starts its trace at a whole round after its agents register (set_time_origin). What
        # depends on the instant itself (fabric phases, seeded draws) is taken from it.
        self.origin_s = 0.0
        self.free = FreeResources(cluster)
        self.log = EventLog()
        # Every move of a job's epoch (EpochJournal): the views offer it, so that a policy that keeps per-job
        # numbers checked by epoch reads which moved instead of every running job's epoch at every pass.
        self.epochs = EpochJournal()
        self.records: dict[str, JobRecord] = {}
        self.pending: SortedKeyList = SortedKeyList(key=lambda r: (r.spec.submit_time, r.arrival_seq))
        self.running: dict[str, JobRecord] = {}
        self._running_view: Mapping[str, JobRecord] = MappingProxyType(self.running)
        self._records_view: Mapping[str, JobRecord] = MappingProxyType(self.records)
        self._demand: Counter[int] = Counter()  # requested GPUs of pending jobs
        self._demand_view: Mapping[int, int] = MappingProxyType(self._demand)
        self._gpus_by_type = {t: sum(n.gpus for n in cluster.nodes if n.gpu_type == t)
                              for t in cluster.gpu_types}
        self.facts = ClusterFacts(cluster, perf)  # what policies derive from the cluster alone, kept over passes
        # Where the profilings a policy asks for before a job's first pass come from (the preparation hook,
        # policies/profiles.py): None, the performance model; the gRPC control plane sets its agents'.
        self.profiles: ProfileSource | None = None
        self.passes = 0
        # After a pass that planned nothing: its view, what the state was then (events logged, schedulable
        # flags) and, once asked, the policy's quiet_until; a pass before that time over the same state
        # is skipped. Asked only when a pass finds the state unchanged: most empty passes are followed
        # by an arrival or a completion, which makes the answer moot.
        self._quiet: _Quiet | None = None
        # Skip the pass after one whose plan promised to leave a state the next pass leaves as it is
        # (Plan.settles); with ``verify_promises`` (tests) run it anyway and raise if it plans or tells anything.
        self.keep_promises = True
        self.verify_promises = False
        self.skipped_passes = 0
        # After a call of schedule() that skipped its pass (a quiet one, not round-gated, not held to a promise):
        # the policy's quiet_until, before which every later pass with no event logged and no schedulable flag
        # changed is skipped the same way; -inf after any other call. The simulator pushes its next round there.
        self.skipped_until = -math.inf
        # Why jobs wait: the reasons the last pass gave (its Plan.unplaced, kept as it is: a loaded queue has
        # hundreds of waiting jobs per pass) and its reason for the jobs it did not look at (Plan.otherwise).
        # A job's reason from an earlier pass is written to its record when a pass stops looking at it.
        # A plan that says its reasons as changes (Plan.changes_from) edits the kept ones in place: the
        # views show them read-only (ClusterView.reasons), and ``_moved`` names the jobs that joined or left
        # the queue since, whose reasons are settled then.
        self._told: dict[str, Unplaced] = {}
        self._told_view: Mapping[str, Unplaced] = MappingProxyType(self._told)
        self._moved: list[str] = []  # jobs that joined or left the queue since the last pass's reasons
        # True while the passes since the one that gave ``_told`` looked at no job and changed nothing (a
        # round-based policy between rounds: only Plan.otherwise): ``_told`` is then an earlier pass's
        # reasons, not yet written to the records (_note_reasons defers that to the next pass that looks;
        # one that says its reasons as changes over them, as the views still show them, needs no write).
        self._told_earlier = False
        # False: write every pass's reasons at once, as before issue 38 (what a benchmark compares against;
        # wait_of and waiting read the same either way, tests/test_wait_reasons_deferred.py).
        self.late_reasons = True
        self._otherwise: Unplaced | None = None
        self._otherwise_by_kind: dict[int, Unplaced] | None = None  # a split pass's, per job kind
        self.pass_seconds = PassTimes()  # wall seconds of the passes: count, sum, max, a bounded sample
        # Changes not yet handed out by take_changes(): jobs the core changed, the
        # epoch of each running job then (drivers change rates, which bumps it),
        # and how many events had been handed out.
        self._changed: set[str] = set()
        self._taken_epochs: dict[str, int] = {}
        self._taken_events = 0

    # --- jobs in ---------------------------------------------------------

    def submit(self, spec: JobSpec, now: float) -> JobRecord:
        """Accept a job or raise :class:`ValidationError` naming the field; changes nothing on error."""
        if spec.job_id in self.records:
            raise ValidationError(f"duplicate job id {spec.job_id!r}", field="job_id")
        if not self.perf.has_model(spec.model):
            raise ValidationError(f"unknown model {spec.model!r} (known: {', '.join(self.perf.models())})",
                                  field="model")
        gpu_type = spec.gpu_type or self.cluster.gpu_types[0]
        if spec.gpu_type is not None and spec.gpu_type not in self._gpus_by_type:
            raise ValidationError(f"no {spec.gpu_type} GPUs in cluster {self.cluster.name!r} "
                                  f"(it has {', '.join(self.cluster.gpu_types)})", field="gpu_type")
        capacity = self._gpus_by_type[gpu_type] if spec.gpu_type else self.cluster.total_gpus
        if spec.num_gpus > capacity:
            raise ValidationError(f"asks for {spec.num_gpus} GPUs, the cluster has {capacity}"
                                  f"{' of type ' + gpu_type if spec.gpu_type else ''}", field="num_gpus")
        if not self.perf.supports_gpu(spec.model, gpu_type):
            raise ValidationError(f"model {spec.model!r} has no profile for {gpu_type}", field="gpu_type")
        self._check_memory(spec)
        try:  # the performance model says which plans it cannot cost (a model without layer figures)
            iterations = self.perf.iterations_for(spec, self.cluster)
            ideal = self.perf.consolidated_iteration_time(spec, self.cluster)
        except UnsupportedParallelismError as exc:
            raise ValidationError(str(exc), field="parallelism") from None
        if not 0 < iterations <= MAX_ITERATIONS:
            raise ValidationError(f"converts to {iterations} iterations; at most {MAX_ITERATIONS} allowed",
                                  field="duration_s" if spec.duration_s else "iterations")
        record = JobRecord(spec, len(self.records), iterations, ideal, now)
        record.journal = self.epochs
        self.records[spec.job_id] = record
        self._live[job_kind(spec)] += 1
        self._changed.add(spec.job_id)
        self._enqueue(record)
        self.log.append(now, spec.job_id, EventKind.SUBMITTED, JobState.PENDING, self.ignored_fields(spec))
        return record

    @property
    def prepares(self) -> bool:
        """Whether the policy asks for profilings before a job's first pass (it declares
        :class:`~halyard.policies.NeedsProfiles`), which the driver then takes: the preparation hook."""
        return isinstance(self.policy, NeedsProfiles)

    def preparations(self, spec: JobSpec) -> Sequence[ProfileRequest]:
        """The profilings the policy will ask of ``view.profiles`` for ``spec`` (none unless it
        :attr:`prepares`): a driver with agents takes them before the job's first pass."""
        return profile_requests_of(self.policy, spec, self.facts)

    def ignored_fields(self, spec: JobSpec) -> str:
        """What the job sets that the policy does not act on, said in its SUBMITTED event ("" if nothing)
        rather than ignored silently: a priority under a policy without priorities, a
        deadline under one that is not deadline-aware."""
        given = [name for name, set_ in (("priority", spec.priority != 0), ("deadline", spec.deadline is not None))
                 if set_]
        if not given:  # the usual job: no need to ask the policy (a union over its stages) on every submission
            return ""
        honours = self.policy.honours
        ignored = [name for name in given if name not in honours]
        return f"{' and '.join(ignored)} ignored by policy {self.policy.name}" if ignored else ""

    def _check_memory(self, spec: JobSpec) -> None:
        """Refuse a job that runs under no plan on any type it may run on (its ``gpu_type``,
        else every type of the cluster), or on too few GPUs for its request: its data-parallel
        worker fits a GPU of the type; or, if it fits none (a model too large for one GPU), a
        tensor/pipeline plan of up to ``max_gpus`` GPUs of the type does (``perf.runs_on``;
        Crius Fig. 3: a job is admissible if some plan fits).

        A job left at its reference batch fits wherever micro-batches make it fit
        (:meth:`PerformanceModel.memory_footprint`); an explicit batch must fit as given.
        """
        types = (spec.gpu_type,) if spec.gpu_type else self.cluster.gpu_types
        most = spec.gpu_range[1]
        fitting = [t for t in types if self.perf.fits_memory(spec, t)]
        if not fitting:  # too large for one GPU data parallel: a tensor/pipeline plan of up to max_gpus
            fitting = [t for t in types if self.perf.runs_on(spec, t, min(most, self._gpus_by_type.get(t, 0)) or 1)]
        if not fitting:
            largest = max(types, key=self.perf.gpu_memory_bytes)
            f = self.perf.memory_footprint(spec, largest)
            split = f" even in {f.micro_batches} micro-batches" if f.micro_batches > 1 else ""
            plans = (f", and no tensor/pipeline plan of up to {most} GPUs of one type fits"
                     if self.perf.layers(spec.model) > 0 and most > 1 else "")
            raise ValidationError(f"model {spec.model!r} at batch {f.batch} needs {f.total_bytes / 1e9:.1f} GB "
                                  f"per GPU{split}; the largest eligible GPU ({largest}) has "
                                  f"{f.capacity_bytes / 1e9:.1f} GB{plans}", field="batch_size")
        if len(fitting) < len(types):
            gpus = sum(self._gpus_by_type[t] for t in fitting)
            if spec.num_gpus > gpus:
                raise ValidationError(f"asks for {spec.num_gpus} GPUs, the cluster has {gpus} on which model "
                                      f"{spec.model!r} at this batch fits ({', '.join(fitting)})",
                                      field="num_gpus")

    # --- passes ------------------------------------------------------------

    def view(self, now: float) -> ClusterView:
        return ClusterView(now=now, cluster=self.cluster, free=self.free, running=self._running_view,
                           pending=self.pending, perf=self.perf, round_s=self.round_s,
                           pending_demand=self._demand_view, facts=self.facts, origin_s=self.origin_s,
                           profiles=self.profiles, round_slack_s=self.round_slack_s, events=self.log,
                           jobs=self._records_view, reasons=self._told_view, epochs=self.epochs)

    def wake_at(self, now: float) -> float:
        """When the policy asks for a pass with no event before it (its optional ``wake_at``, :class:`Policy`),
        after ``now``; inf when it asks for none. Both drivers run a pass then, the simulator as a round
        (scheduling/simulator.py) and the control plane's round timer (``ControlPlane.next_round``), so
        that ``simulate`` and ``replay`` pass at the same instants. Only Dally's ``+auction-on-release``
        asks (policies/dally_release.py); a policy without the attribute costs no view."""
        wake = getattr(self.policy, "wake_at", None)
        if wake is None:
            return math.inf
        due = wake(self.view(now))
        return due if due > now else math.inf

    def schedule(self, now: float) -> list[Action]:
        """Run one policy pass and apply its plan; returns the applied actions.

        The policy learns from the pass only through ``on_applied`` after the plan is
        applied, or ``on_rejected`` if the core refuses it (Kubernetes' Reserve/Unreserve).
        In a cluster of mixed backends a pass runs once per kind of job (:meth:`_schedule_split`).
        """
        self.skipped_until = -math.inf
        split = self.backends.split(self.free.schedulable, self._live)
        if split is not None:
            return self._schedule_split(now, split)
        policy = self._policy_for(RUNS_COMMANDS if self.backends.known and not self._live[EMULATES]
                                  and self._live[RUNS_COMMANDS] else EMULATES)
        quiet, promised = self._quiet, None
        if (quiet is not None and quiet.policy is policy and quiet.events == len(self.log)
                and quiet.schedulable == self.free.schedulable.tobytes()
                and (quiet.at_round is None
                     or quiet.at_round == at_round_boundary(now, self.round_s, self.round_slack_s))):
            if quiet.until is None:
                quiet.until = policy.quiet_until(quiet.view)
            if now < quiet.until:
                if not (quiet.promised and self.verify_promises):
                    self.skipped_passes += 1  # the last pass planned nothing and this one would, word for word
                    if quiet.at_round is None:
                        self.skipped_until = quiet.until
                    return []
                promised = self._reasons()  # (run it, and hold it to the promise below)
        started = time.perf_counter()
        view = self.view(now)
        state = PassState()
        plan = policy.schedule(view, state)
        try:
            applied = self.apply(plan, now)
        except PlanError:
            policy.on_rejected(view, plan, state)
            raise
        policy.on_applied(view, plan, state)
        self.passes += 1
        self._note_reasons(plan.unplaced, plan.otherwise, since=plan.since, acted=bool(plan.actions))
        if promised is not None and (plan.actions or self._reasons() != promised):
            raise AssertionError(f"{policy.name}: a pass the last one promised to leave as it was changed something")
        self._quiet = None
        at_round = view.at_round_boundary if getattr(policy, "round_gated", False) else None
        if not plan.actions:
            # Every change the core makes to a job is an event, so the log's length stands for the jobs'
            # states and allocations; the schedulable flags are the rest of what the free resources say.
            self._quiet = _Quiet(view, len(self.log), self.free.schedulable.tobytes(), policy, at_round=at_round)
        elif plan.settles and self.keep_promises:  # (as if an empty pass had followed: a view after the plan)
            self._quiet = _Quiet(self.view(now), len(self.log), self.free.schedulable.tobytes(), policy,
                                 at_round=at_round, promised=True)
        self.pass_seconds.add(time.perf_counter() - started)
        return applied

    def _reasons(self) -> dict[str, Unplaced | None]:
        """Every waiting job's reason as :meth:`wait_of` tells it (``verify_promises``)."""
        return {job_id: self.wait_of(record) for job_id, record in self.records.items()
                if record.state is JobState.PENDING}

    def _policy_for(self, kind: int) -> Policy:
        """The policy instance of a kind of job: the given one for jobs without a command (and any pass
        that is not split), its copy kept at construction for jobs with one."""
        if kind != RUNS_COMMANDS or self._command_policy is None:
            return self.policy
        return self._command_policy

    def _schedule_split(self, now: float, kinds: list[int]) -> list[Action]:
        """A pass in a cluster of mixed backends: for each kind of job in turn, the kind's policy on a
        view of only that kind's pending and running jobs, with only the nodes that take the kind
        schedulable (scheduling/backends.py), so whatever the policy, a job with a command lands only
        where a command runs and one without only where it is emulated. A kind no schedulable node takes
        waits with that reason. The kinds' jobs are apart, their ledger is not (a node of no known
        backend takes both): each view's resources are those the plans before it leave, and the plans
        are applied together once all are valid, or none is (a plan is atomic; so is the pass)."""
        started = time.perf_counter()
        told: dict[str, Unplaced] = {}
        otherwise: dict[int, Unplaced] = {}
        made: list[tuple[Policy, ClusterView, Plan, PassState]] = []
        ledger = self.free
        for kind in kinds:
            policy = self._policy_for(kind)
            pending = [r for r in self.pending if job_kind(r.spec) == kind]
            running = {job_id: r for job_id, r in self.running.items() if job_kind(r.spec) == kind}
            if not pending and not (running and policy.acts_without_pending):
                continue
            free = ledger.copy()
            free.schedulable &= self.backends.eligible(kind)
            if not free.schedulable.any():
                why = no_node_for(kind, int(ledger.schedulable.sum()))
                told.update((r.job_id, why) for r in pending)
                continue
            view = ClusterView(now=now, cluster=self.cluster, free=free, running=MappingProxyType(running),
                               pending=pending, perf=self.perf, round_s=self.round_s,
                               pending_demand=MappingProxyType(Counter(r.spec.num_gpus for r in pending)),
                               facts=self.facts, origin_s=self.origin_s, profiles=self.profiles,
                               round_slack_s=self.round_slack_s)  # no events/jobs: kept state is rebuilt per kind
            state = PassState()
            plan = policy.schedule(view, state)
            made.append((policy, view, plan, state))
            try:
                ledger = self._validate(plan, ledger) if plan.actions else ledger
            except PlanError:
                for policy, view, plan, state in made:
                    policy.on_rejected(view, plan, state)
                raise
            told.update(plan.reasons())  # (a view of one kind has no reasons: each plan's are whole)
            if plan.otherwise is not None:
                otherwise[kind] = plan.otherwise
        applied: list[Action] = []
        for _, _, plan, _ in made:
            applied += self.apply(plan, now)  # validated above, against the ledger the plans before leave
        for policy, view, plan, state in made:
            policy.on_applied(view, plan, state)
        self.passes += 1
        self._note_reasons(told, None, otherwise)
        self._quiet = None
        self.pass_seconds.add(time.perf_counter() - started)
        return applied

    def set_node_backend(self, node: str, kind: int) -> None:
        """Node ``node``'s agent runs jobs of ``kind`` (scheduling/backends.py; ANY when it did not say)."""
        if self.backends.set(self.cluster.node(node).index, kind):
            self._quiet = None  # which jobs the node takes changed: the next pass must run

    def _note_reasons(self, told: dict[str, Unplaced], otherwise: Unplaced | None,
                      by_kind: dict[int, Unplaced] | None = None, *,
                      since: Mapping[str, Unplaced] | None = None, acted: bool = True) -> None:
        """Keep the pass's reasons; a waiting job the pass did not look at keeps its reason from the pass
        that last did (O(jobs whose reason that pass gave and this one does not)). With ``since`` (the
        plan's reasons are changes over the view's, Plan.changes_from) the kept ones are edited in place:
        O(changes + jobs that joined or left the queue).

        A whole pass that looked at no job and changed nothing (``acted`` False: a round-based policy
        between rounds says only ``otherwise``) leaves the last reasons where they are, marked earlier
        (``_told_earlier``), instead of writing each to its record: no job changes state until a pass acts,
        so the next pass that looks writes them, less those it gives again (a loaded Synergy queue has
        ~1,200 waiting jobs, and a pass between rounds follows most rounds: that write was 10 % of the run),
        or, when it says its reasons as changes over them (the views show them meanwhile), keeps them as the
        reasons it edits: no write at all (the staged policies' runnable walk, StagedPolicy.reason_changes)."""
        records, pending = self.records, JobState.PENDING
        if since is None and not told and not acted and by_kind is None and self.late_reasons and self._told:
            self._told_earlier = True  # (the views still show ``_told``, and ``_moved`` keeps growing: a change
            # set over them, the next pass that looks, needs neither the write nor what moved lost)
            self._otherwise, self._otherwise_by_kind = otherwise, None
            return
        if self._told_earlier and since is not None and since is not self._told_view:
            # changes over other reasons than those held: the deferred write first, whole, as it would have been
            for job_id, earlier in self._told.items():
                record = records.get(job_id)
                if record is not None and record.state is pending:
                    record.wait = earlier
            self._told = {}
            self._told_view = MappingProxyType(self._told)
        self._told_earlier = False
        moved, self._moved = self._moved, []
        self._otherwise = otherwise
        self._otherwise_by_kind = by_kind
        if since is not None:
            held = self._told
            if since is self._told_view:
                kept = held
            else:  # changes over reasons the core no longer holds: those of jobs still waiting, made whole
                kept = {job_id: why for job_id, why in since.items()
                        if (record := records.get(job_id)) is not None and record.state is pending}
            gone = []
            for job_id in dict.fromkeys(moved):  # as a whole pass that names only the jobs it was shown waiting
                record = records.get(job_id)
                if job_id in told:
                    if record is None or record.state is not pending:
                        gone.append(job_id)
                    continue
                why = held.get(job_id)
                kept.pop(job_id, None)
                if why is not None and record is not None and record.state is pending:
                    record.wait = why  # (it left the queue and came back in the pass)
            kept.update(told)
            for job_id in gone:
                del kept[job_id]
            if kept is not held:
                self._told, self._told_view = kept, MappingProxyType(kept)
            return
        last = self._told
        for job_id in (last.keys() - told.keys()) if told else last:
            record = records.get(job_id)
            if record is not None and record.state is pending:
                record.wait = last[job_id]
        self._told = told
        self._told_view = MappingProxyType(told)

    def _last_told(self) -> Mapping[str, Unplaced]:
        """The reasons the last pass gave the jobs it looked at (none if it looked at none)."""
        return {} if self._told_earlier else self._told

    def _otherwise_of(self, record: JobRecord) -> Unplaced | None:
        """The last pass's reason for the jobs it did not look at, of ``record``'s kind."""
        if self._otherwise_by_kind is None:
            return self._otherwise
        return self._otherwise_by_kind.get(job_kind(record.spec))

    @property
    def waiting(self) -> Counter[WaitCode]:
        """Pending jobs per reason code, as of the last pass's reasons."""
        last = self._last_told()
        codes = Counter(why.code for job_id, why in last.items()
                        if (record := self.records.get(job_id)) is not None and record.state is JobState.PENDING)
        told = sum(codes.values())
        if self._otherwise_by_kind:  # a split pass: a reason per kind (a small mixed cluster: count them)
            for record in self.pending:
                why = None if record.job_id in last else self._otherwise_of(record)
                if why is not None:
                    codes[why.code] += 1
        elif self._otherwise is not None and len(self.pending) > told:
            codes[self._otherwise.code] += len(self.pending) - told
        return codes

    def wait_of(self, record: JobRecord) -> Unplaced | None:
        """Why a pending job waits: its reason from the last pass if that pass looked at it, else that
        pass's reason for the jobs it did not look at, else its reason from the last pass that looked
        at it; None if no pass has said anything yet."""
        if record.state is not JobState.PENDING:
            return None
        why = self._told.get(record.job_id)
        if why is not None and not self._told_earlier:
            return why
        otherwise = self._otherwise_of(record)
        if otherwise is not None:
            return otherwise
        return record.wait if why is None else why  # an earlier pass's reason not yet written (_note_reasons)

    def apply(self, plan: Plan, now: float) -> list[Action]:
        """Validate the whole plan, then apply it in order; raise :class:`PlanError` if any action is wrong."""
        if plan.actions:  # a pass that only says why jobs wait (half of a loaded run's) has nothing to check
            self._validate(plan)
        for action in plan.actions:
            self._apply(action, now)
        return list(plan.actions)

    # --- jobs out ----------------------------------------------------------

    def complete(self, job_id: str, now: float) -> None:
        self._finish(job_id, now, JobState.COMPLETED, EventKind.COMPLETED)

    def fail(self, job_id: str, now: float, reason: str = "") -> None:
        self._finish(job_id, now, JobState.FAILED, EventKind.FAILED, reason)

    def cancel(self, job_id: str, now: float) -> None:
        self._finish(job_id, now, JobState.CANCELLED, EventKind.CANCELLED)

    def report_progress(self, record: JobRecord, now: float, iterations: float,
                        iteration_s: float | None = None) -> None:
        """An agent's report of how far a job it really runs is (:meth:`JobRecord.report_progress`). It
        moves the job's progress line without an event, so the next pass runs: a quiet pass's promise
        (:meth:`Policy.quiet_until`, e.g. SRTF's, read from the lines) no longer holds."""
        record.report_progress(now, iterations, iteration_s)
        self._quiet = None

    def requeue(self, job_id: str, now: float, reason: str) -> None:
        """Put a running job back in the queue from its last checkpoint (e.g. its node was lost)."""
        record = self._record(job_id)
        check_transition(job_id, record.state, JobState.PREEMPTED)
        self._stop(record, now, reason)

    # --- persistence ---------------------------------------------------------

    def take_changes(self) -> tuple[list[JobRecord], list[JobEvent]]:
        """The records changed (in arrival order) and the events appended since the last call.

        A record counts as changed when the core changed it, or when it runs and
        its epoch moved (a driver set its rate). Whatever is returned is not
        returned again: a caller whose save fails has lost the changes and must
        not go on (restart from the store instead).
        """
        changed = self._changed
        for job_id, record in self.running.items():
            if self._taken_epochs.get(job_id) != record.epoch:
                changed.add(job_id)
        self._taken_epochs = {job_id: record.epoch for job_id, record in self.running.items()}
        self._changed = set()
        records = sorted((self.records[job_id] for job_id in changed), key=lambda r: r.arrival_seq)
        events = self.log.since(self._taken_events)
        self._taken_events = len(self.log)
        return records, events

    def restore(self, state: StoredState) -> None:
        """Rebuild jobs, queue, running set, ledger and event log of a fresh core from ``state``.

        Checks first, changing nothing on error: arrival numbers run 0, 1, 2...;
        a RUNNING job holds an allocation within the cluster, no GPU is held by
        two running jobs, a PENDING job holds none (a finished one keeps the
        allocation it ended with, which holds nothing in the ledger); the event log is gap-free, names only stored
        jobs and leaves each job in its stored state. Raises
        :class:`InconsistentState` naming the job otherwise. Afterwards
        :meth:`take_changes` reports nothing until the core changes again.
        """
        if self.records or len(self.log):
            raise HalyardError("restore needs a fresh core (this one already has jobs)")
        records: dict[str, JobRecord] = {}
        for i, record in enumerate(state.records):
            if record.job_id in records:
                raise InconsistentState(f"job {record.job_id!r} is stored twice")
            if record.arrival_seq != i:
                raise InconsistentState(f"job {record.job_id!r} has arrival number {record.arrival_seq}, "
                                        f"expected {i} (arrival numbers must run 0, 1, 2...)")
            records[record.job_id] = record
        last_state: dict[str, JobState] = {}
        last_start: dict[str, int] = {}
        for i, event in enumerate(state.events, start=1):
            if event.seq != i:
                raise InconsistentState(f"event log has a gap: event #{event.seq} (job {event.job_id!r}) "
                                        f"where #{i} belongs")
            if event.job_id not in records:
                raise InconsistentState(f"event #{event.seq} names job {event.job_id!r}, which is not stored")
            last_state[event.job_id] = event.state
            if event.kind is EventKind.STARTED:
                last_start[event.job_id] = event.seq
            elif event.kind in BY_KIND:  # a count that is not a stored column is recounted from the log
                recount(records[event.job_id], event.kind)
            elif event.state.terminal:  # nor is why it ended: its terminal event says
                records[event.job_id].end_reason = event.detail
        free = self.free.copy()
        holders: dict[tuple[str, int], str] = {}
        for record in records.values():
            job = f"job {record.job_id!r}"
            if record.job_id not in last_state:
                raise InconsistentState(f"{job} has no events")
            if last_state[record.job_id] is not record.state:
                raise InconsistentState(f"{job} is stored {record.state.value} but its last event leaves it "
                                        f"{last_state[record.job_id].value}")
            running = record.state is JobState.RUNNING
            if record.state is JobState.PREEMPTED:
                raise InconsistentState(f"{job} is stored PREEMPTED, a state the core never leaves a job in")
            if running and record.allocation is None:
                raise InconsistentState(f"{job} is RUNNING but holds no allocation")
            if record.state is JobState.PENDING and record.allocation is not None:
                raise InconsistentState(f"{job} is PENDING but holds an allocation")
            if running != (record._run_start is not None):
                raise InconsistentState(f"{job} is {record.state.value} but its run start time is "
                                        f"{'missing' if running else 'set'}")
            if not running:
                continue
            allocation = allocation_of(record)
            if record.num_gpus != allocation.num_gpus:
                raise InconsistentState(f"{job} counts {record.num_gpus} GPUs but holds "
                                        f"{allocation.num_gpus}")
            for part in allocation.nodes:
                for gpu in part.gpus:
                    other = holders.setdefault((part.node, gpu), record.job_id)
                    if other != record.job_id:
                        raise InconsistentState(f"{job} holds GPU {gpu} on node {part.node}, "
                                                f"which job {other!r} holds too")
            try:
                free.take(allocation)
            except OverAllocation as exc:
                raise InconsistentState(f"{job}: its allocation does not fit cluster "
                                        f"{self.cluster.name!r}: {exc}") from None
        self.log.extend(state.events)
        for record in records.values():
            record.journal = self.epochs
        self.records.update(records)
        started = [r for r in records.values() if r.state is JobState.RUNNING]
        # The running map keeps start order (policies see it in that order).
        started.sort(key=lambda r: (last_start.get(r.job_id, 0), r.arrival_seq))
        for record in started:
            self.free.take(allocation_of(record))
            self.running[record.job_id] = record
        for record in records.values():
            if record.state is JobState.PENDING:
                self._enqueue(record)
            if not record.state.terminal:
                self._live[job_kind(record.spec)] += 1
        self._changed = set()
        self._taken_epochs = {job_id: record.epoch for job_id, record in self.running.items()}
        self._taken_events = len(self.log)

    # --- internals ---------------------------------------------------------

    def _record(self, job_id: str) -> JobRecord:
        try:
            return self.records[job_id]
        except KeyError:
            raise ValidationError(f"unknown job {job_id!r}", field="job_id") from None

    def _finish(self, job_id: str, now: float, state: JobState, kind: EventKind, detail: str = "") -> None:
        record = self._record(job_id)
        check_transition(job_id, record.state, state)
        if record.state is JobState.RUNNING:
            self.free.give(allocation_of(record))
            del self.running[job_id]
        elif record.state is JobState.PENDING:
            self._dequeue(record)
        self._live[job_kind(record.spec)] -= 1
        record.finish(now, state)
        record.end_reason = detail
        self._changed.add(job_id)
        self.log.append(now, job_id, kind, state, detail)

    def _enqueue(self, record: JobRecord) -> None:
        self.pending.add(record)
        self._moved.append(record.job_id)
        self._demand[record.spec.num_gpus] += 1

    def _dequeue(self, record: JobRecord) -> None:
        self.pending.remove(record)
        self._moved.append(record.job_id)
        gpus = record.spec.num_gpus
        self._demand[gpus] -= 1
        if not self._demand[gpus]:
            del self._demand[gpus]

    def _stop(self, record: JobRecord, now: float, reason: str, *, suspend: bool = False) -> None:
        """RUNNING -> PREEMPTED -> PENDING, keeping the last checkpointed iteration; logged and
        counted as a suspension instead of a preemption with ``suspend`` (Crius §6.1)."""
        record.end_run(now, checkpoint=True)
        self.free.give(record.release())
        del self.running[record.job_id]
        kind = EventKind.SUSPENDED if suspend else EventKind.PREEMPTED
        count(record, kind)
        self._changed.add(record.job_id)
        record.state = JobState.PREEMPTED
        self.log.append(now, record.job_id, kind, JobState.PREEMPTED, reason)
        record.state = JobState.PENDING
        record.pending_since = now
        self._enqueue(record)
        self.log.append(now, record.job_id, EventKind.REQUEUED, JobState.PENDING)

    def _validate(self, plan: Plan, ledger: FreeResources | None = None) -> FreeResources:
        """Dry-run the plan on copies of the ledger (``ledger``, default the core's) and of the job states;
        the ledger as the plan leaves it."""
        free = (self.free if ledger is None else ledger).copy()
        held: dict[str, Allocation | None] = {}

        def holding(job_id: str) -> Allocation | None:
            if job_id in held:
                return held[job_id]
            record = self.records.get(job_id)
            if record is None:
                raise ValueError("unknown job")
            if record.state.terminal:
                raise ValueError(f"job is {record.state.value}")
            return record.allocation

        for i, action in enumerate(plan.actions):
            try:
                current = holding(action.job_id)
                spec = self.records[action.job_id].spec
                if isinstance(action, Start):
                    if current is not None:
                        raise ValueError("job is already running (a job holds at most one allocation)")
                    self._check_size(spec, action.allocation)
                    self._check_backend(spec, action.allocation)
                    free.take(action.allocation)
                    held[action.job_id] = action.allocation
                elif isinstance(action, Drop):
                    if current is not None or self.records[action.job_id].state is not JobState.PENDING:
                        raise ValueError("only a pending job can be dropped")
                elif current is None:
                    raise ValueError("job is not running")
                elif isinstance(action, Preempt):
                    free.give(current)
                    held[action.job_id] = None
                elif isinstance(action, Migrate | Resize):
                    if isinstance(action, Migrate) and action.allocation.num_gpus != current.num_gpus:
                        raise ValueError("migrate keeps the GPU count; use resize to change it")
                    self._check_size(spec, action.allocation)
                    self._check_backend(spec, action.allocation)
                    free.give(current)
                    free.take(action.allocation)
                    held[action.job_id] = action.allocation
                elif isinstance(action, SetTimeShift):
                    if not (action.seconds >= 0.0 and action.seconds < float("inf")):
                        raise ValueError(f"time shift must be a finite number >= 0, got {action.seconds!r}")
                    if not (action.period_s >= 0.0 and action.period_s < float("inf")):
                        raise ValueError(f"time-shift period must be a finite number >= 0, got {action.period_s!r}")
                    held[action.job_id] = current.with_time_shift(action.seconds, action.period_s)
                elif isinstance(action, SetResources):
                    part = current.on(action.node)
                    if part is None:
                        raise ValueError(f"job holds nothing on node {action.node}")
                    if action.cpus < 0 or action.memory_mb < 0:
                        raise ValueError("cpus and memory_mb must be >= 0")
                    index = self.cluster.node(action.node).index
                    free.adjust(index, action.cpus - part.cpus, action.memory_mb - part.memory_mb)
                    held[action.job_id] = _with_resources(current, action)
                else:
                    raise ValueError(f"unknown action type {type(action).__name__}")
            except (ValueError, OverAllocation) as exc:
                raise PlanError(i, action, str(exc)) from None
        return free

    def _check_backend(self, spec: JobSpec, allocation: Allocation) -> None:
        """A job with a command only on nodes whose agent runs commands, one without only on emulated
        ones (scheduling/backends.py; nodes of no known backend take either)."""
        if not self.backends.known:
            return
        kind = job_kind(spec)
        for part in allocation.nodes:
            node_kind = self.backends.kind_of(self.cluster.node(part.node).index)
            if node_kind and node_kind != kind:
                raise ValueError(f"node {part.node}'s agent is {describe_kind(node_kind)}; job {spec.job_id} "
                                 f"{'has a command' if spec.command else 'has no command'} and runs only on "
                                 f"{describe_kind(kind)} agents")

    def _check_size(self, spec: JobSpec, allocation: Allocation) -> None:
        """A Start, Migrate or Resize allocation fits the job: a GPU count in its range
        (exactly ``num_gpus`` unless it is elastic), pipeline stages that hold all its
        GPUs, per-GPU logical-worker counts that add up to its ``logical_workers`` (or
        none: :func:`_placed` spreads them), GPUs of its type on which it fits in memory."""
        gpus = allocation.num_gpus
        low, high = spec.gpu_range
        if not low <= gpus <= high:
            allowed = (f"exactly {plural(low, 'GPU')} (num_gpus)" if low == high
                       else f"{low}..{high} GPUs (min_gpus..max_gpus)")
            raise ValueError(f"allocation has {plural(gpus, 'GPU')}; job {spec.job_id} allows {allowed}")
        staged = sum(st.gpus for st in allocation.stages)
        if allocation.stages and staged != gpus:
            raise ValueError(f"allocation's pipeline stages hold {plural(staged, 'GPU')}; it has {gpus}")
        if spec.logical_workers and (len(allocation.stages) > 1 or any(st.tensor > 1 for st in allocation.stages)):
            raise ValueError(f"job {spec.job_id} runs logical workers, which are data-parallel replicas "
                             f"(EasyScale §3.2); the allocation plans {len(allocation.stages)} pipeline stages "
                             "or tensor parallelism")
        workers = allocation.logical_workers
        if workers and workers != spec.logical_workers:
            raise ValueError(f"allocation's per-GPU logical workers add up to {workers}; job {spec.job_id} has "
                             f"{spec.logical_workers} (logical_workers)")
        if allocation.stages and not self.perf.fits_plan(spec, allocation, self.cluster):
            # A Cell's plan (Crius §5.1: a plan whose stage exceeds a GPU's memory is dropped).
            worst = max(self.perf.plan_memory(spec, allocation, self.cluster), key=lambda f: f.total_bytes)
            raise ValueError(f"allocation's pipeline plan needs {worst.total_bytes / 1e9:.1f} GB on a GPU of "
                             f"{worst.capacity_bytes / 1e9:.1f} GB (model {spec.model!r})")
        for part in allocation.nodes:
            node = self.cluster.node(part.node)
            if spec.gpu_type is not None and node.gpu_type != spec.gpu_type:
                raise ValueError(f"node {node.name} has {node.gpu_type} GPUs, job needs {spec.gpu_type}")
            if part.gpus and not allocation.stages and not self.perf.fits_memory(spec, node.gpu_type,
                                                                                 allocation.num_gpus):
                f = self.perf.memory_footprint(spec, node.gpu_type, allocation.num_gpus)
                raise ValueError(f"node {node.name} has {node.gpu_type} GPUs of {f.capacity_bytes / 1e9:.1f} GB; "
                                 f"model {spec.model!r} at batch {f.batch} needs {f.total_bytes / 1e9:.1f} GB per GPU")

    def _apply(self, action: Action, now: float) -> None:
        record = self.records[action.job_id]
        self._changed.add(record.job_id)
        if isinstance(action, Drop):
            self._finish(record.job_id, now, JobState.CANCELLED, EventKind.CANCELLED, f"dropped: {action.reason}")
        elif isinstance(action, Start):
            check_transition(record.job_id, record.state, JobState.RUNNING)
            self.free.take(action.allocation)
            self._dequeue(record)
            self.running[record.job_id] = record
            if record.has_checkpoint:
                record.restarts += 1
            record.begin_run(_placed(record.spec, action.allocation), now)
            record.wait = None
            self.log.append(now, record.job_id, EventKind.STARTED, JobState.RUNNING, describe(action.allocation))
        elif isinstance(action, Preempt):
            check_transition(record.job_id, record.state, JobState.PREEMPTED)
            if action.suspend:
                self._stop(record, now, "suspended by policy", suspend=True)
            else:
                self._stop(record, now, "preempted by policy")
        elif isinstance(action, Migrate | Resize):
            self.free.give(allocation_of(record))
            self.free.take(action.allocation)
            record.rearm(now, _placed(record.spec, action.allocation), checkpoint=True)
            record.restarts += 1
            kind = EventKind.MIGRATED if isinstance(action, Migrate) else EventKind.RESIZED
            self.log.append(now, record.job_id, kind, JobState.RUNNING, describe(action.allocation))
        elif isinstance(action, SetTimeShift):
            # The grid counts from this pass: iterations start at now + seconds + k x period.
            record.rearm(now, allocation_of(record).with_time_shift(action.seconds, action.period_s, now),
                         checkpoint=False)
            self.log.append(now, record.job_id, EventKind.TIME_SHIFT, JobState.RUNNING, f"{action.seconds:g}s")
        elif isinstance(action, SetResources):
            held = allocation_of(record)
            part = held.on(action.node)
            assert part is not None, "validated: the job holds a part on the node"
            index = self.cluster.node(action.node).index
            self.free.adjust(index, action.cpus - part.cpus, action.memory_mb - part.memory_mb)
            record.rearm(now, _with_resources(held, action), checkpoint=False)
            self.log.append(now, record.job_id, EventKind.RESOURCES, JobState.RUNNING,
                            f"{action.node}: {action.cpus} CPUs, {action.memory_mb} MB")


def _fresh_copy(policy: Policy) -> Policy | None:
    """A copy of a policy that has not run yet, for the jobs with a command; None (both kinds then share
    the one instance) for a policy that cannot be copied. Every preset can (tests/test_mixed_backends.py)."""
    try:
        return copy.deepcopy(policy)
    except Exception:  # a hand-made policy holding something uncopyable: shared, as before this split
        return None


def _placed(spec: JobSpec, allocation: Allocation) -> Allocation:
    """The allocation a job runs on: a job with logical workers whose allocation gives no
    per-GPU counts gets them spread evenly (:meth:`Allocation.with_workers`), so agents
    and the store always see the EST-to-GPU mapping."""
    if spec.logical_workers and not allocation.logical_workers:
        return allocation.with_workers(spec.logical_workers)
    return allocation


def _with_resources(allocation: Allocation, action: SetResources) -> Allocation:
    parts = tuple(
        dataclasses.replace(p, cpus=action.cpus, memory_mb=action.memory_mb) if p.node == action.node else p
        for p in allocation.nodes
    )
    return dataclasses.replace(allocation, nodes=parts)
