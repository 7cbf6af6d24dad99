"""Dally's ``+staggered`` and ``+hoard``: two semantics of its reference simulator, aakash-sharma/cluster-sim,
that the paper does not have (policies/dally_clustersim.py), as options on ``+reauction``."""

from __future__ import annotations

import pytest
from factories import job
from policy_fakes import FakeJob, on, view_of

from halyard.datamodel import ValidationError
from halyard.policies import Start, make_policy
from halyard.policies.dally import LEASE_ROUNDS, LEASES_KEY, Dally, with_option
from halyard.policies.dally_release import OFFERED_KEY
from halyard.policies.dally_timers import ManualTimers
from halyard.policies.passstate import PassState

LEASE_S = LEASE_ROUNDS * 300.0
# The reading these tests hold (+staggered's auctions): the `dally` preset's before issue 35's chain of lease rules.
STAGGERED = "dally-literal+reauction+staggered"


def fake(job_id: str, gpus: int, *, seq: int = 0, **kw) -> FakeJob:
    return FakeJob(job(gpus, job_id=job_id), arrival_seq=seq, **kw)


def reauction(*options: str) -> Dally:
    policy = Dally(ManualTimers(), reauction=True)
    for option in options:
        with_option(policy, option)
    return policy


def rack_one_busy(cluster) -> list[FakeJob]:
    """Two jobs holding rack r1 whose leases have not ended at ``LEASE_S`` (assigned at 50 s)."""
    return [fake("late1", 4, seq=10, allocation=on(cluster, ("r1-n0", 4)), done=100, run_s=1000,
                 last_assignment_time=50.0),
            fake("late2", 4, seq=11, allocation=on(cluster, ("r1-n1", 4)), done=100, run_s=1000,
                 last_assignment_time=50.0)]


def test_staggered_releases_lease_ended_jobs_one_at_a_time(small_cluster):
    """cluster-sim ends each job's lease at its own iteration boundary (``IntraJobScheduler.endIteration``),
    and each release is an auction of what is free then (``InterJobScheduler.multiGPUResourceAllocator``).
    Two lease-ended jobs hold rack r0, a machine each; a never-run job needs the whole rack (8 GPUs). With
    every lease of the pass offered at once (``+reauction``), the never-run job bids first (Nw_sens 0) and
    takes the rack: both are preempted. Released one at a time (``+staggered``), no auction ever sees 8
    free GPUs in a rack: each released job takes its machine back, and the big job waits."""
    def jobs():
        return [fake("a", 4, seq=0, allocation=on(small_cluster, ("r0-n0", 4)), done=500, run_s=1000,
                     last_assignment_time=0.0),
                fake("b", 4, seq=1, allocation=on(small_cluster, ("r0-n1", 4)), done=500, run_s=1000,
                     last_assignment_time=0.0),
                *rack_one_busy(small_cluster)]
    big = fake("big", 8, seq=2)
    at_once = reauction().schedule(view_of(small_cluster, LEASE_S, jobs(), [big]), PassState())
    kinds = {(type(a).__name__, a.job_id) for a in at_once.actions}
    assert kinds == {("Preempt", "a"), ("Preempt", "b"), ("Start", "big")}
    one_by_one = reauction("staggered").schedule(view_of(small_cluster, LEASE_S, jobs(), [big]), PassState())
    assert one_by_one.actions == [] and set(one_by_one.unplaced) == {"big"}


