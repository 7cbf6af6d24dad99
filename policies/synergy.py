"""Synergy: resource-sensitive packing of fungible CPU cores and memory (OSDI'22).

Paper: papers/synergy-multi-resource-scheduling.txt. The parts, one module each:

* **Optimistic profiling** (§3.1-3.2): :mod:`halyard.policies.synergy_profile`.
* **Mechanisms** (this module), batch placement stages
  (:class:`~halyard.policies.stages.BatchPlacement`): GPU-proportional;
  Synergy-GREEDY (§3.3: first fit at the demand vector, skip a job that does not
  fit); Synergy-TUNE (§4.2); Synergy-OPT (§4.1: the ILP over the runnable set,
  :mod:`halyard.policies.synergy_opt`). Their machinery is
  :mod:`halyard.policies.synergy_packing`.
* **Policies**: FIFO, SRTF, LAS and FTF (Themis finish-time fairness,
  :class:`~halyard.policies.ordering.FinishTimeFairness`) pick the runnable set:
  the top jobs in priority order whose GPU demands fit the schedulable GPUs
  (§4.2); running jobs outside it are preempted (lease not renewed). That is the
  staged pass with a batch placement (:class:`~halyard.policies.staged.StagedPolicy`),
  so ``MECHANISM:ORDERING`` is a preset and any ordering composes with any mechanism.
  A runnable job that already runs keeps its GPUs (§4.3: leases are renewed on the
  same server); only its CPU and memory are re-tuned.

The mechanisms are ``resource_sensitive``: drivers run them on the performance
model with data stalls on (``controlplane.timing.performance_model_for``), so the
CPU cores and memory of each allocation set the job's iteration time. The
GPU-proportional mechanism runs on the same model, so the A/B comparisons of the
paper compare like with like.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from halyard.datamodel import Allocation, ValidationError
from halyard.policies.ordering import ORDERINGS, Srtf
from halyard.policies.passstate import PassState
from halyard.policies.placement import no_fit
from halyard.policies.plan import Plan
from halyard.policies.reasons import Unplaced, cannot_fit
from halyard.policies.resources import FreeResources, gpu_bits
from halyard.policies.staged import StagedPolicy
from halyard.policies.stages import BatchPlacement
from halyard.policies.synergy_lean import LeanPack
from halyard.policies.synergy_lean import repack as lean_repack
from halyard.policies.synergy_packing import CapAt, KeptShapes, Packer, capacities, node_index
from halyard.policies.synergy_profile import job_profile
from halyard.policies.view import ClusterView, JobInfo, allocation_of

OPT_BOUND_KEY = "synergy/opt-bound"
# How many jobs' demand vectors a mechanism keeps by job id before it starts that memo afresh (our choice:
# a few times a loaded runnable set; the memo by model and batch behind it stays).
BY_JOB_BOUND = 4096
SPREAD_KEY = "synergy/opt-spread"  # (second LP status, jobs it split) of the pass


class SynergyMechanism(BatchPlacement):
    """What every mechanism shares: the runnable set's bookkeeping, the demand vectors, the plan."""

    name = "synergy"
    resource_sensitive = True  # run on the performance model with data stalls on
    # §3: "Synergy performs round-based scheduling": the runnable set is chosen and placed at round
    # (lease) boundaries only; passes between rounds change nothing (BatchPlacement.acts_now).
    rounds = True
    # The mechanisms decide from the runnable set (ids, allocations), the free resources and the profiled
    # demand vectors (memoised per model, batch and GPU type): never the clock or progress. The round gate
    # reads the clock, which StagedPolicy.round_gated tells the core. OPT says otherwise (its counters).
    time_invariant = True

    def __init__(self) -> None:
        self._kept = KeptShapes()  # the allocations the packer built, kept from pass to pass
        # demand()'s answers for the facts (cluster and model) they were memoised in: a re-pack asks for
        # every runnable job's, and the facts' memo builds a key and a closure per call.
        # And per job id (with the GPUs it was asked for), so a re-pack's ~65 jobs need no key each.
        self._demands: tuple[object, dict[tuple[object, ...], tuple[int, int]],
                             dict[str, tuple[int, tuple[int, int]]]] = (None, {}, {})

    @staticmethod
    def _cap(view: ClusterView, job: JobInfo) -> tuple[int, int]:
        nodes = view.cluster.nodes
        per_node = -(-job.num_gpus // max(1, len(nodes)))
        return nodes[0].cpus // per_node, nodes[0].memory_mb // per_node

    def demand(self, view: ClusterView, job: JobInfo) -> tuple[int, int]:
        """The job's demand vector per GPU, capped so that it fits the empty cluster with its GPUs
        spread over as many servers as possible (else GREEDY would skip it forever)."""
        facts, known, by_job = self._demands
        if facts is not view.facts:
            known, by_job = {}, {}
            self._demands = (view.facts, known, by_job)
        gpus = job.num_gpus
        kept = by_job.get(job.job_id)
        if kept is not None and kept[0] == gpus:  # a job's spec never changes: only its GPUs may
            return kept[1]
        spec = job.spec
        key = (spec.model, spec.batch_size, spec.gpu_type, gpus)
        found = known.get(key)
        if found is None:
            def compute() -> tuple[int, int]:
                p = job_profile(view, job)
                cap_c, cap_m = self._cap(view, job)
                return min(p.demand_cpus, cap_c), min(p.demand_memory_mb, cap_m)

            found = known[key] = view.facts.memo("synergy/demand", key, compute)
        if len(by_job) > BY_JOB_BOUND:  # a long run: forget the jobs of the past (re-read from ``known``)
            by_job.clear()
        by_job[job.job_id] = (gpus, found)
        return found

    # Whether the mechanism re-packs the running jobs (so the packer holds them first); False for one that only
    # places the new jobs on what the running ones leave free (GPU-proportional, GREEDY): a running job the
    # packer does not hold is one it leaves as it is, which _emit reads as it reads one held unchanged.
    repacks_running = True

    def place_all(self, view: ClusterView, runnable: Sequence[JobInfo], new: Sequence[JobInfo],
                  plan: Plan, free: FreeResources, state: PassState) -> None:
        self._kept.keep(view.running)
        packer = Packer(view, free, self._kept)
        if self.repacks_running:
            for job in runnable:
                if job.allocation is not None:
                    packer.hold(job.job_id, job.allocation)
        self.pack(view, packer, runnable, new, plan, state)
        if self.repacks_running:
            _emit(view, plan, packer, new)
            return
        for job in new:  # (only new jobs placed, on resources no other job holds: each start fits, in any order)
            allocation = packer.alloc.get(job.job_id)
            if allocation is not None:
                plan.start(job.job_id, allocation)

    def pack(self, view: ClusterView, packer: Packer, runnable: Sequence[JobInfo], new: Sequence[JobInfo],
             plan: Plan, state: PassState) -> None:
        raise NotImplementedError


class Proportional(SynergyMechanism):
    """GPU-proportional CPU and memory, first fit: the baseline Synergy is measured against.

    Round-based like every mechanism (§3); a running job renews its lease where it is (§4.3): at the
    proportional share a move would not change its speed. ``rounds=False`` (``proportional-every-pass``,
    Halyard's earlier behaviour) places new jobs on every pass instead."""

    name = "proportional"
    repacks_running = False  # (pack places the new jobs only)

    def __init__(self, *, rounds: bool = True) -> None:
        super().__init__()
        self.rounds = rounds
        if not rounds:
            self.name = "proportional-every-pass"

    def pack(self, view: ClusterView, packer: Packer, runnable: Sequence[JobInfo], new: Sequence[JobInfo],
             plan: Plan, state: PassState) -> None:
        need = packer.proportional()
        for job in new:
            types = view.gpu_types_for(job.spec)
            picked = packer.select(need, job.num_gpus, types, best_fit=False)
            if picked is None:
                plan.wait(job.job_id, no_fit(self.name, view, job, job.num_gpus, packer.usable(need, types)))
            else:
                packer.place(job.job_id, picked, need)


class Greedy(SynergyMechanism):
    """§3.3: in priority order, first fit at the demand vector; skip a job that does not fit ("for this
    round": round-based, §3; running jobs renew their leases where they are). ``rounds=False``
    (``synergy-greedy-every-pass``) places new jobs on every pass instead."""

    name = "synergy-greedy"
    repacks_running = False  # (pack places the new jobs only)

    def __init__(self, *, rounds: bool = True) -> None:
        super().__init__()
        self.rounds = rounds
        if not rounds:
            self.name = "synergy-greedy-every-pass"

    def pack(self, view: ClusterView, packer: Packer, runnable: Sequence[JobInfo], new: Sequence[JobInfo],
             plan: Plan, state: PassState) -> None:
        for job in new:
            c, m = self.demand(view, job)
            need = packer.demand(c, m)
            picked = packer.select(need, job.num_gpus, view.gpu_types_for(job.spec), best_fit=False)
            if picked is None:
                plan.wait(job.job_id, _short(self.name, job, c, m))
            else:
                packer.place(job.job_id, picked, need)


class Tune(SynergyMechanism):
    """§4.2 over the whole runnable set, re-placed at every round boundary (§3: "At the end of a round,
    the set of runnable jobs are updated using the scheduling policy, and their placement decisions are
    recomputed"; passes between rounds change nothing).

    Every runnable running job's CPU and memory are released (its GPUs stay reserved until its turn),
    then the runnable jobs, sorted by GPU, then CPU, then memory demand (largest first), are packed in
    turn: at the demand vector on the server with the least free resources that fits it (multi-GPU: the
    fewest servers, CPU and memory proportional to GPUs per server); else (1) if the demand exceeds the
    proportional share, at the share (capped per dimension: never more than the demand); else (2a) on
    servers that have the GPUs, switching jobs there holding more than their share back to it until the
    job fits at its share -- by construction it then fits (every job packed so far holds at most its
    share there, the jobs not yet packed hold nothing).

    A running job renews its lease on its own GPUs when it gets its demand vector there (§4.3: "every
    job requests for a lease update to continue running on the same server"); if not, and another
    server gives it its demand, it moves there (a ``Migrate``, charged the performance model's
    checkpoint-and-restart cost; Synergy's simulator re-places every job every round and charges
    nothing, docs/synergy.md); else it stays at its share (reverting others, (2a)).

    ``rounds=False`` (``synergy-tune-every-pass``, Halyard's earlier reading, not the paper's): every
    pass (arrivals and completions too) re-packs the CPU and memory of the runnable set, and running
    jobs keep their GPUs. ``replace=False`` (``synergy-tune-keep-gpus``, an ablation, not the paper's):
    round-based, but running jobs keep their GPUs (only their CPU and memory are re-packed).
    ``raise_back`` (Halyard's rule, not the paper's; off unless named ``synergy-tune-raise``, every
    pass) instead keeps running jobs' CPU and memory, packs only the new jobs, then raises every
    runnable job below its demand back to it in priority order where its servers have room."""

    name = "synergy-tune"

    def __init__(self, *, raise_back: bool = False, rounds: bool = True, replace: bool = True,
                 lean: bool = True) -> None:
        super().__init__()
        # True: the round re-pack runs on lists (synergy_lean.py; issue 38: ~3x less CPU per re-pack); False:
        # on the Packer, the straightforward path that tests/test_synergy_lean.py holds it to. Same plans.
        self.lean = lean
        self._parsed: dict[int, Any] = {}  # the lean re-pack's running jobs' entries, by allocation id
        self._parsed_facts: object = None  # the facts those entries' demand vectors come from
        # The inputs of the last re-pack that changed nothing, and the reasons it gave (place_all).
        self._unchanged: tuple[_RepackInputs, tuple[tuple[str, Unplaced], ...]] | None = None
        # The inputs the next re-pack would change nothing in (the last re-pack acted and is settled).
        self._settled: _RepackInputs | None = None
        # Run a re-pack certified settled anyway and fail if it changes the plan (tests; costs the skip).
        self.verify_settled = False
        self.raise_back = raise_back
        self.rounds = rounds and not raise_back
        self.replace = replace and self.rounds
        if raise_back:
            self.name = "synergy-tune-raise"
        elif not rounds:
            self.name = "synergy-tune-every-pass"
        elif not replace:
            self.name = "synergy-tune-keep-gpus"

    def vectors(self, view: ClusterView, runnable: Sequence[JobInfo],
                state: PassState) -> dict[str, tuple[int, int]] | None:
        """Per-job (CPUs, memory) per GPU to pack at instead of the profiled demands (OPT's)."""
        return None

    def place_all(self, view: ClusterView, runnable: Sequence[JobInfo], new: Sequence[JobInfo],
                  plan: Plan, free: FreeResources, state: PassState) -> None:
        """The re-pack, or, when it is handed exactly what the last re-pack was and that one changed
        nothing, that re-pack's answer again without running it (skip a pass that cannot
        change the plan; :class:`_RepackInputs` says what "exactly" covers); or, when it is handed what
        the last re-pack left and that one was settled (a re-pack of what it leaves changes nothing,
        :mod:`~halyard.policies.synergy_lean`'s certificate), no change without running it."""
        inputs = _RepackInputs.of(view, runnable, new, plan, free) if type(self).pack is Tune.pack else None
        last = self._unchanged
        if inputs is not None and last is not None and inputs.same(last[0]):
            for job_id, why in last[1]:  # (a change set's plan keeps only the ones that changed)
                plan.wait(job_id, why)
            return
        self._unchanged = None
        settled, self._settled = self._settled, None
        if inputs is not None and settled is not None and inputs.same(settled, equal=True):
            # What the last re-pack left, which a re-pack leaves as it is (synergy_lean: settled): no change,
            # no reason (that re-pack placed every job).
            self._unchanged = (inputs, ())
            if not self.verify_settled:
                return
        actions, otherwise = len(plan.actions), plan.otherwise
        if self.lean and self._mirrored():
            self._settled = self._place_lean(view, runnable, new, plan, free)
            # (the walk before it preempted nothing: the next pass is handed what it leaves, if the walk finds
            # the same runnable jobs, which StagedPolicy vouches for or not)
            plan.settles = self._settled is not None and inputs is not None
        else:
            super().place_all(view, runnable, new, plan, free, state)
        if self._unchanged is not None and (len(plan.actions) != actions or plan.otherwise is not otherwise):
            raise AssertionError(f"{self.name}: a re-pack certified settled changed the plan")
        if inputs is not None and len(plan.actions) == actions and plan.otherwise is otherwise:
            # The reasons the re-pack stood for: in a change set, one it gave unchanged is not in unplaced.
            unplaced, since = plan.unplaced, plan.since or {}
            self._unchanged = (inputs, tuple((j.job_id, said) for j in runnable
                                             if (said := unplaced.get(j.job_id, since.get(j.job_id))) is not None))

    def on_rejected(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        self._unchanged = self._settled = None  # the core refused the pass: answer nothing from it

    # The methods whose steps synergy_lean.py mirrors: a subclass that overrides one runs the Packer path.
    _MIRRORED = ("pack", "vectors", "repack", "_renewing", "_replace_running", "_pack_new", "_pack_running",
                 "_release", "_lease_not_renewed")

    def _mirrored(self) -> bool:
        """Whether :mod:`~halyard.policies.synergy_lean` does what this instance's re-pack does: plain TUNE
        at round boundaries (moves allowed, the profiled demand vectors), no method of it overridden."""
        cls = type(self)
        return (self.replace and not self.raise_back
                and all(getattr(cls, name) is getattr(Tune, name) for name in self._MIRRORED))

    def _place_lean(self, view: ClusterView, runnable: Sequence[JobInfo], new: Sequence[JobInfo], plan: Plan,
                    free: FreeResources) -> _RepackInputs | None:
        """:meth:`SynergyMechanism.place_all` with :meth:`repack` on lists (:mod:`~halyard.policies.synergy_lean`).
        Returns the inputs the next re-pack is handed if the core applies this plan and nothing else changes,
        when the re-pack changed something and is settled (a re-pack of what it leaves changes nothing);
        else None."""
        self._kept.keep(view.running)
        lean = LeanPack(view, free, node_index(view))
        self.repack_lean(view, lean, runnable, plan)
        placed = lean.finish(self._kept)
        _emit(view, plan, _Placed(placed), new)
        if not placed or not lean.settled:
            return None
        return _RepackInputs(tuple([j.job_id for j in runnable]),
                             [placed.get(j.job_id, j.allocation) for j in runnable], (), len(runnable),
                             (*free.availability_key(), tuple(free.gpu_mask)))

    def repack_lean(self, view: ClusterView, lean: LeanPack, runnable: Sequence[JobInfo], plan: Plan) -> None:
        """:meth:`repack` on lists (a method of its own, so that a benchmark can count it as it counts ``repack``).
        The running jobs' entries (synergy_lean._held) are kept to the next pass (those still held only)."""
        parsed, self._parsed = self._parsed, {}
        if self._parsed_facts is not view.facts:  # (entries hold demand vectors, memoised per facts)
            parsed, self._parsed_facts = {}, view.facts
        lean_repack(self, view, lean, runnable, plan, parsed, self._parsed)

    def pack(self, view: ClusterView, packer: Packer, runnable: Sequence[JobInfo], new: Sequence[JobInfo],
             plan: Plan, state: PassState) -> None:
        self.repack(view, packer, runnable, new, plan, self.vectors(view, runnable, state))

    def repack(self, view: ClusterView, packer: Packer, runnable: Sequence[JobInfo], new: Sequence[JobInfo],
               plan: Plan, vectors: dict[str, tuple[int, int]] | None) -> None:
        """§4.2 at ``vectors`` (per-job CPUs and memory per GPU; the profiled demand where absent)."""
        known: dict[str, tuple[int, int]] = dict(vectors) if vectors is not None else {}

        def vector(job: JobInfo) -> tuple[int, int]:
            found = known.get(job.job_id)
            if found is None:
                found = known[job.job_id] = self.demand(view, job)
            return found

        def size(j: JobInfo) -> tuple[int, int, int, int]:
            c, m = vector(j)
            return (-j.num_gpus, -c, -m, j.arrival_seq)

        if self.raise_back:
            for job in sorted(new, key=size):
                self._pack_new(view, packer, job, vector(job), vector, plan)
            for job in runnable:  # Halyard's re-tune: raise jobs back to their demand where there is room
                if job.job_id in packer.alloc:
                    c, m = vector(job)
                    packer.reshape(job.job_id, packer.demand(c, m))
            return
        renewing, to_demand = self._renewing(view, packer, runnable, vector)
        packer.strip_all(to_demand)  # renewing away from their demand: set to it where they are
        for job_id in to_demand:
            if not packer.reshape(job_id, packer.demand(*known[job_id])):
                raise AssertionError(f"synergy-tune: renewing job {job_id!r} does not fit its demand in place")
        # §3: this round's placement is recomputed; CPU and memory released before the re-pack
        packer.strip_all([job.job_id for job in runnable if job.allocation is not None and job.job_id not in renewing])
        for job in sorted((j for j in runnable if j.job_id not in renewing), key=size):
            if job.allocation is None:
                self._pack_new(view, packer, job, vector(job), vector, plan)
            elif self.replace:
                self._replace_running(view, packer, job, vector(job), vector, plan)
            else:
                self._pack_running(view, packer, job, vector(job), vector, plan)

    @staticmethod
    def _renewing(view: ClusterView, packer: Packer, runnable: Sequence[JobInfo],
                  vector: Callable[[JobInfo], tuple[int, int]]) -> tuple[set[str], list[str]]:
        """The running jobs whose turn in the re-pack is known before it runs: each renews its lease on its
        own GPUs at its demand vector (§4.3), whatever order the jobs are packed in; and those of them
        not at their demand now (they are set to it).

        Exact, not a heuristic: call a server *closed* when the demand vectors of the runnable jobs on it
        fit the CPU and memory those jobs leave when released, and it has no free GPU (or no job will be
        placed at all: none is new and none can fail to renew). Nothing in the re-pack but these jobs'
        own reshapes touches a closed server: new and moving jobs are placed only where GPUs are free,
        and the §4.2 (2a) revert runs only on servers a job is placed on or on the servers of a running
        job that does not renew. So each job wholly on closed servers (a job that spans an open one
        opens all of its servers) gets its demand in place, as the sequential re-pack would give it. At
        a loaded round most running jobs are such: re-packing only the others is the issue-19 speed-up
        (same plans: tests/test_synergy_renewal.py, benchmarks/pin_schedules.py)."""
        free, index = packer.free, packer.index
        cap_c, cap_m, free_gpus = free.cpus.tolist(), free.memory_mb.tolist(), free.gpus.tolist()
        dem_c, dem_m = [0] * len(cap_c), [0] * len(cap_m)
        held = []
        for job in runnable:
            if job.allocation is None:
                continue
            allocation = packer.alloc[job.job_id]  # as the pass holds it (OPT may have stripped it already)
            c, m = vector(job)
            idxs = []
            at_demand = True
            for p in allocation.nodes:
                idx, k = index[p.node], len(p.gpus)
                cap_c[idx] += p.cpus
                cap_m[idx] += p.memory_mb
                dem_c[idx] += c * k
                dem_m[idx] += m * k
                at_demand = at_demand and p.cpus == c * k and p.memory_mb == m * k
                idxs.append(idx)
            held.append((job.job_id, idxs, at_demand))
        opened = {i for i in range(len(cap_c)) if dem_c[i] > cap_c[i] or dem_m[i] > cap_m[i]}
        if opened or len(held) < len(runnable):  # a job may be placed where GPUs are free
            opened.update(i for i, g in enumerate(free_gpus) if g > 0)
        spanning = [set(idxs) for _, idxs, _ in held if len(idxs) > 1]
        grew = True
        while grew:  # a job that spans an open server opens the others it spans
            grew = False
            for span in spanning:
                if not span <= opened and not span.isdisjoint(opened):
                    opened |= span
                    grew = True
        renewing = {job_id for job_id, idxs, _ in held if opened.isdisjoint(idxs)}
        return renewing, [job_id for job_id, _, at_demand in held if job_id in renewing and not at_demand]

    def _replace_running(self, view: ClusterView, packer: Packer, job: JobInfo, cm: tuple[int, int],
                         vector: Callable[[JobInfo], tuple[int, int]], plan: Plan) -> None:
        """§3/§4.3 for a running job at a round boundary: renew where it is at its demand, else move to
        servers that give it its demand, else §4.2's share on its own GPUs (reverting others there)."""
        c, m = cm
        need = packer.demand(c, m)
        if packer.reshape(job.job_id, need):
            return
        home = packer.release(job.job_id)  # GPUs only at this point
        picked = packer.select(need, job.num_gpus, view.gpu_types_for(job.spec), best_fit=True)
        if picked is not None and packer.place(job.job_id, picked, need) is not None:
            return
        if packer.place_on(job.job_id, home, packer.gpus_only()) is None:  # cannot happen: just released
            raise AssertionError(f"synergy-tune: running job {job.job_id!r} cannot take back its own GPUs")
        self._pack_running(view, packer, job, cm, vector, plan)

    def _pack_new(self, view: ClusterView, packer: Packer, job: JobInfo, cm: tuple[int, int],
                  vector: Callable[[JobInfo], tuple[int, int]], plan: Plan) -> None:
        """§4.2 for a job that does not run yet: demand, else (1) the share, else (2a) revert and the share."""
        c, m = cm
        gpus, gtype = job.num_gpus, view.gpu_types_for(job.spec)
        need = packer.demand(c, m)
        picked = packer.select(need, gpus, gtype, best_fit=True)
        if picked is not None and packer.place(job.job_id, picked, need):
            return
        capped = packer.capped(c, m)
        picked = packer.select(capped, gpus, gtype, best_fit=True)
        if picked is not None and packer.place(job.job_id, picked, capped):
            return
        gpus_only = packer.gpus_only()
        picked = packer.select(gpus_only, gpus, gtype, best_fit=True)
        if picked is None:  # the GPUs are not there (a GPU type constraint): the job waits
            plan.wait(job.job_id, no_fit(self.name, view, job, gpus, packer.usable(gpus_only, gtype)))
            return
        for idx, k in picked:
            self._release(view, packer, idx, capped(idx, k), vector)
        if packer.place(job.job_id, picked, capped) is None:
            plan.wait(job.job_id, cannot_fit(
                self.name, "needs {:#GPU} at its proportional CPU and memory; reverting co-located jobs to "
                "their proportional share did not free enough", gpus))

    def _pack_running(self, view: ClusterView, packer: Packer, job: JobInfo, cm: tuple[int, int],
                      vector: Callable[[JobInfo], tuple[int, int]], plan: Plan) -> None:
        """§4.2 for a running job on its own GPUs: demand, else the share, else revert others to theirs.

        By construction the share then fits (every job packed so far holds at most its share, the
        others nothing). Where it still does not -- CPU or memory of its servers held outside this
        pass's runnable set -- §4.2 (2a) goes on as for any job: "we find a server that can just satisfy
        the job's GPU requirements", so the job is re-placed as a new one would be (a move); if no
        server takes it even then, its lease is not renewed this round (§4.3: the scheduler "terminates
        the lease for the job, adding it back to the job queue"): it is preempted with a reason that
        says so, never left out of the plan and never a failed pass."""
        c, m = cm
        if packer.reshape(job.job_id, packer.demand(c, m)):
            return
        capped = packer.capped(c, m)
        if packer.reshape(job.job_id, capped):
            return
        for part in packer.alloc[job.job_id].nodes:
            idx = view.cluster.node(part.node).index
            self._release(view, packer, idx, capped(idx, len(part.gpus)), vector)
        if packer.reshape(job.job_id, capped):
            return
        packer.release(job.job_id)
        self._pack_new(view, packer, job, cm, vector, plan)
        if job.job_id not in packer.alloc:
            self._lease_not_renewed(plan, job)

    def _lease_not_renewed(self, plan: Plan, job: JobInfo) -> None:
        """§4.3: a running job no server can hold this round goes back to the queue, with a reason."""
        plan.preempt(job.job_id)
        plan.wait(job.job_id, cannot_fit(
            self.name, "its lease is not renewed this round: its {:#GPU} at their proportional CPU and "
            "memory fit neither its own servers nor any other, after reverting co-located jobs to their "
            "share (§4.2 (2a))", job.num_gpus))

    def _release(self, view: ClusterView, packer: Packer, idx: int, wanted: tuple[int, int],
                 vector: Callable[[JobInfo], tuple[int, int]]) -> None:
        """§4.2 (2a): switch jobs on node ``idx`` holding more than their share to it until ``wanted`` fits."""
        free = packer.free
        node = view.cluster.nodes[idx]

        def excess(job_id: str) -> float:
            part = packer.alloc[job_id].on(node.name)
            assert part is not None, "packer.on_node lists the jobs with a part on the node"
            k = len(part.gpus)
            return (max(0, part.cpus - node.proportional_cpus(k)) / max(node.cpus, 1)
                    + max(0, part.memory_mb - node.proportional_memory_mb(k)) / max(node.memory_mb, 1))

        candidates = sorted((j for j in packer.on_node[idx] if excess(j) > 0), key=lambda j: (-excess(j), j))
        for job_id in candidates:
            if free.cpus[idx] >= wanted[0] and free.memory_mb[idx] >= wanted[1]:
                return
            packer.reshape(job_id, CapAt(view.cluster, packer.alloc[job_id]))


class _RepackInputs:
    """Everything :meth:`Tune.repack` reads that can differ between two passes, so that two equal ones
    re-pack alike: the runnable jobs in order (ids, and each one's allocation object: a record keeps its
    allocation object until the core changes it, and allocations are immutable values), the new ones,
    how many jobs run, and the pass's free resources (counts, GPU ids, schedulable nodes). The rest of
    what it reads is fixed for the run or per job: the cluster, the profiled demand vectors (memoised
    per model, batch and GPUs), the GPU types a spec allows. It does not read the clock or progress.
    Only for a pass whose plan has no action yet (no preemption: every running job is runnable), whose
    ``free`` is then the core's ledger as it stands."""

    __slots__ = ("allocations", "free", "ids", "new", "running")

    def __init__(self, ids: tuple[str, ...], allocations: list[object], new: tuple[str, ...], running: int,
                 free: tuple[object, ...]) -> None:
        self.ids, self.allocations, self.new, self.running, self.free = ids, allocations, new, running, free

    @classmethod
    def of(cls, view: ClusterView, runnable: Sequence[JobInfo], new: Sequence[JobInfo], plan: Plan,
           free: FreeResources) -> _RepackInputs | None:
        if plan.actions:
            return None
        return cls(tuple([j.job_id for j in runnable]), [j.allocation for j in runnable],
                   tuple([j.job_id for j in new]), len(view.running),
                   (*free.availability_key(), tuple(free.gpu_mask)))

    def same(self, other: _RepackInputs, *, equal: bool = False) -> bool:
        """Whether the two are alike: the very allocation objects, or (``equal``) allocations of equal value
        (the core builds its own on applying a plan's changes)."""
        if not (self.ids == other.ids and self.new == other.new and self.running == other.running
                and self.free == other.free):
            return False
        if equal:  # (a list's == is each pair's identity, else its ==)
            return self.allocations == other.allocations
        return all(map(operator.is_, self.allocations, other.allocations))  # (the ids are equal: as many)


class Opt(Tune):
    """§4.1: the ILP's per-job vectors (§4.1.1, :mod:`halyard.policies.synergy_opt`), spread over
    the servers by the second LP (§4.1.2, :mod:`halyard.policies.synergy_opt_placement`), both solved
    at each round boundary over the runnable set (§3: "At the end of a round, the set of runnable jobs
    are updated using the scheduling policy, and their placement decisions are recomputed"; §4.1.3:
    "Solving two LPs per scheduling round"); passes between rounds change nothing, as for TUNE.

    At a round every runnable job, running ones included, enters the second LP; servers alike in it
    are then permuted so that the most running GPUs stay where they are (§4.3's lease renewal,
    :func:`~halyard.policies.synergy_opt_placement.renew_leases`; no constraint changes). A job the LP puts whole on
    one server goes there at its ILP vector: a running job on its own GPUs if that is its server
    (CPU and memory re-set), else it moves (``Migrate``, the model's restart cost, as TUNE's moves).
    A job the LP splits (fractional GPUs, §4.1.3), or whose whole place is taken by the rounding, is
    placed by TUNE's rule at its ILP vector: a running job renews on its own GPUs, else moves to a
    server that gives it its vector, else takes its share (§4.2); a new job as TUNE's new jobs.
    ``last_bound`` is the ILP's objective of the last applied pass. Nothing is dropped silently: a
    pass whose ILP HiGHS does not solve to optimality packs at the profiled demands (TUNE) and counts
    in ``unsolved``; a pass whose second LP is infeasible or not solved packs the ILP's vectors by
    TUNE's placement and counts in ``spread_failed``; ``split_jobs`` counts the jobs the second LP
    fragmented (the paper's bound: at most 3s per pass).

    ``rounds=False`` (``synergy-opt-every-pass``, Halyard's earlier reading): every pass, running
    jobs keep their GPUs and enter the second LP as fixed (their ILP CPU and memory taken off their
    own servers' capacity); only new jobs are spread. ``fit_running`` (Halyard's rule, not the
    paper's; every pass, ``synergy-opt-fit-running``): running jobs are first re-packed on their own
    servers by TUNE's rule at their ILP vectors, and the second LP spreads the new jobs over what is
    left; if that LP fails too, the new jobs are placed by TUNE's rule."""

    name = "synergy-opt"
    # Each pass's ILP is counted (unsolved, spread_failed, split_jobs in on_applied): a skipped pass would
    # not be, so OPT's passes are never skipped.
    time_invariant = False

    def __init__(self, *, fit_running: bool = False, node_limit: int | None = None, rounds: bool = True) -> None:
        rounds = rounds and not fit_running
        super().__init__(rounds=rounds)
        self.name = "synergy-opt" if rounds else "synergy-opt-every-pass"
        self.fit_running = fit_running
        self.node_limit = node_limit  # None: synergy_opt.ILP_NODE_LIMIT
        if fit_running:
            self.name = "synergy-opt-fit-running"
        self.last_bound: float | None = None
        self.unsolved = 0
        self.spread_failed = 0
        self.split_jobs = 0

    def vectors(self, view: ClusterView, runnable: Sequence[JobInfo],
                state: PassState) -> dict[str, tuple[int, int]] | None:
        from halyard.policies.synergy_opt import ILP_NODE_LIMIT, opt_vectors  # scipy only when OPT runs

        vectors, bound = opt_vectors(view, runnable, [job_profile(view, j) for j in runnable],
                                     [self._cap(view, j) for j in runnable],
                                     node_limit=ILP_NODE_LIMIT if self.node_limit is None else self.node_limit)
        state.put(OPT_BOUND_KEY, bound)
        return vectors

    def pack(self, view: ClusterView, packer: Packer, runnable: Sequence[JobInfo], new: Sequence[JobInfo],
             plan: Plan, state: PassState) -> None:
        vectors = self.vectors(view, runnable, state)
        if vectors is None:  # ILP not solved: TUNE at the profiled demands (counted in on_applied)
            self.repack(view, packer, runnable, new, plan, None)
        elif self.rounds:
            self._pack_round(view, packer, runnable, new, plan, state, vectors)
        else:
            self._pack_every_pass(view, packer, runnable, new, plan, state, vectors)

    def _pack_round(self, view: ClusterView, packer: Packer, runnable: Sequence[JobInfo], new: Sequence[JobInfo],
                    plan: Plan, state: PassState, vectors: dict[str, tuple[int, int]]) -> None:
        """§3/§4.1 at a round boundary: the second LP over the whole runnable set, then the rounding."""
        from halyard.policies.synergy_opt_placement import SpreadJob, renew_leases, spread

        def vector(j: JobInfo) -> tuple[int, int]:
            return vectors.get(j.job_id) or self.demand(view, j)

        def size(j: JobInfo) -> tuple[int, int, int, int]:
            return (-j.num_gpus, -vector(j)[0], -vector(j)[1], j.arrival_seq)

        cluster = view.cluster
        homes = {j.job_id: packer.release(j.job_id) for j in runnable if j.allocation is not None}
        held = np.zeros((len(runnable), len(cluster.nodes)))  # GPUs each job holds per server now
        asked = []
        for r, j in enumerate(runnable):
            allowed = packer.usable(packer.gpus_only(), view.gpu_types_for(j.spec)) > 0
            for part in homes[j.job_id].nodes if j.job_id in homes else ():
                idx = cluster.node(part.node).index
                held[r, idx] = len(part.gpus)
                allowed[idx] = True  # its own server, even drained: it may stay where it runs
            c, m = vector(j)
            asked.append(SpreadJob(j.job_id, j.num_gpus, c * j.num_gpus, m * j.num_gpus, allowed))
        free = packer.free
        answer = spread(asked, free.gpus, free.cpus, free.memory_mb)
        state.put(SPREAD_KEY, (answer.status, len(answer.split)))
        eligible = np.array([a.allowed for a in asked]) if asked else np.zeros((0, len(cluster.nodes)), bool)
        alike = [(int(free.gpus[i]), int(free.cpus[i]), int(free.memory_mb[i]), n.gpu_type, n.gpus, n.cpus,
                  n.memory_mb, eligible[:, i].tobytes()) for i, n in enumerate(cluster.nodes)]
        answer = renew_leases(answer, asked, held, alike)
        whole = answer.whole if answer.status == "optimal" else {}
        rest = [j for j in runnable if j.job_id not in whole]
        placed_whole = []
        for j in runnable:  # first the running jobs the LP keeps on their own (single) server
            home = homes.get(j.job_id)
            lp_idx = whole.get(j.job_id)
            if (home is not None and lp_idx is not None and len(home.nodes) == 1
                    and cluster.node(home.nodes[0].node).index == lp_idx):
                if packer.place_on(j.job_id, home, packer.demand(*vector(j))) is None:
                    rest.append(j)
            elif lp_idx is not None:
                placed_whole.append(j)
        for j in placed_whole:  # then the LP's other whole placements (new jobs, and running jobs it moves)
            if packer.place(j.job_id, [(whole[j.job_id], j.num_gpus)], packer.demand(*vector(j))) is None:
                rest.append(j)
        seated = {j.job_id for j in rest if j.job_id in homes  # running ones keep their GPUs for TUNE's rule
                  and packer.place_on(j.job_id, homes[j.job_id], packer.gpus_only()) is not None}
        for j in sorted(rest, key=size):  # the rounding of split jobs (§4.1.3) by TUNE's rule at the ILP vector
            if j.job_id in seated:
                self._replace_running(view, packer, j, vector(j), vector, plan)
                continue
            self._pack_new(view, packer, j, vector(j), vector, plan)
            if j.job_id in homes and j.job_id not in packer.alloc:  # its GPUs went to the LP's whole placements
                self._lease_not_renewed(plan, j)

    def _pack_every_pass(self, view: ClusterView, packer: Packer, runnable: Sequence[JobInfo],
                         new: Sequence[JobInfo], plan: Plan, state: PassState,
                         vectors: dict[str, tuple[int, int]]) -> None:
        """Halyard's earlier reading: running jobs keep their GPUs; the second LP spreads the new jobs."""
        from halyard.policies.synergy_opt_placement import SpreadJob, spread

        for job in runnable:  # the round's CPU and memory are recomputed; running jobs keep GPUs
            if job.allocation is not None:
                packer.strip(job.job_id)
        def vector(j: JobInfo) -> tuple[int, int]:
            return vectors.get(j.job_id) or self.demand(view, j)

        def size(j: JobInfo) -> tuple[int, int, int, int]:
            return (-j.num_gpus, -vector(j)[0], -vector(j)[1], j.arrival_seq)

        free = packer.free
        running = [j for j in runnable if j.allocation is not None]
        waiting = [j for j in runnable if j.allocation is None]
        if self.fit_running:  # Halyard's option: running jobs by TUNE's rule first, the LP on what is left
            for job in sorted(running, key=size):
                self._pack_running(view, packer, job, vector(job), vector, plan)
        cpus, memory = free.cpus.astype(float), free.memory_mb.astype(float)
        if not self.fit_running:
            for job in running:  # x fixed on their own servers at their ILP vector
                c, m = vectors[job.job_id]
                for part in allocation_of(job).nodes:
                    idx = view.cluster.node(part.node).index
                    cpus[idx] -= c * len(part.gpus)
                    memory[idx] -= m * len(part.gpus)
        usable = [packer.usable(packer.gpus_only(), view.gpu_types_for(j.spec)) > 0 for j in waiting]
        asked = [SpreadJob(j.job_id, j.num_gpus, vectors[j.job_id][0] * j.num_gpus,
                           vectors[j.job_id][1] * j.num_gpus, ok) for j, ok in zip(waiting, usable, strict=True)]
        answer = spread(asked, free.gpus, cpus, memory)
        state.put(SPREAD_KEY, (answer.status, len(answer.split)))
        if answer.status != "optimal":  # reported (spread_failed), then TUNE's placement of the ILP vectors
            if not self.fit_running:
                self.repack(view, packer, runnable, new, plan, vectors)
                return
            for job in sorted(waiting, key=size):
                self._pack_new(view, packer, job, vector(job), vector, plan)
            return
        for job in running if not self.fit_running else ():
            if not packer.reshape(job.job_id, packer.demand(*vectors[job.job_id])):
                raise AssertionError(f"synergy-opt: running job {job.job_id!r} does not fit its ILP vector on "
                                     f"its own servers although the second LP counted it there")
        whole = answer.whole
        rest = []
        for job in waiting:
            lp_idx = whole.get(job.job_id)
            need = packer.demand(*vectors[job.job_id])
            if lp_idx is None or packer.place(job.job_id, [(lp_idx, job.num_gpus)], need) is None:
                rest.append(job)
        for job in sorted(rest, key=size):
            self._pack_new(view, packer, job, vector(job), vector, plan)  # rounding of a split job

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        if OPT_BOUND_KEY in state:
            self.last_bound = state.get(OPT_BOUND_KEY)
            if self.last_bound is None:
                self.unsolved += 1
        if SPREAD_KEY in state:
            status, split = state.get(SPREAD_KEY)
            self.spread_failed += status != "optimal"
            self.split_jobs += split


class SrtfBySpeedup(Srtf):
    """SRTF keyed as Synergy's public simulator keys it under TUNE (not in the paper; off unless named,
    ``+srtf-by-speedup``): the remaining time at the proportional share divided by the job's profiled
    speed-up at its demand vector (msr-fiddle/synergy ``jobs/job.py`` ``remaining_duration(fair=False)``
    with ``synergy_speedup`` reset to the model's speed-up each round), so sensitive jobs rank shorter."""

    name = "srtf-by-speedup"

    def key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], tuple[float, ...]]:
        now, guard = view.now, self.guard

        def remaining(job: JobInfo) -> float:
            p = job_profile(view, job)
            speedup = max(p.speedup(p.demand_cpus, p.demand_memory_mb), 1.0)
            return job.remaining_iterations(now) * job.ideal_iteration_s / speedup

        if guard is not None:
            promoted, rank = guard.promote(view, state), guard.rank
            return lambda job: (rank(promoted, job), remaining(job), job.spec.submit_time, job.arrival_seq)
        return lambda job: (remaining(job), job.spec.submit_time, job.arrival_seq)


