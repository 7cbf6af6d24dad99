"""TUNE's round re-pack on lists (policies/synergy_lean.py) against the straightforward one on the Packer.

Issue 38 made the re-pack of Synergy-TUNE (§4.2, re-run over the runnable set at every round, §3) run on
plain lists with allocations built once per job at the end (``Tune.lean``, on by default). It must make
the same decisions: on drawn workloads of the synthetic Synergy generator (multi-GPU jobs, loads from
under to well over the cluster, FIFO and the preemptive LAS and SRTF orderings) both paths give the same
event log to the last bit, the same actions at every pass and the same reason for every waiting job.
"""

from __future__ import annotations

import pytest
from factories import record_plans

from halyard.datamodel import JobState, load_cluster
from halyard.policies import synergy_lean
from halyard.policies.ordering import ORDERINGS
from halyard.policies.staged import StagedPolicy
from halyard.policies.synergy import Tune
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces.generator import generate_synergy_trace


def _counted(counts: dict[str, int], name: str, inner):
    def counted(*args):
        counts[name] += 1
        return inner(*args)
    return counted


def _run(monkeypatch, ordering: str, jobs: int, rate: float, seed: int, *, lean: bool,
         cluster: str = "synergy-128"):
    drawn = generate_synergy_trace(jobs, rate_per_hour=rate, multi_gpu=True, seed=seed)
    mechanism = Tune(lean=lean)
    counts = {"lean": 0, "packer": 0, "pack_running": 0, "release": 0}
    for name, attr in (("lean", "repack_lean"), ("packer", "repack")):  # on the instance: Tune._mirrored holds
        setattr(mechanism, attr, _counted(counts, name, getattr(mechanism, attr)))
    policy = StagedPolicy(f"synergy-tune:{ordering}", ORDERINGS[ordering](), placement=mechanism)
    plans = record_plans(policy)
    for name in ("_pack_running", "_release"):  # the lean path's harder steps, looked up as module globals
        monkeypatch.setattr(synergy_lean, name, _counted(counts, name.strip("_"), getattr(synergy_lean, name)))
    sim = Simulator(load_cluster(cluster), policy, performance_model_for(policy, contention="fair"))
    sim.core.keep_promises = False  # (only the lean path promises, Plan.settles: every pass's plan compares here;
    # the skip is held to the events and reasons in tests/test_synergy_settled_repack.py)
    sim.run(drawn, until=(jobs - 100, jobs - 99))  # stopped with jobs waiting, so their reasons compare too
    core = sim.core
    log = [(e.seq, repr(e.time), e.job_id, e.kind, e.state, e.detail) for e in core.log]
    waits = {r.job_id: core.wait_of(r) for r in core.records.values() if r.state is JobState.PENDING}
    return counts, log, plans, waits


@pytest.mark.parametrize(("ordering", "jobs", "rate", "seed", "cluster"), [
    ("fifo", 400, 5.0, 1, "synergy-128"),
    ("fifo", 400, 9.0, 2, "synergy-128"),
    ("fifo", 300, 12.0, 3, "synergy-128"),
    ("las", 300, 5.0, 4, "synergy-128"),
    ("srtf", 300, 6.0, 5, "synergy-128"),
    ("fifo", 300, 3.0, 6, "default"),  # 8 servers in 2 racks: jobs spread over servers and racks
    ("las", 200, 2.0, 7, "synergy-32"),
])
def test_lean_repack_logs_what_the_packer_logs(monkeypatch, ordering, jobs, rate, seed, cluster):
    with monkeypatch.context() as patched:
        lean, lean_log, lean_plans, lean_waits = _run(patched, ordering, jobs, rate, seed, lean=True, cluster=cluster)
    full, full_log, full_plans, full_waits = _run(monkeypatch, ordering, jobs, rate, seed, lean=False,
                                                  cluster=cluster)
    assert lean_log == full_log
    assert lean_plans == full_plans  # the same actions at every pass, the same reasons
    assert lean_waits == full_waits
    assert lean["lean"] > 50 and lean["packer"] == 0  # the lean path ran, and only it
    # (the lean path also leaves out re-packs certified settled, which the Packer path runs to no change:
    # tests/test_synergy_settled_repack.py)
    assert full["lean"] == 0 and full["packer"] >= lean["lean"]
    assert sum(len(actions) for _, actions, _ in lean_plans) > jobs // 2
    # the runs take the re-pack's harder steps too: running jobs that do not fit their demand in place
    # (moved, or set to their share reverting others), new jobs placed at their share
    assert lean["pack_running"] > 0 and lean["release"] > 0