def test_hoard_holds_what_a_running_job_wins_until_it_finishes(small_cluster):
    """cluster-sim lets a running job bid in mid-iteration (``startIteration`` empties its next-iteration
    GPU set, the only test ``multiGPUResourceAllocator`` makes) and keeps what it wins leased to it, unused,
    when its lease has not ended (``endIteration``: ``mNextIterationGPUs = mCurrentIterationGPUs``), until
    the job ends (``relinquishAllResources``). At its lease end a job keeps its machine and wins the free
    one; a job that arrives later finds no machine until the first finishes. Without ``+hoard`` it starts."""
    def running():
        return [fake("r", 4, seq=0, allocation=on(small_cluster, ("r0-n0", 4)), done=500, run_s=1000,
                     last_assignment_time=0.0), *rack_one_busy(small_cluster)]
    waiting = fake("w", 4, seq=5, pending_since=LEASE_S + 1.0)
    for options, starts in (((), True), (("hoard",), False)):
        policy = reauction(*options)
        state = PassState()
        view = view_of(small_cluster, LEASE_S, running(), [])
        plan = policy.schedule(view, state)
        assert plan.actions == []  # r keeps its machine
        policy.on_applied(view, plan, state)
        later = policy.schedule(view_of(small_cluster, LEASE_S + 1.0, running(), [waiting]), PassState())
        started = [a for a in later.actions if isinstance(a, Start)]
        assert bool(started) is starts
        if starts:
            assert started[0].allocation.node_names == ("r0-n1",)
    # r finishes: what it held is offered again
    gone = policy.schedule(view_of(small_cluster, LEASE_S + 2.0, rack_one_busy(small_cluster), [waiting]),
                           PassState())
    assert [(type(a).__name__, a.job_id) for a in gone.actions] == [("Start", "w")]


def test_staggered_hoard_bids_in_nw_sens_order_with_the_waiting_jobs(small_cluster):
    """In each release's auction a running job bids with the waiting jobs in increasing Nw_sens
    (``PerGPUBidComparator``): when the one lease-ended job's machine comes free, a slowed running job
    (Nw_sens below the waiting job's) wins it ahead of a waiting job that ran before, and holds it; the
    waiting job finds nothing, nor does the released job. Without ``+hoard`` the waiting job takes it."""
    def running():
        return [fake("slowed", 4, seq=0, allocation=on(small_cluster, ("r1-n0", 4)), done=200, run_s=1000,
                     last_assignment_time=50.0),
                fake("late", 4, seq=1, allocation=on(small_cluster, ("r1-n1", 4)), done=950, run_s=1000,
                     last_assignment_time=50.0),
                fake("other", 4, seq=2, allocation=on(small_cluster, ("r0-n1", 4)), done=950, run_s=1000,
                     last_assignment_time=50.0),
                fake("ended", 4, seq=3, allocation=on(small_cluster, ("r0-n0", 4)), done=900, run_s=1000,
                     last_assignment_time=0.0)]
    ran_before = fake("ran", 4, seq=4, done=800, run_s=1000, pending_since=0.0, last_assignment_time=0.0)
    for options, kinds in ((("staggered", "hoard"), [("Preempt", "ended")]),
                           (("staggered",), [("Preempt", "ended"), ("Start", "ran")])):
        plan = reauction(*options).schedule(view_of(small_cluster, LEASE_S, running(), [ran_before]), PassState())
        assert [(type(a).__name__, a.job_id) for a in plan.actions] == kinds


@pytest.mark.parametrize("option", ["staggered", "hoard"])
def test_the_options_need_reauction(option):
    with pytest.raises(ValidationError, match=f"\\+{option} .*needs \\+reauction"):
        make_policy(f"dally-manual-literal+{option}")
    policy = make_policy(f"dally-manual-literal+reauction+{option}")
    assert policy.name == f"dally-manual-literal+reauction+{option}"
    assert (policy.hoard is not None) is (option == "hoard") and (policy.staggered is not None) is (option != "hoard")


