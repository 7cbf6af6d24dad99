"""Cassini as stages (§4.4.2): candidates ranked by compatibility, unique time-shifts, composition by name."""

from __future__ import annotations

import pytest
from policy_fakes import FakeJob, view_of

from halyard.datamodel import Allocation, EventKind, JobSpec, NodeAllocation, ValidationError, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.policies.cassini import CassiniPlacement, CassiniShifts
from halyard.policies.passstate import PassState
from halyard.policies.placement import FirstFitConsolidated
from halyard.policies.registry import policy_names
from halyard.scheduling import Simulator
from halyard.testing.cluster import small_cluster_toml

# Three 2-GPU nodes in one rack with 50 Gbit/s NICs: a 3-GPU job spans two nodes, two of them share
# the middle node's NIC, and alexnet's all-reduce (19% of its iteration) then asks for the whole NIC.
TOML = small_cluster_toml(3, gpus_per_node=2).replace("nic_gbit_s = 200", "nic_gbit_s = 50")


def spec(job_id: str, gpus: int = 3, model: str = "alexnet", iterations: int = 2000) -> JobSpec:
    return JobSpec(job_id=job_id, submit_time=0.0, model=model, num_gpus=gpus, iterations=iterations)


def run(policy: str, jobs: list[JobSpec]) -> Simulator:
    sim = Simulator(parse_cluster(TOML), make_policy(policy), PerformanceModel())
    sim.run(jobs)
    return sim


def jct(sim: Simulator, job_id: str) -> float:
    record = sim.core.records[job_id]
    return record.end_time - record.spec.submit_time


def test_shifted_jobs_interleave_on_their_shared_nic():
    """§4.2/§4.4.2: two alexnet jobs that start together collide on the NIC they share and both slow
    down under fair sharing; with Cassini's time-shifts (Algorithm 1 on the chain j1-NIC-j2) their
    all-reduces interleave and both run at their dedicated speed."""
    jobs = [spec("a"), spec("b")]
    plain = run("fifo", jobs)
    shifted = run("fifo+cassini", jobs)
    pm = PerformanceModel()
    cluster = parse_cluster(TOML)
    for job_id in ("a", "b"):
        alloc = shifted.core.records[job_id].allocation
        assert alloc is None or alloc.has_time_shift
        dedicated = pm.iteration_time(spec(job_id), shifted.core.records[job_id].allocation
                                      or plain.core.records[job_id].allocation, cluster).total_s
        assert jct(plain, job_id) > 1.05 * 2000 * dedicated  # contended
        assert jct(shifted, job_id) == pytest.approx(2000 * dedicated, rel=0.01)  # interleaved
    shifts = [e for e in shifted.core.log if e.kind is EventKind.TIME_SHIFT]
    assert {e.job_id for e in shifts} == {"a", "b"}


class Offering(FirstFitConsolidated):
    """A base placement that offers fixed candidates, in its own order."""

    name = "offering"

    def __init__(self, options: list[Allocation]) -> None:
        self.options = options

    def candidates(self, view, job, gpus, free, state, limit=8):
        return self.options[:limit]


def on(*parts: tuple[str, int]) -> Allocation:
    """One GPU (the given index) on each named node."""
    return Allocation(tuple(NodeAllocation(n, (g,), 3, 62_500) for n, g in parts))


def test_placement_picks_the_compatible_loop_free_candidate():
    """Algorithm 2: x (bert-large, Up 48% of its iteration) runs on n0-n1, y (gnmt, Up 71%) on n2-n3.
    For a new bert-large job the base offers, in order, a candidate sharing n3 with y (incompatible:
    48% + 71% of the NIC), one sharing n0 and n1 with x (a loop, line 13: never chosen) and one
    sharing n1 with x alone (compatible). Cassini takes the last; its other candidates keep the
    base's order."""
    cluster = parse_cluster(small_cluster_toml(5, gpus_per_node=2).replace("nic_gbit_s = 200", "nic_gbit_s = 50"))
    x = FakeJob(spec("x", 2, "bert-large"), allocation=on(("r0-n0", 0), ("r0-n1", 0)))
    y = FakeJob(spec("y", 2, "gnmt"), allocation=on(("r0-n2", 0), ("r0-n3", 0)))
    z = FakeJob(spec("z", 2, "bert-large"), arrival_seq=2)
    view = view_of(cluster, 0.0, [x, y], [z], perf=PerformanceModel())
    bad, looped, good = (on(("r0-n3", 1), ("r1-n0", 0)), on(("r0-n0", 1), ("r0-n1", 1)),
                         on(("r0-n1", 1), ("r1-n0", 0)))
    placement = CassiniPlacement(Offering([bad, looped, good]))
    free = view.free.copy()
    assert placement.candidates(view, z, 2, free, PassState()) == [good, bad, looped]
    assert placement.place(view, z, 2, free, PassState()) == good
    # without the compatible one, the loop is still never chosen
    assert CassiniPlacement(Offering([looped, bad])).place(view, z, 2, free, PassState()) == bad


