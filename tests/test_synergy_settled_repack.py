"""TUNE's settled re-packs (issue 38: skip passes that cannot change the plan; policies/synergy_lean.py,
"Settled re-packs"). A round re-pack that changed something certifies as it runs that re-packing what it
leaves would change nothing, and ``Tune.place_all`` answers the next round handed exactly that (the same
runnable jobs where the re-pack put them, the same free resources) without running it.

The certificate is an argument about the re-pack's steps, so it is held to the re-pack itself on drawn
workloads: with ``Tune.verify_settled`` every certified re-pack runs anyway and a change fails the run, and
a run that skips them logs the same events and reasons. Re-packing is not idempotent in general (a re-pack
of what one left can move jobs: certifying every re-pack fails the first two workloads below), and the
certificate's move rule (``LeanPack.freed``) is needed on two of them. The pass after a settled re-pack is
skipped by the core on the plan's promise (``Plan.settles``), held the same way (``verify_promises``).
"""

from __future__ import annotations

import pytest

from halyard.datamodel import JobState, load_cluster
from halyard.policies import synergy_lean
from halyard.policies.ordering import ORDERINGS
from halyard.policies.staged import StagedPolicy
from halyard.policies.synergy import Tune, _RepackInputs
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces.generator import generate_synergy_trace


class _Counting(Tune):
    """TUNE that counts the re-packs it runs and, checking them, the certified ones among them."""

    def __init__(self, *, verify: bool) -> None:
        super().__init__()
        self.verify_settled = verify
        self.repacks = self.certified = self.skipped = 0

    def repack_lean(self, *args, **kwargs):
        self.repacks += 1
        return super().repack_lean(*args, **kwargs)

    def _place_lean(self, *args, **kwargs):
        self.certified += self._unchanged is not None  # (set before the re-pack only for a certified round)
        return super()._place_lean(*args, **kwargs)


def _run(ordering: str, jobs: int, rate: float, seed: int, cluster: str, *, verify: bool, promises: bool = True,
         verify_promises: bool = False):
    mechanism = _Counting(verify=verify)
    policy = StagedPolicy(f"synergy-tune:{ordering}", ORDERINGS[ordering](), placement=mechanism)
    sim = Simulator(load_cluster(cluster), policy, performance_model_for(policy, contention="fair"))
    sim.core.keep_promises, sim.core.verify_promises = promises, verify_promises
    sim.run(generate_synergy_trace(jobs, rate_per_hour=rate, multi_gpu=True, seed=seed),
            until=(jobs - 50, jobs - 49))  # stopped early: the jobs still waiting then compare their reasons too
    core = sim.core
    log = [(e.seq, repr(e.time), e.job_id, e.kind, e.state, e.detail) for e in core.log]
    waits = {r.job_id: core.wait_of(r) for r in core.records.values() if r.state is JobState.PENDING}
    mechanism.skipped = core.skipped_passes
    return mechanism, log, waits


WORKLOADS = [  # (ordering, jobs, jobs per hour, seed, cluster): FIFO and the preemptive LAS and SRTF, 4-128 servers
    ("las", 250, 1.37, 888, "synergy-32"),
    ("las", 250, 3.62, 261, "default"),
    ("fifo", 400, 9.0, 2, "synergy-128"),
    ("srtf", 200, 3.0, 9, "synergy-32"),
    ("fifo", 250, 3.58, 880, "synergy-32"),
    ("fifo", 250, 4.36, 465, "default"),
]


@pytest.mark.parametrize(("ordering", "jobs", "rate", "seed", "cluster"), WORKLOADS)
def test_a_certified_repack_changes_nothing_and_skipping_it_changes_no_event(ordering, jobs, rate, seed, cluster):
    checked, checked_log, checked_waits = _run(ordering, jobs, rate, seed, cluster, verify=True)
    fast, fast_log, fast_waits = _run(ordering, jobs, rate, seed, cluster, verify=False)
    assert checked.certified > 0  # ... and every one ran to no change (Tune.place_all raises otherwise)
    assert fast_log == checked_log and fast_waits == checked_waits
    assert fast.repacks == checked.repacks - checked.certified  # each left out when not checked


@pytest.mark.parametrize("certify", ["every re-pack", "moves freeing nothing"])
@pytest.mark.parametrize(("ordering", "jobs", "rate", "seed", "cluster"), WORKLOADS[:2])
def test_a_weaker_certificate_certifies_a_repack_that_changes_the_plan(monkeypatch, certify, ordering, jobs, rate,
                                                                       seed, cluster):
    """The certificate's conditions are needed: certifying every re-pack, or ignoring the GPUs a move frees for
    an earlier failed select, lets a re-pack of what one left move a job on these workloads."""
    if certify == "every re-pack":
        monkeypatch.setattr(synergy_lean, "_opens_within", lambda *args: True)
        repack = synergy_lean.repack

        def always_settled(tune, view, lp, *args):
            repack(tune, view, lp, *args)
            lp.settled = True
        monkeypatch.setattr("halyard.policies.synergy.lean_repack", always_settled)
    else:
        monkeypatch.setattr(synergy_lean.LeanPack, "freed", lambda self, j: True)
    with pytest.raises(AssertionError, match="certified settled changed the plan"):
        _run(ordering, jobs, rate, seed, cluster, verify=True)


def test_a_refused_plan_certifies_nothing():
    """A pass the core refused leaves nothing for the next re-pack to take on trust."""
    tune = Tune()
    tune._settled = tune._unchanged = object()  # type: ignore[assignment]
    tune.on_rejected(None, None, None)  # type: ignore[arg-type]
    assert tune._settled is None and tune._unchanged is None


@pytest.mark.parametrize(("ordering", "jobs", "rate", "seed", "cluster"), WORKLOADS)
def test_a_promised_pass_changes_nothing_and_skipping_it_changes_no_event(ordering, jobs, rate, seed, cluster):
    """Plan.settles: a pass whose re-pack is certified settled, and whose walk finds the same runnable jobs on
    the state it leaves (FIFO's arrival order), promises the next pass plans nothing and tells the same reasons;
    the core skips that pass. Run anyway (``verify_promises``), each such pass keeps the promise; skipped, the
    run logs the same events and reasons. LAS and SRTF rank a job otherwise once it runs: no promise."""
    checked, checked_log, checked_waits = _run(ordering, jobs, rate, seed, cluster, verify=False,
                                               verify_promises=True)
    kept, kept_log, kept_waits = _run(ordering, jobs, rate, seed, cluster, verify=False)
    plain, plain_log, plain_waits = _run(ordering, jobs, rate, seed, cluster, verify=False, promises=False)
    assert kept_log == plain_log == checked_log and kept_waits == plain_waits == checked_waits
    assert checked.skipped == plain.skipped
    if ordering == "fifo":
        assert kept.skipped > plain.skipped  # the promised passes (each run and held to it when checked)
    else:
        assert kept.skipped == plain.skipped


def test_a_promise_after_a_repack_not_certified_settled_is_broken(monkeypatch):
    """The re-pack's part of the promise is needed: promised after every re-pack that acted, a promised pass
    plans or tells something on the FIFO workload of the public configuration's cluster."""
    place_lean = Tune._place_lean

    def promising(self, view, runnable, new, plan, free):
        settled = place_lean(self, view, runnable, new, plan, free)
        return settled if settled is not None or not plan.actions else _RepackInputs((), [], (), 0, ())
    monkeypatch.setattr(Tune, "_place_lean", promising)
    with pytest.raises(AssertionError, match="promised to leave as it was changed something"):
        _run(*WORKLOADS[2], verify=False, verify_promises=True)