def _drawn_run(policy_name: str, arrival: str, racks: int, seed: int, jobs: int, *, shortcuts: bool):
    """A drawn workload of the reproduction (benchmarks/reproduce_dally.py) through ``policy_name``: the
    event log, the pass count and the offers Algorithm 1 answered (benchmarks/opcounts.py)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        from opcounts import counting
        from reproduce_dally import CATALOG, POISSON_PER_DAY, ROUND_S, dally_trace
    finally:
        sys.path.pop(0)
    from halyard.datamodel import load_cluster
    from halyard.emulator.catalog import load_model_catalog
    from halyard.scheduling import Simulator
    from halyard.scheduling.timing import performance_model_for

    drawn = dally_trace(jobs, seed=seed, poisson_per_day=None if arrival == "batch" else POISSON_PER_DAY)
    policy = make_policy(policy_name)
    policy.shortcuts = shortcuts
    sim = Simulator(load_cluster(f"dally-{racks}rack"), policy,
                    performance_model_for(policy, contention="off", catalog=load_model_catalog(CATALOG)),
                    round_s=ROUND_S)
    plans = []  # every pass's plan: its actions and every waiting job's reason
    schedule = policy.schedule

    def recorded(view, state):
        plan = schedule(view, state)
        # every waiting job's reason at a lease end (+staggered's pass writes them all, either way); the
        # other passes are Dally's own, whose shortcuts write only the reasons that changed
        lease_end = bool(state.get(LEASES_KEY) or state.get(OFFERED_KEY))  # (+auction-on-release's: OFFERED_KEY)
        plans.append((view.now, list(plan.actions), dict(plan.unplaced) if lease_end else None))
        return plan

    policy.schedule = recorded
    with counting(policy) as counts:
        sim.run(drawn)
    log = [(e.seq, repr(e.time), e.job_id, e.kind, e.state, e.detail) for e in sim.core.log]
    return log, plans, counts["offers"]


@pytest.mark.parametrize(("policy_name", "arrival", "racks", "seed", "jobs"), [
    (STAGGERED, "batch", 2, 1, 40),  # the preset before issue 35's chain (policies/registry.py DALLY_READINGS)
    (STAGGERED, "batch", 4, 2, 40),
    (STAGGERED, "poisson", 2, 3, 30),
    ("dally-manual-literal+reauction+staggered", "batch", 2, 4, 30),
    (f"{STAGGERED}+hoard", "batch", 2, 1, 20),
    (f"{STAGGERED}+hoard", "poisson", 4, 2, 12),
    (f"{STAGGERED}+first-fit", "batch", 2, 1, 20),
])
def test_incremental_auctions_log_what_one_by_one_logs(policy_name, arrival, racks, seed, jobs):
    """``+staggered``'s auctions made incremental (policies/dally_staggered.py) offer Algorithm 1 only to the
    bidders that accept: the same event log as the auctions one by one (every waiting job offered what is
    free after every release, the rule as policies/dally_clustersim.py states it), the same actions at
    every pass and the same reason for every waiting job at every lease end, with fewer offers."""
    fast_log, fast_plans, fast_offers = _drawn_run(policy_name, arrival, racks, seed, jobs, shortcuts=True)
    slow_log, slow_plans, slow_offers = _drawn_run(policy_name, arrival, racks, seed, jobs, shortcuts=False)
    assert fast_log == slow_log
    assert fast_plans == slow_plans  # the same actions every pass, and every waiting job's reason at lease ends
    assert sum(reasons is not None for _, _, reasons in fast_plans) > 10  # lease ends compared, reasons too
    assert any(reasons for _, _, reasons in fast_plans if reasons is not None)
    assert sum(kind.value == "PREEMPTED" for _, _, _, kind, _, _ in fast_log) > 0  # lease ends displaced jobs
    assert fast_offers < slow_offers


# ---------------------------------------------------------------------------------------------- +first-fit
# policies/dally_first_fit.py: cluster-sim's DallyInterJobScheduler.consolidatedGPUAllocation takes the first
# machine of its machineMap (a commons-collections4 MultiKeyMap keyed (rack id, machine id in its rack)) with
# the demand free, the first rack of its rackMap (java.util.HashMap), and InterJobScheduler.allocateGPU the
# first free GPUs in Cluster.getGPUsInCluster order (rack by rack, machine by machine).

# What cluster-sim's maps give, printed by the Java program below against Debian's commons-collections4 4.2
# (the jar cluster-sim runs with in benchmarks/dally_public_perjob.py): each case is the machines with a free
# GPU, in cluster order, and the keySet order of machineMap filled from them.
MULTIKEYMAP_ORDERS = [
    ([(r, m) for r in range(2) for m in range(8)],  # the empty 2-rack cluster of the side-by-side
     [(1, 5), (0, 4), (0, 3), (1, 2), (1, 6), (0, 7), (0, 2), (1, 3), (1, 7), (0, 6), (0, 1), (1, 0), (1, 4),
      (0, 5), (0, 0), (1, 1)]),
    ([(0, 0), (0, 1), (1, 0), (1, 1), (1, 5)], [(1, 5), (1, 0), (0, 1), (1, 1), (0, 0)]),
    ([(0, 0), (1, 7)], [(1, 7), (0, 0)]),
    ([(0, 0), (0, 3)], [(0, 3), (0, 0)]),
]

JAVA_ORDER = """
import java.util.*;
import org.apache.commons.collections4.keyvalue.MultiKey;
import org.apache.commons.collections4.map.MultiKeyMap;
public class Order {
  public static void main(String[] a) {
    Scanner s = new Scanner(System.in);
    while (s.hasNextLine()) {
      MultiKeyMap m = new MultiKeyMap();
      Map<Integer, Integer> racks = new HashMap<>();
      for (String t : s.nextLine().trim().split(" ")) {
        String[] p = t.split(",");
        Integer r = Integer.valueOf(p[0]), k = Integer.valueOf(p[1]);
        for (int i = 0; i < Integer.parseInt(p[2]); i++) {  // one GPU at a time, as consolidatedGPUAllocation
          racks.merge(r, 1, Integer::sum);
          if (!m.containsKey(r, k)) m.put(r, k, 1); else m.put(r, k, (Integer) m.get(r, k) + 1);
        }
      }
      StringBuilder b = new StringBuilder();
      for (Object o : m.keySet()) { MultiKey key = (MultiKey) o; b.append(key.getKey(0) + "," + key.getKey(1) + " "); }
      b.append("|");
      for (Integer r : racks.keySet()) b.append(" " + r);
      System.out.println(b.toString().trim());
    }
  }
}
"""


@pytest.mark.parametrize(("keys", "order"), MULTIKEYMAP_ORDERS)
def test_first_fit_machine_order_is_cluster_sims_multikeymap_order(keys, order):
    from halyard.policies.dally_first_fit import multikeymap_order
    assert multikeymap_order(keys) == order


def test_first_fit_orders_match_commons_collections_itself(tmp_path):
    """The orders against the real maps: a Java program fills a MultiKeyMap and a HashMap as
    consolidatedGPUAllocation does, for drawn sets of machines on 1 to 20 racks (past both maps' resizes),
    and prints their keySet orders (skipped where no JDK or commons-collections4 jar is installed)."""
    import random
    import shutil
    import subprocess
    from pathlib import Path

    from halyard.policies.dally_first_fit import hashmap_order, multikeymap_order
    jar = Path("/usr/share/java/commons-collections4.jar")
    if shutil.which("javac") is None or not jar.exists():
        pytest.skip("needs javac and commons-collections4 (Debian: default-jdk-headless libcommons-collections4-java)")
    (tmp_path / "Order.java").write_text(JAVA_ORDER)
    subprocess.run(["javac", "-nowarn", "-cp", str(jar), "Order.java"], cwd=tmp_path, check=True,
                   capture_output=True)
    rng = random.Random(7)
    cases = []
    for _ in range(400):
        racks = rng.choice([1, 2, 4, 8, 20])
        density = rng.random()
        case = [(r, m, rng.randint(1, 8)) for r in range(racks) for m in range(8) if rng.random() < density]
        if case:
            cases.append(case)
    lines = "\n".join(" ".join(f"{r},{m},{g}" for r, m, g in case) for case in cases) + "\n"
    out = subprocess.run(["java", "-cp", f"{jar}:{tmp_path}", "Order"], input=lines, capture_output=True,
                         text=True, check=True, timeout=120).stdout.splitlines()
    assert len(out) == len(cases)
    for case, line in zip(cases, out, strict=True):
        machines, racks = line.split("|")
        assert multikeymap_order([(r, m) for r, m, _ in case]) == [
            tuple(int(x) for x in key.split(",")) for key in machines.split()]
        assert hashmap_order(list(dict.fromkeys(r for r, _, _ in case))) == [int(r) for r in racks.split()]


def _two_racks(used: dict[str, int]):
    """dally-2rack's shape and usable GPUs per node, ``used`` GPUs taken on the named nodes."""
    import numpy as np

    from halyard.datamodel import load_cluster
    from halyard.policies.facts import ClusterShape
    cluster = load_cluster("dally-2rack")
    avail = np.array([n.gpus - used.get(n.name, 0) for n in cluster.nodes], dtype=np.int64)
    return cluster, ClusterShape(cluster), avail


def test_first_fit_takes_the_first_that_fits_not_the_best():
    """consolidatedGPUAllocation's loops ``break`` at the first fit (``minGPUAllocation = gpus`` is commented
    out). Machine: on the empty cluster a 4-GPU job gets r1-m5, machineMap's first key (best fit: r0-m0).
    Rack (a 16-GPU job, more than a machine): the first rack of rackMap with 16 free, and in it allocateGPU's
    first 16 free GPUs in cluster order, across three machines where best fit needs two. Network (72 GPUs,
    more than a rack): the first 72 free GPUs in cluster order, rack r0 first (best fit: the freer rack)."""
    from halyard.policies.dally_first_fit import FirstFit
    from halyard.policies.topology import on_machine, on_network, on_rack
    cluster, shape, empty = _two_racks({})
    names = [n.name for n in cluster.nodes]

    def named(picked):
        return [(names[i], k) for i, k in picked]

    ff = FirstFit()
    assert named(ff.on_machine(empty, shape, 4)) == [("r1-m5", 4)]
    assert named(on_machine(empty, 4)) == [("r0-m0", 4)]
    _, _, avail = _two_racks({"r0-m0": 2})
    assert named(ff.on_rack(avail, shape, 16)) == [("r0-m0", 6), ("r0-m1", 8), ("r0-m2", 2)]
    assert len(on_rack(avail, shape, 16)) == 2
    assert named(ff.on_network(avail, shape, 72))[-3:] == [("r0-m7", 8), ("r1-m0", 8), ("r1-m1", 2)]
    assert sum(k for n, k in named(on_network(avail, shape, 72)) if n.startswith("r1")) == 64
    assert ff.on_machine(avail, shape, 9) is None and ff.on_rack(avail, shape, 65) is None
    assert ff.on_network(avail, shape, 127) is None


def test_first_fit_composes_with_reauction_staggered():
    """At a lease end cluster-sim takes the job's GPUs back and re-places it like a waiting job
    (IntraJobScheduler.endIteration, then an auction): alone on the cluster, a 4-GPU job leased r0-m0 is
    moved to r1-m5, machineMap's first machine. With Halyard's best fit it keeps r0-m0. Off by default."""
    from halyard.datamodel import load_cluster
    from halyard.policies.plan import Migrate
    cluster = load_cluster("dally-2rack")

    def running():
        return [fake("a", 4, seq=0, allocation=on(cluster, ("r0-m0", 4)), done=100, run_s=1000,
                     last_assignment_time=0.0)]
    assert make_policy("dally").delay.first_fit is None
    for name, moved in ((STAGGERED, None), (f"{STAGGERED}+first-fit", "r1-m5")):
        policy = make_policy(name)
        assert policy.name == name
        plan = policy.schedule(view_of(cluster, LEASE_S, running(), []), PassState())
        moves = [a.allocation.node_names for a in plan.actions if isinstance(a, Migrate)]
        assert moves == ([] if moved is None else [(moved,)]) and len(plan.actions) == len(moves)


# ---------------------------------------------------------------------------------------------- kept figures
# Issue 38 (Deliver 2): +staggered's auctions keep each GPU-type set's offer as releases and acceptances change a
# few nodes, and take the running jobs' bid keys from the kept progress rows; both equal the figures worked out
# afresh at every use.

def test_kept_offers_equal_offers_worked_out_afresh(monkeypatch):
    """Auctions.changed updates only the nodes a give or a take touched (KeptOffer.update): after every change, on a
    drawn workload, every kept offer and its sums (best node, best rack, all) equal usable_gpus worked out afresh."""
    import numpy as np

    from halyard.policies.dally_staggered import Auctions
    from halyard.policies.placement import usable_gpus

    real, checked = Auctions.changed, [0]

    def compared(self, allocation, *, given):
        real(self, allocation, given=given)
        assert self.free_total == self.free.total_gpus
        shape = self.view.shape
        for types, kept in self.offers.items():
            fresh = usable_gpus(self.free, shape, types)
            assert np.array_equal(kept.avail, fresh)
            racks = np.bincount(shape.rack, weights=fresh, minlength=shape.n_racks)
            assert kept.summary() == (int(fresh.max(initial=0)), int(racks.max(initial=0)), int(fresh.sum()))
            checked[0] += 1

    monkeypatch.setattr(Auctions, "changed", compared)
    _drawn_run(STAGGERED, "batch", 2, 1, 40, shortcuts=True)
    assert checked[0] > 100


def test_running_bid_keys_equal_each_jobs_nw_sens(monkeypatch):
    """+staggered's running jobs' bid keys taken all at once from RunningNwSens equal each job's key worked out by
    itself (Nw_sens, 0 for a job that has not run yet at the instant, then submission and arrival)."""
    from halyard.policies import dally_clustersim

    real, checked = dally_clustersim._running_keys, [0]

    def compared(policy, view, wanted=None):
        got = real(policy, view, wanted)
        now = view.now
        every = {job.job_id: (policy._never_ran_sens if job.run_time_s(now) <= 0.0
                              else policy.sensitivity(view, job), job.spec.submit_time, job.arrival_seq)
                 for job in view.running.values()}
        assert got == (every if wanted is None else {job.job_id: every[job.job_id] for job in wanted})
        checked[0] += bool(got)
        return got

    monkeypatch.setattr(dally_clustersim, "_running_keys", compared)
    _drawn_run(STAGGERED, "poisson", 2, 3, 30, shortcuts=True)
    _drawn_run(f"{STAGGERED}+hoard", "batch", 2, 1, 20, shortcuts=True)  # (every running job bids)
    assert checked[0] > 10


@pytest.mark.parametrize(("arrival", "racks", "seed", "jobs"), [("poisson", 2, 3, 30), ("poisson", 4, 2, 30)])
def test_a_release_that_bids_alone_takes_back_what_the_auction_gives_it(arrival, racks, seed, jobs, monkeypatch):
    """Auctions.retakes answers a release that bids alone without its auction: each answer is what the auction
    would give (its GPUs given back, the best fit on one machine, the allocation built from the lowest free ids),
    and the whole run's event log is the one-by-one auctions' (policies/dally_staggered.py)."""
    from halyard.policies.dally_staggered import Auctions
    from halyard.policies.placement import build_allocation, usable_gpus
    from halyard.policies.topology import on_machine
    from halyard.policies.view import allocation_of

    real, retaken = Auctions.retakes, [0]

    def checked(self, job):
        own = real(self, job)
        trial = self.free.copy()
        trial.give(allocation_of(job))
        avail = usable_gpus(trial, self.view.shape, self.policy.delay.statics.of(self.view, job).gpu_types)
        picked = on_machine(avail, job.spec.num_gpus)
        auctioned = None if picked is None else build_allocation(trial, picked)
        if own is not None:
            assert auctioned == own
            retaken[0] += 1
        return own

    monkeypatch.setattr(Auctions, "retakes", checked)
    fast_log, _, _ = _drawn_run(STAGGERED, arrival, racks, seed, jobs, shortcuts=True)
    monkeypatch.undo()
    slow_log, _, _ = _drawn_run(STAGGERED, arrival, racks, seed, jobs, shortcuts=False)
    assert fast_log == slow_log
    assert retaken[0] > 20


@pytest.mark.parametrize(("policy_name", "arrival", "racks", "seed", "jobs"), [
    ("dally", "batch", 2, 1, 40),  # the preset: +reauction+auction-on-release+event-leases+release-delay
    ("dally", "poisson", 4, 2, 40),
    ("dally-manual", "batch", 2, 3, 30),
    ("dally+first-fit", "batch", 2, 1, 30),
    ("dally-literal+reauction", "poisson", 2, 4, 30),
])
def test_reauction_shortcuts_log_what_the_plain_bids_log(policy_name, arrival, racks, seed, jobs):
    """``+reauction``'s exact shortcuts (issue 38; policies/dally.py ``_bid``): each GPU-type set's usable GPUs
    kept through a pass as its bids take them (``_KeptOffers``), and a bid's delay timers worked out only when
    it takes no machine (``DelayScheduling.offer``'s ``lazy``). With them the same event log and the same actions
    at every pass as with every bid's offer and timers worked out afresh. (Not as many offers: the shortcuts of
    Dally's own passes between lease ends, ``_WaitingTail``, answer the jobs that only wait without offers.)"""
    fast_log, fast_plans, _ = _drawn_run(policy_name, arrival, racks, seed, jobs, shortcuts=True)
    slow_log, slow_plans, _ = _drawn_run(policy_name, arrival, racks, seed, jobs, shortcuts=False)
    assert fast_log == slow_log
    assert fast_plans == slow_plans
    kinds = {kind.value for _, _, _, kind, _, _ in fast_log}
    assert "PREEMPTED" in kinds or "MIGRATED" in kinds  # lease ends re-placed jobs
