"""The ``+reauction`` bids' exact shortcuts (policies/dally_bids.py, issue 38): each answers what the plain
computation answers. The pass as a whole is held to the plain bids by
``tests/test_dally_clustersim.py::test_reauction_shortcuts_log_what_the_plain_bids_log`` (event logs and plans of
both paths); these hold each piece to its own reference on drawn states, where a disagreement names the piece."""

from __future__ import annotations

import random

import pytest

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, load_cluster, parse_cluster
from halyard.policies import make_policy
from halyard.policies.dally_bids import HeldParts, KeptOffers, parts_of
from halyard.policies.dally_release import OFFERED_KEY
from halyard.policies.dally_timers import MANUAL_MACHINE_TIMER_S, MANUAL_RACK_TIMER_S, AutoTuner
from halyard.policies.facts import ClusterShape
from halyard.policies.placement import build_allocation, usable_gpus
from halyard.policies.resources import FreeResources
from halyard.policies.topology import Level, on_machine, on_rack
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.testing.cluster import small_cluster_toml


def _drawn_ledger(rng: random.Random, cluster) -> FreeResources:
    """A ledger of ``cluster`` with a drawn share of each node's GPUs (and their CPU and memory) given out, some
    nodes drained."""
    free = FreeResources(cluster)
    for node in cluster.nodes:
        k = rng.randint(0, node.gpus)
        if k:
            ids = tuple(sorted(rng.sample(range(node.gpus), k)))
            extra = rng.randint(0, 1) if k < node.gpus else 0  # (a CPU more than its share: fewer usable GPUs)
            free.take(Allocation((NodeAllocation(node.name, ids, node.proportional_cpus(k) + extra,
                                                 node.proportional_memory_mb(k)),)))
        if rng.random() < 0.05:
            free.schedulable[node.index] = False
    return free


def _lists(shape: ClusterShape) -> tuple[list[int], list[int], list[int], list[int]]:
    return shape.gpus.tolist(), shape.cpus.tolist(), shape.memory_mb.tolist(), shape.rack.tolist()


@pytest.mark.parametrize("seed", range(4))
def test_the_kept_best_fit_is_on_machines_and_the_kept_offer_usable_gpus(seed):
    """:meth:`KeptOffers.machine` is :func:`on_machine` of the usable GPUs (the fewest usable at least the demand,
    the lowest index on ties), for every demand, and :meth:`KeptOffers.of` is ``usable_gpus``, after every take."""
    rng = random.Random(seed)
    cluster = load_cluster("philly")
    shape = ClusterShape(cluster)
    free = _drawn_ledger(rng, cluster)
    offers = KeptOffers(free, shape, _lists(shape), best_fit=True)
    checked = 0
    for _ in range(60):
        avail = usable_gpus(free, shape, None)
        assert offers.of(None).tolist() == avail.tolist()
        for demand in range(0, 10):
            assert offers.machine(None, demand) == on_machine(avail, demand)
            checked += 1
        demand = rng.choice((1, 2, 4, 8, 12, 16))
        picked = on_machine(avail, demand) or on_rack(avail, shape, demand)
        if picked is None:
            continue
        allocation = build_allocation(free, picked)
        free.take_parts(parts_of(picked, allocation))
        offers.took(picked)
    assert checked == 600


def _fresh_keys(avail, n: int) -> list[int]:
    """The best-fit keys of ``avail`` worked out afresh (``usable x nodes + index``, sorted)."""
    return sorted(int(a) * n + i for i, a in enumerate(avail.tolist()))


@pytest.mark.parametrize("seed", range(6))
def test_carried_offers_brought_to_a_new_ledger_are_the_offers_worked_out_afresh(seed):
    """A pass's offers and keys as its bids left them, carried to the next pass (``KeptOffers.carry``, issue 38), are
    brought up to that pass's ledger at the nodes whose figures differ: they must equal ``usable_gpus`` of it and
    its sorted keys, and the best fit ``on_machine``'s, whatever changed between (drawn gives, takes, CPU and memory
    moves and drains, on every GPU-type set of a two-type cluster), pass after pass."""
    rng = random.Random(seed)
    toml = small_cluster_toml(12, gpus_per_node=4)
    last = toml.rfind('gpu_type = "V100"')  # (the last rack's nodes are of another type)
    cluster = parse_cluster(toml[:last] + 'gpu_type = "A100"' + toml[last + len('gpu_type = "V100"'):])
    shape = ClusterShape(cluster)
    n = len(cluster.nodes)
    type_sets = [None, frozenset({"V100"}), frozenset({"A100"})]
    free = _drawn_ledger(rng, cluster)
    carried = None
    brought = 0
    for _ in range(40):
        offers = KeptOffers(free, shape, _lists(shape), True, carried)
        for types in rng.sample(type_sets, rng.randint(1, 3)):
            brought += offers.carried is not None and types in offers.carried.offers
            avail = usable_gpus(free, shape, types)
            assert offers.of(types).tolist() == avail.tolist()
            for demand in (1, 2, 3, 4, 5):
                assert offers.machine(types, demand) == on_machine(avail, demand)
            assert offers.fits[types] == _fresh_keys(avail, n)
            picked = on_machine(avail, rng.choice((1, 2, 4)))
            if picked is not None:  # a take of this pass
                free.take_parts(parts_of(picked, build_allocation(free, picked)))
                offers.took(picked)
        carried = offers.carry()
        free = free.copy()  # the next pass's ledger: drawn changes on a few nodes
        for node in rng.sample(cluster.nodes, rng.randint(0, 3)):
            i = node.index
            if rng.random() < 0.2:
                free.schedulable[i] = not free.schedulable[i]
            elif free.gpus[i] < node.gpus and rng.random() < 0.5:  # a job there ended: its GPUs come back
                free.give(Allocation((NodeAllocation(node.name, tuple(g for g in range(node.gpus)
                                                                     if not free.gpu_mask[i] >> g & 1), 0, 0),)))
            elif free.cpus[i] > 0:
                free.cpus[i] -= rng.randint(1, int(free.cpus[i]))  # (CPUs taken: fewer usable GPUs)
            elif free.memory_mb[i] > 0:
                free.memory_mb[i] //= 2
    assert brought > 20