def test_every_existing_preset_keeps_its_schedule_and_suffixes_compose():
    """The '+suffix' grammar: any preset with Cassini appended; unknown suffixes are named."""
    assert {"tiresias+cassini", "themis+cassini", "synergy-tune:srtf+cassini"} <= set(policy_names())
    policy = make_policy("dally+cassini")
    assert ("adjust", "cassini") in policy.stages()
    assert isinstance(policy.adjusters[-1], CassiniShifts)
    staged = make_policy("srtf+cassini")
    assert isinstance(staged.placement, CassiniPlacement)
    batch = make_policy("synergy-tune:srtf+cassini")
    assert not isinstance(batch.placement, CassiniPlacement)  # a batch placement: shifts only
    with pytest.raises(ValidationError, match="unknown augmentation 'nope'"):
        make_policy("tiresias+nope")


def test_shift_adjuster_keeps_grids_that_need_not_move():
    """Shifts change only with placements, and a component keeps the grid of a job already on one:
    when c joins a's and b's component later, a and b are not re-shifted."""
    jobs = [spec("a"), spec("b"), spec("c", gpus=1, iterations=10),
            JobSpec(job_id="d", submit_time=1.0, model="alexnet", num_gpus=1, iterations=50)]
    sim = run("fifo+cassini", jobs)
    shifts = [(e.time, e.job_id) for e in sim.core.log if e.kind is EventKind.TIME_SHIFT]
    assert shifts == [(0.0, "a"), (0.0, "b")]  # c and d sit on one node: no link, no shift


def test_mltcp_interleaves_without_a_scheduler():
    """MLTCP (thesis §1.2, Eq. 1.2; chapter 5): with each flow's share weighted by F(bytes_ratio) the
    two colliding alexnet jobs slide apart and finish faster than under fair sharing, with no
    time-shift from any policy; a job ahead by a few ms is enough to break the tie."""
    jobs = [spec("a"), JobSpec(job_id="b", submit_time=0.01, model="alexnet", num_gpus=3, iterations=2000)]
    times = {}
    for sharing in ("fair", "mltcp"):
        sim = Simulator(parse_cluster(TOML), make_policy("fifo"), PerformanceModel(contention=sharing))
        sim.run(jobs)
        times[sharing] = [jct(sim, j) for j in ("a", "b")]
        assert not [e for e in sim.core.log if e.kind is EventKind.TIME_SHIFT]
    assert all(m < 0.95 * f for m, f in zip(times["mltcp"], times["fair"], strict=True))


def test_link_sharing_is_selectable_per_run(tmp_path):
    """`--link-sharing fair|mltcp` (an alias of --contention) reaches the run's performance model."""
    import json
    import subprocess
    import sys

    out = {}
    for sharing in ("fair", "mltcp"):
        path = tmp_path / f"{sharing}.json"
        subprocess.run([sys.executable, "-m", "halyard.cli", "simulate", "--cluster", "dally-2rack",
                        "--policy", "fifo", "--link-sharing", sharing, "--no-progress", "--out", str(path)],
                       check=True, capture_output=True, timeout=120)
        out[sharing] = json.loads(path.read_text())
    assert out["fair"]["contention"] == "fair" and out["mltcp"]["contention"] == "mltcp"


def test_tiresias_offers_candidates_its_rule_allows():
    """For tiresias+cassini: Tiresias' skew placement offers its own choice first, then consolidated
    candidates -- any for a low-skew model, only those on the fewest machines for a high-skew one."""
    from halyard.policies.tiresias import SkewConsolidation, high_skew

    cluster = parse_cluster(small_cluster_toml(4, gpus_per_node=4))
    placement = SkewConsolidation()
    for model in ("resnet50", "vgg11"):
        job = FakeJob(spec("t", gpus=4, model=model))
        view = view_of(cluster, 0.0, [], [job], perf=PerformanceModel())
        free = view.free.copy()
        first = placement.place(view, job, 4, free, PassState())
        options = placement.candidates(view, job, 4, free, PassState(), 10)
        assert options[0] == first and len(options) > 1 and len(set(options)) == len(options)
        if high_skew(model):
            assert all(len(a.nodes) == 1 for a in options)
    assert high_skew("vgg11") and not high_skew("resnet50")