def test_a_subclass_that_overrides_a_mirrored_step_runs_the_packer_path():
    """The lean path mirrors Tune's own steps: a subclass that changes one (tests/test_synergy_renewal.py's
    counting TUNE overrides _renewing) must get the Packer path, which calls it."""

    class Own(Tune):
        @staticmethod
        def _renewing(view, packer, runnable, vector):
            return Tune._renewing(view, packer, runnable, vector)

    assert Tune()._mirrored() and not Own()._mirrored()
    assert not Tune(replace=False)._mirrored() and not Tune(raise_back=True)._mirrored()


def _renewing_by_rounds(lp, runnable, cap_c, cap_m, dem_c, dem_m, held):
    """Tune._renewing's closure as it reads (a job that spans an open server opens the others it spans,
    round after round until none does): what synergy_lean._renewing's one walk must equal, with the servers
    it opens (None when it opens every one)."""
    n = len(cap_c)
    opened = {i for i in range(n) if dem_c[i] > cap_c[i] or dem_m[i] > cap_m[i]}
    if opened or len(held) < runnable:
        opened.update(i for i, g in enumerate(lp.g) if g > 0)
    spanning = [set(h[1]) for h in held if len(h[1]) > 1]
    grew = True
    while grew:
        grew = False
        for span in spanning:
            if not span <= opened and not span.isdisjoint(opened):
                opened |= span
                grew = True
    renewing = {h[0] for h in held if opened.isdisjoint(h[1])}
    return (renewing, [(h[0], (h[3], h[4])) for h in held if h[0] in renewing and not h[2]],
            None if len(opened) == n else opened)


def test_the_lean_steps_shortcuts_answer_what_the_plain_steps_answer(monkeypatch):
    """Issue 38: ``LeanPack.reshape_demand`` (a job on several servers back to its demand without building
    lists) against ``reshape_at(DEMAND)`` from the same state, and ``_renewing``'s one-walk closure against
    the closure round by round, on every call of a drawn FIFO run that spans servers."""
    seen = {"reshape": 0, "refused": 0, "renewing": 0, "some_renew": 0}
    fast_reshape, fast_renewing = synergy_lean.LeanPack.reshape_demand, synergy_lean._renewing

    def reshape_checked(lp, j, c, m):
        job_id = next(k for k, held in lp.jobs.items() if held is j)
        before = (list(lp.c), list(lp.m), list(j.cs), list(j.ms))
        got = fast_reshape(lp, j, c, m)
        after = (list(lp.c), list(lp.m), list(j.cs), list(j.ms))
        lp.c[:], lp.m[:], j.cs[:], j.ms[:] = before  # (in place: the re-pack holds these lists)
        assert lp.reshape_at(job_id, synergy_lean.DEMAND, c, m) == got
        assert (lp.c, lp.m, j.cs, j.ms) == after
        seen["reshape"] += 1
        seen["refused"] += not got
        return got

    def renewing_checked(lp, runnable, cap_c, cap_m, dem_c, dem_m, held, spans):
        assert spans == [h[1] for h in held if len(h[1]) > 1]
        got = fast_renewing(lp, runnable, cap_c, cap_m, dem_c, dem_m, held, spans)
        assert got == _renewing_by_rounds(lp, runnable, cap_c, cap_m, dem_c, dem_m, held)
        seen["renewing"] += 1
        seen["some_renew"] += bool(got[0])
        return got

    monkeypatch.setattr(synergy_lean.LeanPack, "reshape_demand", reshape_checked)
    monkeypatch.setattr(synergy_lean, "_renewing", renewing_checked)
    _run(monkeypatch, "fifo", 400, 9.0, 2, lean=True)
    assert seen["reshape"] > 1_000 and seen["refused"] > 0  # both answers, many times
    assert seen["renewing"] > 100 and 0 < seen["some_renew"] < seen["renewing"]