def srtf_by_speedup(policy: Any) -> Any:
    """``policy`` (a Synergy ``MECHANISM:srtf`` preset) with :class:`SrtfBySpeedup` as its ordering
    (the ``+srtf-by-speedup`` suffix; a starvation guard already named is kept)."""
    ordering = getattr(policy, "ordering", None)
    if type(ordering) is not Srtf or not isinstance(getattr(policy, "placement", None), SynergyMechanism):
        raise ValidationError(f"+srtf-by-speedup needs a Synergy mechanism with the srtf ordering; "
                              f"{policy.name!r} has {getattr(ordering, 'name', None)!r}", field="policy")
    keyed = SrtfBySpeedup()
    keyed.guard, keyed.needs_rounds = ordering.guard, ordering.needs_rounds
    policy.ordering = keyed
    policy.name = f"{policy.name}+srtf-by-speedup"
    return policy


class _Placed:
    """What :func:`_emit` reads of a packer (its ``alloc``), for the lean re-pack's allocations."""

    __slots__ = ("alloc",)

    def __init__(self, alloc: dict[str, Allocation]) -> None:
        self.alloc = alloc


def _short(stage: str, job: JobInfo, c: int, m: int) -> Unplaced:
    return cannot_fit(stage, "needs {:#GPU} with {:#CPU} and {:.1f} GB per GPU (its demand vector); "
                      "no servers have them free", job.num_gpus, c, m / 1000.0)


