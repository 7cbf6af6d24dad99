"""TUNE's round re-pack on plain lists: :meth:`Tune.repack <halyard.policies.synergy.Tune.repack>`'s steps,
in its order, on per-node integers and per-job parts, with the allocations built once per job at the end.

Why: at a Synergy round every runnable job is re-packed (§3: "their placement decisions are recomputed"),
and on the public simulator's headline configuration (5,000 jobs at 9/h on 128 V100) a round holds ~65
runnable jobs and ~7,000 rounds re-pack: the re-pack was ~40 % of the run (issue 38). Most of that was
not the packing but its book-keeping: a numpy scalar read or write per CPU and memory change, a rule
object per job, an :class:`~halyard.datamodel.Allocation` looked up or built at each of a job's steps
(stripped, then set back to its demand, usually where it was). Here the free resources are Python
integers, a job is its parts' node indices, GPUs, GPU ids and CPU cores and memory, and a job's
allocation is built (or found among the shapes kept from earlier passes, :class:`KeptShapes`) once, at
the end.

The steps are those of :class:`~halyard.policies.synergy.Tune` (``replace=True``, no OPT vectors), one
function per method there, in the same order, with the same rules (the demand vector, the share capped at
it, GPUs only; §4.2 (2a)'s revert by :class:`~halyard.policies.synergy_packing.CapAt`), the same
choices (best fit by free GPUs, CPUs, memory, then node index; several nodes by
:func:`~halyard.policies.placement.choose_nodes`) and the same reasons, preemptions and plan.
``Tune(lean=False)`` runs the straightforward path (Packer); ``tests/test_synergy_lean.py`` holds the
two to the same event log and reasons on drawn workloads, and ``benchmarks/pin_schedules.py`` pins both.

Settled re-packs. The round after a re-pack that changed something is usually handed just what it left (the
same runnable jobs, each where it was put, the same free resources), and re-packing that changes nothing:
2,826 of the 7,017 re-packs on the public Synergy configuration. :func:`repack` certifies it as it goes
(``LeanPack.settled``) and ``Tune.place_all`` then answers that round with no change without running it.
Why the certificate is exact, with R(Y) the re-pack and X what it leaves: R(Y) placed every runnable job, so
R(X) has no new job, and its turns are R(Y)'s in the same order (sizes do not read placements) on the
servers R(X) opens (``Tune._renewing``), which must be among those R(Y) opened (:func:`_opens_within`); jobs
elsewhere hold their demand in X and renew. By induction over the turns, each opened server holds the same
CPU and memory at a turn in both (a job is stripped until its turn and takes at it what it took in R(Y)),
and the others hold no less in R(X). A turn reads its own servers (in place at the demand vector, at the
share, §4.2 (2a)'s reverts: the same outcome) and, where the job does not fit in place, a select at the
demand vector over every server, which must fail in R(X) as it did in R(Y): a select fails when the usable
GPUs summed over the servers fall short of the job's, and usable GPUs only grow with free resources. R(X)
holds every GPU R(Y) held at that turn but those freed by moves after it, so each failed select keeps its
shortfall and the room per server its CPU and memory leave, and each later move takes what it may add off
(``LeanPack.freed``); a job R(Y) moved or started at its demand takes it in place in R(X). A turn that placed
a running job afresh, preempted it or left a job waiting is not certified (``OTHER``).
``tests/test_synergy_settled_repack.py`` runs drawn workloads with each certified re-pack run anyway
(``Tune.verify_settled``) and shows the move rule needed there; the other two conditions guard what 160
drawn workloads never reached (a job on several servers moved onto one R(Y) left closed; a running job placed
afresh at its share), which the argument above does not cover; 130 drawn workloads ran clean with all three.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from halyard.datamodel import Allocation, NodeAllocation
from halyard.policies.placement import no_fit
from halyard.policies.plan import Plan
from halyard.policies.reasons import cannot_fit
from halyard.policies.resources import FreeResources, gpu_bits
from halyard.policies.synergy_packing import capacities
from halyard.policies.view import ClusterView, JobInfo

if TYPE_CHECKING:
    from halyard.policies.synergy import Tune
    from halyard.policies.synergy_packing import KeptShapes

# Need.max_gpus' "no limit" for a zero per-GPU demand.
_BIG = int(np.iinfo(np.int64).max // 4)

# How many (free-id mask, count) answers LeanPack._first_free keeps per cluster. Our choice: 8-GPU servers have
# at most 2,048 of them; servers with more GPUs could have far more masks, and past this many the answers are
# worked out afresh (a few microseconds each) rather than kept.
FIRST_FREE_KEPT = 4096

# The rules a job is placed or reshaped at (Packer.demand, Packer.capped, Packer.gpus_only).
DEMAND, CAPPED, GPUS_ONLY = 0, 1, 2

# How a turn of the re-pack went (what :func:`repack`'s settled certificate reads): at the demand vector
# on GPUs it then holds from the start of the next re-pack (in place, or a new job's first choice); moved
# to another server at its demand; at less than its demand on the GPUs it held or was first given (a
# capped share, possibly after reverting others); anything else (a running job placed afresh, a wait).
QUIET, MOVED, ROUGH, OTHER = 0, 1, 2, 3


class _Job:
    """A job as the re-pack holds it: ``base`` is the allocation whose GPUs (and stages, workers and
    time-shift) it holds, its own at the start of the pass; None when the pass placed it afresh (a plain
    allocation, as ``Packer.build`` makes). ``idxs``, ``ks``, ``ids``: per part its node index, GPUs and
    GPU ids; ``cs``, ``ms``: the CPU cores and memory it holds there now; ``hc``, ``hm``: those ``base``
    gives (read only; None for a job placed afresh)."""

    __slots__ = ("base", "cs", "hc", "hm", "ids", "idxs", "ks", "ms")

    def __init__(self, base: Allocation | None, idxs: list[int], ks: list[int], ids: list[tuple[int, ...]],
                 cs: list[int], ms: list[int], hc: list[int] | None = None, hm: list[int] | None = None) -> None:
        self.base, self.idxs, self.ks, self.ids, self.cs, self.ms = base, idxs, ks, ids, cs, ms
        self.hc, self.hm = hc, hm


# A job's turn in the re-pack: its size key (unique), the job, and for a running job on one server the job as
# the re-pack holds it, that server and its demand there (else None), for one on several the job as the
# re-pack holds it (else None).
_Turn = tuple[int, int, int, int, JobInfo, "tuple[_Job, int, int, int] | None", "_Job | None"]
# A select at the demand vector that failed (LeanPack.freed): its shortfall in GPUs (less what moves have freed
# since), each server's room for more GPUs left by its CPU and memory (less what moves have taken off; worked out
# on first use), and what that room is worked out from: the demand vector, the free CPU cores and memory then,
# the usable GPUs then, the servers of other GPU types.
_Failed = tuple[list[int], dict[int, int], int, int, list[int], list[int], list[int], "list[bool] | None"]
# A running job's entry kept from pass to pass while it holds the same allocation (repack's _held).
_Entry = tuple[Allocation, "_Job", _Turn, tuple[str, list[int], bool, int, int], tuple[int, int, int, int, int] | None]


class LeanPack:
    """One pass's re-pack on lists (the module docstring): the free resources per node, the jobs held."""

    def __init__(self, view: ClusterView, free: FreeResources, index: dict[str, int]) -> None:
        cluster = view.cluster
        self.view = view
        self.nodes = cluster.nodes
        self.index = index
        self.free = free
        self.g: list[int] = free.gpus.tolist()
        self.c: list[int] = free.cpus.tolist()
        self.m: list[int] = free.memory_mb.tolist()
        self.mask: list[int] = list(free.gpu_mask)
        self.sched: list[bool] = free.schedulable.tolist()
        shape = view.shape
        self.shape = shape
        # The cluster's fixed figures as lists, made once per cluster (read only): CPU cores and memory per node
        # (synergy_packing.capacities, as _emit's ledger reads them); GPUs per node, each rack's nodes, the nodes'
        # names, each node's GPU-proportional CPU cores and memory per GPU count (Node.proportional_cpus,
        # proportional_memory_mb); and the lowest free GPU ids per free-id mask and count, with their bits
        # (_first_free: filled as masks come up).
        self.cap_c, self.cap_m = capacities(view)
        self.cap_g, self._racks, self._names, self.prop, self._first = view.facts.memo(
            "synergy/lean-shape", None, lambda: (
                shape.gpus.tolist(), [r.tolist() for r in shape.rack_nodes], [n.name for n in self.nodes],
                [[(n.proportional_cpus(k), n.proportional_memory_mb(k)) for k in range(n.gpus + 1)]
                 for n in self.nodes], {}))
        self.jobs: dict[str, _Job] = {}
        # The jobs whose CPU and memory may end other than their allocation gives (what :meth:`finish` looks at):
        # reshaped, placed, held away from their demand, or whose turn did not go back to it in place.
        self.touched: dict[str, None] = {}
        self.on_node: list[set[str]] = [set() for _ in self.nodes]
        self._excluded: dict[object, list[bool] | None] = {}
        # Whether re-packing what this pass leaves would leave it as it is (:func:`repack` sets it; the
        # module docstring's last paragraph says why it is exact), and each select at the demand vector that
        # failed so far: by how many GPUs, and how many more each server would have given it with more free
        # GPUs (both less what moves have freed since: :meth:`freed`).
        self.settled = False
        self.failed: list[_Failed] = []

    # --- book-keeping (Packer.hold, release, place, place_on) ---------------------------

    def release(self, job_id: str) -> _Job:
        j = self.jobs.pop(job_id)
        g, c, m, mask, on_node = self.g, self.c, self.m, self.mask, self.on_node
        for i, idx in enumerate(j.idxs):
            g[idx] += j.ks[i]
            c[idx] += j.cs[i]
            m[idx] += j.ms[i]
            mask[idx] ^= gpu_bits(j.ids[i])
            on_node[idx].discard(job_id)
        return j

    def place_home(self, job_id: str, j: _Job) -> None:
        """``Packer.place_on`` of a job's own GPUs, just released, at no CPU or memory (it always fits)."""
        g, mask, on_node = self.g, self.mask, self.on_node
        for i, idx in enumerate(j.idxs):
            bits = gpu_bits(j.ids[i])
            if mask[idx] & bits != bits:
                raise AssertionError(f"synergy-tune: running job {job_id!r} cannot take back its own GPUs")
            g[idx] -= j.ks[i]
            mask[idx] ^= bits
            on_node[idx].add(job_id)
        j.cs = [0] * len(j.idxs)
        j.ms = [0] * len(j.idxs)
        self.jobs[job_id] = j

    def place(self, job_id: str, picked: list[tuple[int, int]], rule: int, c: int, m: int) -> bool:
        """``Packer.place``: the lowest free GPU ids on each picked node at ``rule``; False (nothing
        changed) if a part's CPU or memory does not fit."""
        fc, fm, mask = self.c, self.m, self.mask
        idxs, ks, ids, bits, cs, ms = [], [], [], [], [], []
        for idx, k in picked:
            pc, pm = self.rule(rule, c, m, idx, k)
            free_ids, b = self._first_free(mask[idx], k)
            if len(free_ids) != k or pc > fc[idx] or pm > fm[idx]:
                return False
            idxs.append(idx)
            ks.append(k)
            ids.append(free_ids)
            bits.append(b)
            cs.append(pc)
            ms.append(pm)
        g, on_node = self.g, self.on_node
        for i, idx in enumerate(idxs):
            g[idx] -= ks[i]
            fc[idx] -= cs[i]
            fm[idx] -= ms[i]
            mask[idx] ^= bits[i]
            on_node[idx].add(job_id)
        self.jobs[job_id] = _Job(None, idxs, ks, ids, cs, ms)
        return True

    def _first_free(self, mask: int, k: int) -> tuple[tuple[int, ...], int]:
        """The ``k`` lowest ids set in ``mask`` (fewer if it has fewer) and their bits."""
        found = self._first.get((mask, k))
        if found is None:
            ids = tuple([i for i in range(mask.bit_length()) if mask >> i & 1][:k])
            found = (ids, gpu_bits(ids))
            if len(self._first) < FIRST_FREE_KEPT:
                self._first[(mask, k)] = found
        return found

    # --- rules, reshapes, choices (Need, Packer.reshape, Packer.select) ------------------------------

    def rule(self, rule: int, c: int, m: int, idx: int, k: int) -> tuple[int, int]:
        if rule == DEMAND:
            return c * k, m * k
        if rule == GPUS_ONLY:
            return 0, 0
        pc, pm = self.prop[idx][k]
        return min(c * k, pc), min(m * k, pm)

    def reshape(self, job_id: str, wanted: list[tuple[int, int]]) -> bool:
        """``Packer.reshape``: the job's parts to ``wanted`` (CPU cores, memory) where it is; False (nothing
        changed) if an increase does not fit."""
        j = self.jobs[job_id]
        cs, ms, idxs = j.cs, j.ms, j.idxs
        fc, fm = self.c, self.m
        self.touched[job_id] = None
        if len(idxs) == 1:
            wc, wm = wanted[0]
            dc, dm = wc - cs[0], wm - ms[0]
            if not (dc or dm):
                return True
            idx = idxs[0]
            if dc > fc[idx] or dm > fm[idx]:
                return False
            fc[idx] -= dc
            fm[idx] -= dm
            cs[0], ms[0] = wc, wm
            return True
        if all(w == (cs[i], ms[i]) for i, w in enumerate(wanted)):
            return True
        for i, idx in enumerate(idxs):
            wc, wm = wanted[i]
            if wc - cs[i] > fc[idx] or wm - ms[i] > fm[idx]:
                return False
        for i, idx in enumerate(idxs):
            wc, wm = wanted[i]
            fc[idx] -= wc - cs[i]
            fm[idx] -= wm - ms[i]
            cs[i], ms[i] = wc, wm
        return True

    def reshape_demand(self, j: _Job, c: int, m: int) -> bool:
        """``reshape_at(job, DEMAND, c, m)`` for a job on several nodes without building its wanted list: the
        same checks in the same order (no change if every part is at its demand already; else every part's
        increase must fit before any part changes). ~100,000 running jobs on two or more servers take this
        step on the public Synergy configuration (issue 38); tests/test_synergy_lean.py holds it to
        :meth:`reshape_at` on every call of drawn runs."""
        idxs, ks, cs, ms = j.idxs, j.ks, j.cs, j.ms
        for i in range(len(idxs)):
            if c * ks[i] != cs[i] or m * ks[i] != ms[i]:
                break
        else:
            return True
        fc, fm = self.c, self.m
        for i, idx in enumerate(idxs):
            if c * ks[i] - cs[i] > fc[idx] or m * ks[i] - ms[i] > fm[idx]:
                return False
        for i, idx in enumerate(idxs):
            wc, wm = c * ks[i], m * ks[i]
            fc[idx] -= wc - cs[i]
            fm[idx] -= wm - ms[i]
            cs[i], ms[i] = wc, wm
        return True

    def reshape_at(self, job_id: str, rule: int, c: int, m: int) -> bool:
        j = self.jobs[job_id]
        if rule == DEMAND:
            return self.reshape(job_id, [(c * k, m * k) for k in j.ks])
        return self.reshape(job_id, [self.rule(rule, c, m, idx, k) for idx, k in zip(j.idxs, j.ks, strict=True)])

    def cap_at(self, job_id: str) -> None:
        """``CapAt``: each of the job's parts down to the GPU-proportional share where it holds more."""
        j = self.jobs[job_id]
        prop = self.prop
        wanted = [(min(j.cs[i], prop[idx][k][0]), min(j.ms[i], prop[idx][k][1]))
                  for i, (idx, k) in enumerate(zip(j.idxs, j.ks, strict=True))]
        self.reshape(job_id, wanted)

    def usable(self, rule: int, c: int, m: int, gpu_types: object) -> list[int]:
        """``Packer.usable``: GPUs per node of ``gpu_types`` that can be taken at ``rule`` (Need.max_gpus)."""
        g, fc, fm, sched = self.g, self.c, self.m, self.sched
        if rule == GPUS_ONLY:
            avail = [g[i] if sched[i] else 0 for i in range(len(g))]
        else:
            avail = [0] * len(g)  # (no free GPU: none usable, whatever the CPU and memory; a loaded round's servers
            cap_g, cap_c, cap_m = self.cap_g, self.cap_c, self.cap_m  # mostly have none)
            for i in [i for i, free in enumerate(g) if free and sched[i]]:
                by_cpu = fc[i] // c if c > 0 else _BIG
                by_mem = fm[i] // m if m > 0 else _BIG
                if rule == CAPPED:
                    by_cpu = max(by_cpu, ((fc[i] + 1) * cap_g[i] - 1) // max(cap_c[i], 1))
                    by_mem = max(by_mem, ((fm[i] + 1) * cap_g[i] - 1) // max(cap_m[i], 1))
                avail[i] = min(g[i], by_cpu, by_mem)
        excluded = self._excluded_of(gpu_types)
        if excluded is not None:
            avail = [0 if excluded[i] else a for i, a in enumerate(avail)]
        return avail

    def _excluded_of(self, gpu_types: object) -> list[bool] | None:
        if gpu_types is None:
            return None
        if gpu_types not in self._excluded:
            mask = self.shape.excluded(gpu_types)  # type: ignore[arg-type]
            self._excluded[gpu_types] = None if mask is None else mask.tolist()
        return self._excluded[gpu_types]

    def select(self, rule: int, c: int, m: int, gpus: int, gpu_types: object) -> list[tuple[int, int]] | None:
        """``Packer.select(best_fit=True)``: one node, the one with the least free GPUs, CPUs, memory (then
        the lowest index); else several (:func:`choose_nodes`)."""
        avail = self.usable(rule, c, m, gpu_types)
        if max(avail) >= gpus:  # (most selects of a loaded round find no single server: no walk for them)
            g, fc, fm = self.g, self.c, self.m
            best = None
            for i, a in enumerate(avail):
                if a >= gpus:
                    key = (g[i], fc[i], fm[i], i)
                    if best is None or key < best:
                        best = key
            assert best is not None
            return [(best[3], gpus)]
        picked = self._several(avail, gpus)
        if picked is None and rule == DEMAND:  # (the room per server is worked out when a move asks: freed)
            self.failed.append(([gpus - sum(avail)], {}, c, m, list(self.c), list(self.m), avail,
                                self._excluded_of(gpu_types)))
        return picked

    def freed(self, j: _Job) -> bool:
        """A move left ``j``'s GPUs free: whether every select at the demand vector that failed before it
        would still fail with them free (each server's usable GPUs grow by at most the GPUs freed there, and
        by at most the room its CPU and memory left at that select: by_cpu, by_mem as usable has them, less
        the GPUs usable there then; none on a server that takes no work or has GPUs of other types)."""
        sched = self.sched
        for short, room, c, m, fc, fm, avail, excluded in self.failed:
            for idx, k in zip(j.idxs, j.ks, strict=True):
                left = room.get(idx)
                if left is None:
                    left = (min(fc[idx] // c if c > 0 else _BIG, fm[idx] // m if m > 0 else _BIG) - avail[idx]
                            if sched[idx] and (excluded is None or not excluded[idx]) else 0)
                more = min(k, left)
                room[idx] = left - more
                short[0] -= more
            if short[0] <= 0:
                return False
        return True

    def _several(self, avail: list[int], gpus: int) -> list[tuple[int, int]] | None:
        """:func:`~halyard.policies.placement.choose_nodes` when no single node holds ``gpus`` (the same
        choice, on lists): the fewest nodes within one rack (the first such rack on ties), else over the
        cluster; nodes with the most usable GPUs first, ties by position."""
        if sum(avail) < gpus:
            return None
        best: list[tuple[int, int]] | None = None
        for members in self._racks:
            if sum(avail[i] for i in members) >= gpus:
                picked = _fill(members, avail, gpus)
                if best is None or len(picked) < len(best):
                    best = picked
        if best is not None:
            return best
        return _fill(range(len(avail)), avail, gpus)

    # --- the end ---------------------------------------------------------------------------------------

    def finish(self, kept: KeptShapes) -> dict[str, Allocation]:
        """Write the free resources back and build the allocation of each job whose allocation changed: on
        its own GPUs one of the shapes kept from pass to pass, else a plain one. A job back where it was is
        left out (what :func:`~halyard.policies.synergy._emit` reads as no change, as its very allocation)."""
        free = self.free
        free.gpus[:] = self.g
        free.cpus[:] = self.c
        free.memory_mb[:] = self.m
        free.gpu_mask[:] = self.mask
        names, jobs = self._names, self.jobs
        alloc: dict[str, Allocation] = {}
        for job_id in self.touched:  # (every other job went back to its demand where it is, as it held it)
            j = jobs.get(job_id)
            if j is None:  # (released and not placed again: it waits)
                continue
            base = j.base
            if base is not None and j.cs == j.hc and j.ms == j.hm:
                continue  # back where it was, which _emit reads as no change (None, or the very
                # allocation, from its packer.alloc.get)
            per_node = tuple(zip(j.cs, j.ms, strict=True))
            if base is None:
                alloc[job_id] = Allocation(tuple([NodeAllocation(names[idx], ids, c, m)
                                                  for idx, ids, c, m in zip(j.idxs, j.ids, j.cs, j.ms, strict=True)]))
                continue
            shapes = kept.shapes_of(job_id, base)
            found = shapes.same.get(per_node)
            if found is None:
                found = shapes.same[per_node] = base.with_resources(per_node)
                shapes.ids.add(id(found))
            alloc[job_id] = found
        return alloc


def repack(tune: Tune, view: ClusterView, lp: LeanPack, runnable: Sequence[JobInfo], plan: Plan,
           parsed: dict[int, _Entry], keep: dict[int, _Entry]) -> None:
    """:meth:`Tune.repack` (``replace=True``, the profiled demand vectors) on ``lp``, holding the runnable
    running jobs first (``SynergyMechanism.place_all``). One walk over the runnable set holds each job, asks
    its demand vector and sums :meth:`Tune._renewing`'s per-node figures; ``parsed``: the running jobs'
    entries of the last pass by their allocation's id (:func:`_held`); ``keep`` gets this pass's."""
    demand = tune.demand
    jobs, on_node, touched = lp.jobs, lp.on_node, lp.touched
    # Tune._renewing's sums: per node the CPU and memory free once the held jobs are released, and the
    # held jobs' demand; and per held job its nodes and whether it is at its demand now. The first is also
    # the free resources once every held job is stripped (Packer.strip_all), the usual next step: each job
    # is held stripped, and set back to what it holds in the rare pass where some jobs renew.
    cap_c, cap_m = list(lp.c), list(lp.m)
    dem_c, dem_m = [0] * len(cap_c), [0] * len(cap_m)
    held: list[tuple[str, list[int], bool, int, int]] = []
    spans: list[list[int]] = []  # the servers of each held job on several
    # The re-pack's turns (Tune.repack's size order: GPUs, CPUs, memory, largest first, then arrival; unique).
    turns: list[_Turn] = []
    for job in runnable:
        allocation = job.allocation
        if allocation is None:
            c, m = demand(view, job)
            turns.append((-job.num_gpus, -c, -m, job.arrival_seq, job, None, None))
            continue
        key = id(allocation)
        e = parsed.get(key)
        if e is None or e[0] is not allocation:
            e = _held(lp, job, allocation, *demand(view, job))
        keep[key] = e
        _, j, turn, h, single = e
        job_id = h[0]
        jobs[job_id] = j
        if not h[2]:  # (away from its demand: its turn or renewal may change it)
            touched[job_id] = None
        turns.append(turn)
        held.append(h)
        if single is not None:  # most jobs: one node (the same sums as below)
            idx, pc, pm, ck, mk = single
            j.cs[0] = j.ms[0] = 0
            on_node[idx].add(job_id)
            cap_c[idx] += pc
            cap_m[idx] += pm
            dem_c[idx] += ck
            dem_m[idx] += mk
            continue
        c, m = h[3], h[4]
        assert j.hc is not None and j.hm is not None  # a held job's entry (_held) has its held shares
        spans.append(j.idxs)
        for i, idx in enumerate(j.idxs):
            k = j.ks[i]
            j.cs[i] = j.ms[i] = 0
            on_node[idx].add(job_id)
            cap_c[idx] += j.hc[i]
            cap_m[idx] += j.hm[i]
            dem_c[idx] += c * k
            dem_m[idx] += m * k
    renewing, to_demand, opened = _renewing(lp, len(runnable), cap_c, cap_m, dem_c, dem_m, held, spans)
    # (for the settled certificate: the servers opened, and their CPU and memory with the runnable jobs released)
    within = None if opened is None else (opened, list(cap_c), list(cap_m))
    lp.c, lp.m = cap_c, cap_m  # every held job stripped: what the loop left
    if renewing:  # the renewing ones back to what they hold, then those away from their demand set to it
        for job_id in renewing:  # (Tune.repack sets them before it strips the others: the same end state,
            j = jobs[job_id]  # as each fits its demand in place whatever the order, Tune._renewing)
            assert j.hc is not None and j.hm is not None, "every job held so far holds its own allocation"
            j.cs, j.ms = list(j.hc), list(j.hm)
            for i, idx in enumerate(j.idxs):
                cap_c[idx] -= j.cs[i]
                cap_m[idx] -= j.ms[i]
        for job_id, cm in to_demand:
            if not lp.reshape_at(job_id, DEMAND, *cm):
                raise AssertionError(f"synergy-tune: renewing job {job_id!r} does not fit its demand in place")
        turns = [turn for turn in turns if turn[4].job_id not in renewing]
    turns.sort()  # (the size tuples are unique: a job is never compared)
    # The settled certificate (module docstring): no turn OTHER, no select at the demand vector that failed by
    # fewer GPUs than moves after it may have freed for it (LeanPack.freed), and the demand per server of what
    # the pass leaves (dem_c, dem_m, kept up to date as jobs start or move) opening no server this pass did not.
    settled = True
    placed_spans: list[list[int]] = []  # the servers of each job on several that the pass starts or moves
    for _, c, m, _, job, one, several in turns:
        # A running job back to its demand where it is, if it fits there (most turns): _replace_running's first
        # step inlined (the job holds nothing at its turn).
        if one is not None:
            j, idx, wc, wm = one
            if wc <= cap_c[idx] and wm <= cap_m[idx]:
                cap_c[idx] -= wc
                cap_m[idx] -= wm
                j.cs[0], j.ms[0] = wc, wm
                continue
        elif several is not None and lp.reshape_demand(several, -c, -m):
            continue
        job_id = job.job_id
        touched[job_id] = None
        if job.allocation is None:
            how = _pack_new(tune, view, lp, job, (-c, -m), plan)
            if how != OTHER:
                _add_demand(lp.jobs[job_id], -c, -m, dem_c, dem_m, placed_spans)
        else:
            home = jobs[job_id]
            how = _replace_running(tune, view, lp, job, (-c, -m), plan)
            if how == MOVED:
                _add_demand(home, c, m, dem_c, dem_m, None)
                _add_demand(lp.jobs[job_id], -c, -m, dem_c, dem_m, placed_spans)
                settled = settled and lp.freed(home)
        settled = settled and how != OTHER
    lp.settled = settled and (within is None or _opens_within(lp, *within, dem_c, dem_m, placed_spans))


def _held(lp: LeanPack, job: JobInfo, allocation: Allocation, c: int, m: int) -> _Entry:
    """A running job's entry, kept from pass to pass while it holds ``allocation`` (:func:`repack`): the
    allocation, the job as the re-pack holds it, its turn, its figures for _renewing (id, nodes, at its
    demand ``(c, m)`` now, and that demand), and for a job on one node (node index, CPU cores and memory it
    holds, its demand there) else None."""
    index = lp.index
    nodes = allocation.nodes
    idxs, ks = [index[p.node] for p in nodes], [len(p.gpus) for p in nodes]
    cs, ms = [p.cpus for p in nodes], [p.memory_mb for p in nodes]
    j = _Job(allocation, idxs, ks, [p.gpus for p in nodes], [0] * len(nodes), [0] * len(nodes), cs, ms)
    at_demand = all(cs[i] == c * k and ms[i] == m * k for i, k in enumerate(ks))
    single = (idxs[0], cs[0], ms[0], c * ks[0], m * ks[0]) if len(nodes) == 1 else None
    one = None if single is None else (j, idxs[0], c * ks[0], m * ks[0])
    several = None if single is not None else j
    return (allocation, j, (-job.num_gpus, -c, -m, job.arrival_seq, job, one, several),
            (job.job_id, idxs, at_demand, c, m), single)


def _renewing(lp: LeanPack, runnable: int, cap_c: list[int], cap_m: list[int], dem_c: list[int],
              dem_m: list[int], held: list[tuple[str, list[int], bool, int, int]], spans: list[list[int]]
              ) -> tuple[set[str], list[tuple[str, tuple[int, int]]], set[int] | None]:
    """:meth:`Tune._renewing` from the sums :func:`repack` made (its docstring says why it is exact), and the
    servers it opens (None: every one). ``spans``: the servers of each held job on several."""
    n = len(cap_c)
    opened = {i for i in range(n) if dem_c[i] > cap_c[i] or dem_m[i] > cap_m[i]}
    if opened or len(held) < runnable:
        opened.update(i for i, g in enumerate(lp.g) if g > 0)
    if opened and len(opened) < n:
        opened = _closure(opened, n, spans)
    if len(opened) == n:  # (a loaded round: every server open, nobody renews before the re-pack)
        return set(), [], None
    renewing = {h[0] for h in held if opened.isdisjoint(h[1])}
    return renewing, [(h[0], (h[3], h[4])) for h in held if h[0] in renewing and not h[2]], opened


def _closure(opened: set[int], n: int, spans: Iterable[list[int]]) -> set[int]:
    """Tune._renewing's closure (a job that spans an open server opens the others it spans, until none does)
    in one walk: the servers linked by the jobs' ``spans`` (each a job's servers), and every group with an
    open one."""
    group = list(range(n))
    for idxs in spans:
        if len(idxs) > 1:
            root = _root(group, idxs[0])
            for i in idxs[1:]:
                other = _root(group, i)
                if other != root:
                    group[other] = root
    roots = {_root(group, i) for i in opened}
    return {i for i in range(n) if _root(group, i) in roots}


def _add_demand(j: _Job, c: int, m: int, dem_c: list[int], dem_m: list[int], spans: list[list[int]] | None) -> None:
    """Add a job's demand vector ``(c, m)`` per GPU to the per-server sums at each of its parts (and its servers
    to ``spans`` where it has several)."""
    for idx, k in zip(j.idxs, j.ks, strict=True):
        dem_c[idx] += c * k
        dem_m[idx] += m * k
    if spans is not None and len(j.idxs) > 1:
        spans.append(j.idxs)


def _opens_within(lp: LeanPack, opened: set[int], cap_c: list[int], cap_m: list[int], dem_c: list[int],
                  dem_m: list[int], spans: list[list[int]]) -> bool:
    """Whether the servers a re-pack of what this pass leaves would open (Tune._renewing with every runnable job
    placed: the over-committed ones, closed over the jobs that span them) are among the ``opened`` ones of
    this pass. ``cap_c``, ``cap_m``: each server's CPU and memory with the runnable jobs released (the same
    then); ``dem_c``, ``dem_m``: the demand of the jobs it leaves there; ``spans``: the servers of the jobs on
    several that it started or moved. ``opened`` is closed over every other job's servers (_renewing), so
    when no such span leaves it, the closure of the over-committed ones stays in it."""
    n = len(cap_c)
    over = {i for i in range(n) if dem_c[i] > cap_c[i] or dem_m[i] > cap_m[i]}
    if not over <= opened:
        return False
    if not over or all(opened.issuperset(span) or opened.isdisjoint(span) for span in spans):
        return True
    return _closure(over, n, (j.idxs for j in lp.jobs.values())) <= opened


def _root(group: list[int], i: int) -> int:
    """The representative of server ``i``'s group in ``group`` (each entry its server's parent)."""
    while group[i] != i:
        i = group[i]
    return i


def _replace_running(tune: Tune, view: ClusterView, lp: LeanPack, job: JobInfo, cm: tuple[int, int],
                     plan: Plan) -> int:
    """:meth:`Tune._replace_running`; how the turn went (QUIET, MOVED, ROUGH or OTHER)."""
    c, m = cm
    job_id = job.job_id
    j = lp.jobs[job_id]
    if len(j.idxs) == 1:  # LeanPack.reshape_at(DEMAND), inlined: most jobs go back to their demand in place
        idx, k = j.idxs[0], j.ks[0]
        wc, wm = c * k, m * k
        dc, dm = wc - j.cs[0], wm - j.ms[0]
        if not (dc or dm):
            return QUIET
        fc, fm = lp.c, lp.m
        if dc <= fc[idx] and dm <= fm[idx]:
            fc[idx] -= dc
            fm[idx] -= dm
            j.cs[0], j.ms[0] = wc, wm
            return QUIET
    elif lp.reshape_demand(j, c, m):  # (reshape_at(DEMAND) without its lists)
        return QUIET
    home = lp.release(job_id)
    picked = lp.select(DEMAND, c, m, job.num_gpus, view.gpu_types_for(job.spec))
    if picked is not None and lp.place(job_id, picked, DEMAND, c, m):
        return MOVED
    lp.place_home(job_id, home)
    return _pack_running(tune, view, lp, job, cm, plan)


def _pack_new(tune: Tune, view: ClusterView, lp: LeanPack, job: JobInfo, cm: tuple[int, int], plan: Plan) -> int:
    """:meth:`Tune._pack_new`; how the turn went (QUIET: at its demand, ROUGH: at its share, OTHER: it waits)."""
    c, m = cm
    job_id, gpus, gtype = job.job_id, job.num_gpus, view.gpu_types_for(job.spec)
    picked = lp.select(DEMAND, c, m, gpus, gtype)
    if picked is not None and lp.place(job_id, picked, DEMAND, c, m):
        return QUIET
    picked = lp.select(CAPPED, c, m, gpus, gtype)
    if picked is not None and lp.place(job_id, picked, CAPPED, c, m):
        return ROUGH
    picked = lp.select(GPUS_ONLY, 0, 0, gpus, gtype)
    if picked is None:
        avail = np.array(lp.usable(GPUS_ONLY, 0, 0, gtype), dtype=np.int64)
        plan.wait(job_id, no_fit(tune.name, view, job, gpus, avail))
        return OTHER
    for idx, k in picked:
        _release(lp, idx, lp.rule(CAPPED, c, m, idx, k))
    if not lp.place(job_id, picked, CAPPED, c, m):
        plan.wait(job_id, cannot_fit(
            tune.name, "needs {:#GPU} at its proportional CPU and memory; reverting co-located jobs to "
            "their proportional share did not free enough", gpus))
        return OTHER
    return ROUGH


def _pack_running(tune: Tune, view: ClusterView, lp: LeanPack, job: JobInfo, cm: tuple[int, int],
                  plan: Plan) -> int:
    """:meth:`Tune._pack_running` from its second step (its first, the demand vector in place, fails here:
    :func:`_replace_running` tried it on the same state); how the turn went (ROUGH: at its share on its
    GPUs, OTHER: placed afresh)."""
    c, m = cm
    job_id = job.job_id
    j = lp.jobs[job_id]
    wanted = [lp.rule(CAPPED, c, m, idx, k) for idx, k in zip(j.idxs, j.ks, strict=True)]  # (reshape_at(CAPPED)'s)
    if lp.reshape(job_id, wanted):
        return ROUGH
    for idx, w in zip(j.idxs, wanted, strict=True):
        _release(lp, idx, w)
    if lp.reshape(job_id, wanted):
        return ROUGH
    lp.release(job_id)
    _pack_new(tune, view, lp, job, cm, plan)
    if job_id not in lp.jobs:
        tune._lease_not_renewed(plan, job)
    return OTHER


def _release(lp: LeanPack, idx: int, wanted: tuple[int, int]) -> None:
    """:meth:`Tune._release`: §4.2 (2a) on node ``idx`` until ``wanted`` fits."""
    fc, fm = lp.c, lp.m
    if fc[idx] >= wanted[0] and fm[idx] >= wanted[1]:
        return  # (it fits already: the loop below would stop before its first revert)
    jobs, prop = lp.jobs, lp.prop[idx]
    cpus, memory_mb = max(lp.cap_c[idx], 1), max(lp.cap_m[idx], 1)

    def excess(job_id: str) -> float:
        j = jobs[job_id]
        i = j.idxs.index(idx)
        pc, pm = prop[j.ks[i]]
        return max(0, j.cs[i] - pc) / cpus + max(0, j.ms[i] - pm) / memory_mb

    candidates = sorted([(-e, j) for j in lp.on_node[idx] if (e := excess(j)) > 0])  # (most excess first)
    for _, job_id in candidates:
        if fc[idx] >= wanted[0] and fm[idx] >= wanted[1]:
            return
        lp.cap_at(job_id)


def _fill(members: Sequence[int], avail: list[int], gpus: int) -> list[tuple[int, int]]:
    """:func:`~halyard.policies.placement.fill` on lists: ``gpus`` from ``members``, those with the most
    usable GPUs first (ties by position: a stable sort)."""
    picked: list[tuple[int, int]] = []
    left = gpus
    for i in sorted(members, key=lambda i: -avail[i]):
        take = min(avail[i], left)
        if take <= 0:
            break
        picked.append((i, take))
        left -= take
        if left == 0:
            break
    return picked


# (what a caller of repack passes as a job's vector; kept for the type checker's sake)
Vector = Callable[[JobInfo], tuple[int, int]]
