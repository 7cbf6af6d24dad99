"""Issue 14's Done-when: ``halyard simulate --cluster crius-1280 --policy crius`` and ``halyard replay``
give the same schedule. The bundled Philly sample's first arrivals, adapted by §8.1's rule (Table 2's
models at N_G = 16, elastic ``N_G/2 .. 2 N_G``), run on the 1,280-GPU Table 1 cluster through the in-process
simulator and through the real control plane over gRPC (420 emulated agents); the event logs agree
event by event (kind, job, state, placement detail, order, time)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from test_fidelity_all import ROUND_S, TIME_TOLERANCE_S, first_difference

from halyard.datamodel import EventKind, load_cluster, read_cluster_text
from halyard.emulator import PerformanceModel
from halyard.experiments.replay import replay
from halyard.policies import make_policy
from halyard.scheduling import Simulator
from halyard.traces import adapt_for_crius, read_philly

SAMPLE = Path(__file__).resolve().parents[1] / "src/halyard/data/traces/philly_sample.csv"
JOBS = 48
GPUS = (16,)  # N_G = 16 (elastic 8..32): 48 jobs ask for more than the 1,280 GPUs, so Crius scales Cells
ARRIVALS = 0.01  # arrivals 100x denser than the sample's (about 40 minutes)
RUNS = 0.05  # runs 20x shorter: about an hour of cluster time, so the replay stays short
# Slower than test_fidelity_all's 50,000x (about 9 s of wall clock): with 420 agents on a starved machine a
# completion before an arrival missed LOCKSTEP_WAIT_S at 10,000x and 50,000x and was applied after it.
SPEEDUP = 10_000.0


def burst() -> list:
    jobs = sorted(read_philly(SAMPLE).jobs, key=lambda j: j.submit_time)[:JOBS]
    t0 = jobs[0].submit_time
    return adapt_for_crius([replace(j, submit_time=(j.submit_time - t0) * ARRIVALS, duration_s=j.duration_s * RUNS)
                            for j in jobs], seed=0, gpu_choices=GPUS)


async def test_crius_on_crius_1280_replays_its_simulated_schedule():
    jobs = burst()
    cluster = load_cluster("crius-1280")
    sim = Simulator(cluster, make_policy("crius"), PerformanceModel(), round_s=ROUND_S)
    sim.run(jobs)
    want = list(sim.core.log)
    assert sum(e.kind is EventKind.COMPLETED for e in want) == len(jobs)
    assert any(e.kind in (EventKind.MIGRATED, EventKind.RESIZED) for e in want)  # Cells move or change size
    text, _ = read_cluster_text("crius-1280")
    run = await replay(jobs, cluster, text, policy="crius", speedup=SPEEDUP, round_s=ROUND_S)
    got = list(run.core.log)
    origin = got[0].time - want[0].time  # 0 unless the agents registered late: then whole rounds later
    assert abs(origin - round(origin / ROUND_S) * ROUND_S) <= TIME_TOLERANCE_S, f"replay began {origin} s off"
    assert first_difference(want, got, origin) is None, first_difference(want, got, origin)