def _emit(view: ClusterView, plan: Plan, packer: Packer | _Placed, new: Sequence[JobInfo]) -> None:
    """The pass's changes in an order whose every prefix fits the ledger (the core applies a plan
    action by action): CPU/memory decreases of jobs that stay, then, in sweeps until nothing is left,
    every increase, move (``Migrate``) and start that fits what the actions before it left free. A
    cycle of moves (each waiting for another's GPUs) is broken by preempting its first job and
    starting it at its new place in the same plan (the same checkpoint-and-restart as a move)."""
    index = node_index(view)
    ledger = _Ledger(view.free, index, capacities(view))
    for job_id in plan.stops():
        ledger.must(ledger.give(allocation_of(view.running[job_id])))
    later: list[tuple[str, str, Allocation | _Raise]] = []  # (kind, job, what): "up" a _Raise, "move"/"start" alloc
    placed = packer.alloc
    for job_id, job in view.running.items():
        alloc = placed.get(job_id)
        if alloc is None:
            continue
        held = allocation_of(job)
        if alloc is held:
            continue
        if [(p.node, p.gpus) for p in alloc.nodes] != [(p.node, p.gpus) for p in held.nodes]:
            later.append(("move", job_id, alloc))
            continue
        for old, part in zip(held.nodes, alloc.nodes, strict=True):
            oc, om, nc, nm = old.cpus, old.memory_mb, part.cpus, part.memory_mb
            if (oc, om) == (nc, nm):
                continue
            low = (min(oc, nc), min(om, nm))
            if low != (oc, om):  # a decrease in some dimension: always fits
                plan.set_resources(job_id, part.node, *low)
                ledger.must(ledger.adjust(index[part.node], low[0] - oc, low[1] - om))
            if low != (nc, nm):
                later.append(("up", job_id, (part.node, *low, nc, nm)))
    for job in new:
        alloc = packer.alloc.get(job.job_id)
        if alloc is not None:
            later.append(("start", job.job_id, alloc))
    while later:
        left = [op for op in later if not _try(view, plan, ledger, *op)]
        if len(left) == len(later):
            moves = [i for i, op in enumerate(left) if op[0] == "move"]
            if not moves:
                raise AssertionError(f"synergy: the pass's placement does not fit the ledger ({left[0]!r})")
            _, job_id, moved = left[moves[0]]
            plan.preempt(job_id)
            ledger.must(ledger.give(allocation_of(view.running[job_id])))
            left[moves[0]] = ("start", job_id, moved)
        later = left