def test_every_kept_offer_of_a_loaded_run_is_the_offer_worked_out_afresh(monkeypatch):
    """On a loaded ``dally`` run, every offer a re-auction reads (carried from the last one and brought up to its
    ledger, or worked out) is ``usable_gpus`` of its ledger, with its sorted best-fit keys."""
    import halyard.policies.dally as dally_module

    checked = {"offers": 0, "carried": 0}

    class Checked(KeptOffers):
        __slots__ = ()

        def of(self, types):
            carried = self.carried is not None and types in self.carried.offers and types not in self.offers
            avail = super().of(types)
            fresh = usable_gpus(self.free, self.shape, types)
            assert avail.tolist() == fresh.tolist()
            keys = self.fits.get(types)
            assert keys is None or keys == _fresh_keys(fresh, self.n)
            checked["offers"] += 1
            checked["carried"] += carried
            return avail

    monkeypatch.setattr(dally_module, "KeptOffers", Checked)
    sim, jobs = _loaded_dally(7)
    sim.run(jobs)
    assert checked["carried"] > 50 and checked["offers"] > checked["carried"]


def test_take_parts_and_give_parts_move_the_ledger_as_take_and_give():
    """The trusted ledger moves (:meth:`FreeResources.take_parts`, :meth:`~FreeResources.give_parts`) leave the GPUs,
    CPUs, memory and GPU masks :meth:`~FreeResources.take` and :meth:`~FreeResources.give` leave."""
    rng = random.Random(3)
    cluster = load_cluster("philly")
    shape = ClusterShape(cluster)
    checked, trusted = _drawn_ledger(rng, cluster), None
    trusted = checked.copy()
    held = HeldParts()
    for step in range(200):
        avail = usable_gpus(checked, shape, None)
        picked = on_rack(avail, shape, rng.choice((1, 3, 8, 10)))
        if picked is None:
            continue
        allocation = build_allocation(checked, picked)
        checked.take(allocation)
        trusted.take_parts(parts_of(picked, allocation))
        if step % 3 == 0:
            checked.give(allocation)
            trusted.give_parts(held.of(cluster, f"j{step}", allocation)[0])
        for name in ("gpus", "cpus", "memory_mb"):
            assert getattr(checked, name).tolist() == getattr(trusted, name).tolist()
        assert checked.gpu_mask == trusted.gpu_mask


def test_builds_as_is_equality_with_the_built_allocation():
    """:meth:`HeldParts.builds_as` says whether ``build_allocation(free, picked)`` equals the held allocation: on drawn
    ledgers, for allocations as built and for ones that are not (GPUs out of order, CPUs not proportional, logical
    workers, a time-shift), on their own nodes and on others."""
    rng = random.Random(5)
    cluster = parse_cluster(small_cluster_toml(6, gpus_per_node=8))
    held = HeldParts()
    outcomes = set()
    for trial in range(400):
        free = _drawn_ledger(rng, cluster)
        nodes = rng.sample(cluster.nodes, rng.randint(1, 2))
        parts = []
        odd = rng.random()  # (what, if anything, is not as built: on the first node, or logical workers on all)
        for node in nodes:
            ids = sorted(rng.sample(range(node.gpus), rng.randint(1, 4)))
            k = len(ids)
            cpus, memory, workers = node.proportional_cpus(k), node.proportional_memory_mb(k), ()
            if odd < 0.05 and k > 1 and not parts:
                ids.reverse()
            elif 0.05 <= odd < 0.1 and not parts:
                cpus += 1
            elif 0.1 <= odd < 0.15:
                workers = (1,) * k
            parts.append(NodeAllocation(node.name, tuple(ids), cpus, memory, workers))
        allocation = Allocation(tuple(parts))
        if rng.random() < 0.05:
            allocation = allocation.with_time_shift(1.0)
        if rng.random() < 0.5:  # its GPUs free, as at a lease end once the job gave them back
            for part in allocation.nodes:
                index = cluster.node(part.node).index
                for g in part.gpus:
                    if not free.gpu_mask[index] >> g & 1:
                        free.gpu_mask[index] |= 1 << g
        picked = [(cluster.node(p.node).index, len(p.gpus)) for p in allocation.nodes]
        if rng.random() < 0.2:
            others = rng.sample(range(len(cluster.nodes)), len(picked))
            picked = [(i, k) for i, (_, k) in zip(others, picked, strict=True)]
        if any(len(free.free_gpu_ids(i)) < k for i, k in picked):
            continue
        want = build_allocation(free, picked) == allocation
        assert held.builds_as(free, picked, *held.of(cluster, f"j{trial}", allocation)) is want
        outcomes.add(want)
    assert outcomes == {True, False}