# A CPU/memory increase of a job that stays: (node, cpus, memory MB it holds after the decreases, cpus,
# memory MB it is raised to).
_Raise = tuple[str, int, int, int, int]


def _try(view: ClusterView, plan: Plan, ledger: _Ledger, kind: str, job_id: str, what: Allocation | _Raise) -> bool:
    """Add one change to the plan if it fits ``ledger`` now (and take it there); False if not yet."""
    if not isinstance(what, Allocation):  # kind "up"
        node, lc, lm, nc, nm = what
        if not ledger.adjust(ledger.index[node], nc - lc, nm - lm):
            return False
        plan.set_resources(job_id, node, nc, nm)
    elif kind == "move":
        old = allocation_of(view.running[job_id])
        if not ledger.give(old):
            return False
        if not ledger.take(what):
            ledger.must(ledger.take(old))
            return False
        plan.migrate(job_id, what)
    else:
        if not ledger.take(what):
            return False
        plan.start(job_id, what)
    return True


class _Ledger:
    """:func:`_emit`'s copy of the free resources, on lists: what :class:`FreeResources`' ``take``, ``give`` and
    ``adjust`` check and change, answering whether a change fits (all of it or none) instead of raising. An
    emit tries a few changes per re-pack that acts (~12,000 on the public Synergy configuration), most of
    which fit; FreeResources' numpy scalars and exceptions were most of its cost (issue 38)."""

    __slots__ = ("c", "cap_c", "cap_m", "index", "m", "mask")

    def __init__(self, free: FreeResources, index: dict[str, int], caps: tuple[list[int], list[int]]) -> None:
        self.c, self.m = free.cpus.tolist(), free.memory_mb.tolist()  # (and the GPUs by their ids' mask)
        self.mask = list(free.gpu_mask)
        self.cap_c, self.cap_m = caps  # (each node's CPU cores and memory: read only)
        self.index = index

    def take(self, allocation: Allocation) -> bool:
        """Give out ``allocation`` if its GPUs are free and its CPU and memory fit on every node."""
        index, c, m, mask = self.index, self.c, self.m, self.mask
        parts = [(index[p.node], p, gpu_bits(p.gpus)) for p in allocation.nodes]
        for idx, p, bits in parts:
            if mask[idx] & bits != bits or p.cpus > c[idx] or p.memory_mb > m[idx]:
                return False
        for idx, p, bits in parts:
            c[idx] -= p.cpus
            m[idx] -= p.memory_mb
            mask[idx] ^= bits
        return True

    def give(self, allocation: Allocation) -> bool:
        """Take ``allocation`` back if none of its GPUs is free already and no node would hold more than it has."""
        index, c, m, mask = self.index, self.c, self.m, self.mask
        parts = [(index[p.node], p, gpu_bits(p.gpus)) for p in allocation.nodes]
        for idx, p, bits in parts:
            if mask[idx] & bits or c[idx] + p.cpus > self.cap_c[idx] or m[idx] + p.memory_mb > self.cap_m[idx]:
                return False
        for idx, p, bits in parts:
            c[idx] += p.cpus
            m[idx] += p.memory_mb
            mask[idx] ^= bits
        return True

    def adjust(self, idx: int, cpus: int, memory_mb: int) -> bool:
        """A holder's CPU and memory on node ``idx`` changed by ``cpus``, ``memory_mb`` (either sign), if it fits."""
        new_c, new_m = self.c[idx] - cpus, self.m[idx] - memory_mb
        if new_c < 0 or new_m < 0 or new_c > self.cap_c[idx] or new_m > self.cap_m[idx]:
            return False
        self.c[idx], self.m[idx] = new_c, new_m
        return True

    @staticmethod
    def must(done: bool) -> None:
        """A change that always fits (a decrease, or what the plan's own stop frees) did."""
        if not done:
            raise AssertionError("synergy: a change that frees resources does not fit the ledger")


MECHANISMS: dict[str, Callable[[], SynergyMechanism]] = {
    "proportional": Proportional, "synergy-greedy": Greedy, "synergy-tune": Tune,
    "proportional-every-pass": lambda: Proportional(rounds=False),
    "synergy-greedy-every-pass": lambda: Greedy(rounds=False),
    "synergy-tune-every-pass": lambda: Tune(rounds=False),
    "synergy-tune-keep-gpus": lambda: Tune(replace=False),
    "synergy-tune-raise": lambda: Tune(raise_back=True), "synergy-opt": Opt,
    "synergy-opt-every-pass": lambda: Opt(rounds=False),
    "synergy-opt-fit-running": lambda: Opt(fit_running=True)}


def make_synergy(mechanism: str, ordering: str) -> StagedPolicy:
    """The preset ``MECHANISM:ORDERING``: the staged pass with a Synergy mechanism as its placement."""
    return StagedPolicy(f"{mechanism}:{ordering}", ORDERINGS[ordering](), placement=MECHANISMS[mechanism]())