def _loaded_dally(seed: int) -> tuple[Simulator, list[JobSpec]]:
    """The ``dally`` preset on a drawn loaded workload of 8 four-GPU machines (lease ends preempt and move jobs)."""
    rng = random.Random(seed)
    cluster = parse_cluster(small_cluster_toml(8, gpus_per_node=4))
    jobs = [JobSpec(job_id=f"j{i}", submit_time=rng.uniform(0.0, 3000.0), model=rng.choice(("resnet50", "vgg11")),
                    num_gpus=rng.choice((1, 2, 4, 4, 6, 8)), iterations=rng.randint(2_000, 60_000)) for i in range(60)]
    jobs.sort(key=lambda spec: spec.submit_time)
    policy = make_policy("dally")
    return Simulator(cluster, policy, performance_model_for(policy, contention="off"), round_s=300.0), jobs


@pytest.mark.parametrize("seed", [7, 8])
def test_the_merged_bid_order_is_the_sorted_order(seed):
    """``Dally._bid_order`` with the shortcuts (the kept waiting order, the released jobs put in their places) is the
    order of sorting every bidder by (Nw_sens, submission, arrival), at every lease end of a loaded run."""
    sim, jobs = _loaded_dally(seed)
    policy = sim.core.policy
    bid_order = policy._bid_order
    compared = []

    def both(view, released):
        got = bid_order(view, released)
        policy.shortcuts = False
        try:
            want = bid_order(view, released)
        finally:
            policy.shortcuts = True
        assert [j.job_id for j in got] == [j.job_id for j in want]
        compared.append(len(got) - len(released))
        return got

    policy._bid_order = both
    sim.run(jobs)
    assert len(compared) > 100 and sum(n > 1 for n in compared) > 20  # lease ends with jobs waiting


@pytest.mark.parametrize("seed", [7, 9])
def test_began_pruned_by_the_events_is_began_pruned_whole(seed):
    """``ReleaseAuctions.on_applied`` forgets only the jobs of the events since its last call (and those it added
    then) that no longer run: its ``began`` equals, after every pass, the one that drops every job not running."""
    sim, jobs = _loaded_dally(seed)
    release = sim.core.policy.release
    on_applied = release.on_applied
    whole: dict[str, tuple[float, float]] = {}
    dropped = [0]

    def checked(view, state):
        on_applied(view, state)
        gone = whole.keys() - view.running.keys()
        dropped[0] += len(gone)
        for job_id in gone:
            del whole[job_id]
        whole.update(state.get(OFFERED_KEY, {}))
        assert release.began == whole

    release.on_applied = checked
    sim.run(jobs)
    assert dropped[0] > 10  # jobs that had a lease end later finished or were preempted


@pytest.mark.parametrize("seed", range(3))
def test_kept_level_timers_are_algorithm_2_worked_out_afresh(seed):
    """The auto-tuner keeps one level's timer while its list is unchanged and the pass's tentative acceptances of
    the demand are all at the other level (``AutoTuner._timer``): over drawn records, expiries (a short history
    limit), full windows and tentative acceptances, every answer is Algorithm 2 over the lists worked out afresh."""
    rng = random.Random(seed)
    tuner = AutoTuner(history_limit_s=4000.0, window=6)
    lease_s, now, checked = 300.0, 0.0, 0
    for _ in range(1500):
        now += rng.choice((0.0, 10.0, 200.0, 900.0))
        demand = rng.choice((1, 2, 4, 8))
        if rng.random() < 0.3:
            tuner.record(rng.choice((Level.MACHINE, Level.RACK)), demand, rng.uniform(0.0, 5000.0), now, lease_s)
            continue
        tentative = [(rng.choice((Level.MACHINE, Level.MACHINE, Level.RACK)), rng.choice((1, 2, 4, 8)),
                      rng.uniform(0.0, 3000.0), now, lease_s) for _ in range(rng.choice((0, 0, 1, 3)))]
        got = tuner.timers(demand, lease_s, now, tentative)
        mc = tuner._level_timer(Level.MACHINE, demand, tuner.machine_floor_leases * lease_s, now, tentative,
                                MANUAL_MACHINE_TIMER_S)
        rk = tuner._level_timer(Level.RACK, demand, tuner.rack_floor_leases * lease_s, now, tentative,
                                MANUAL_MACHINE_TIMER_S + MANUAL_RACK_TIMER_S)
        assert got == (mc, max(rk, mc))
        checked += 1
    assert checked > 900 and tuner._kept_levels
