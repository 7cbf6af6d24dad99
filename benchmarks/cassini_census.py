"""Where Cassini's gain goes: a census of the fabric's links during the Poisson runs of reproduce_cassini.py.

    .venv/bin/python benchmarks/cassini_census.py [--loads 0.8,1.0] [--seeds 1,2,3] [--mix table-4.2]

Writes the mix's entry of ``cassini-census.json`` (the other mixes' kept) and renders
``cassini-census-table.md`` and the page's census block from it (reproduce_cassini.py's ``pages``).

For each scheme (Themis, Th+Cassini, -lock, -joint, Random) and load, one simulation per seed is run and the
fabric is read after every change of its links (the pacer's update), each state weighted by
the time it lasts. It reports, over the running jobs' time:

* how much of it jobs span nodes at all (a one-GPU server's job has no link), cross a link
  shared with another job, cross a *contended* link (the jobs' peak demands exceed its
  capacity: the only links where phases matter) and cross one with more than
  ``FLUID_MAX_JOBS`` jobs (the fabric's phase-blind mean-field limit);
* the job-time-weighted mean slowdown (contended over dedicated iteration);
* per contended link (link-time weighted): Table 4.1's best score for its jobs (what
  Cassini plans), and the mean slowdown of its jobs as the fabric charges it (realised),
  with the planned shifts (``solve_link``'s, fluid model from those shifts), and with
  every job's Up phase aligned (all shifts 0: the worst phase-blind placement).

The phases the fabric uses are read from it (its ``link_census``). Not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reproduce_cassini import CENSUS_JSON, CLUSTER, MIXES, ROOT, census_row, pages, poisson_trace

from halyard.datamodel import JobState, load_cluster
from halyard.emulator import PerformanceModel
from halyard.emulator.contention import mean_field_iteration_times, shared_link_iteration_times
from halyard.emulator.fabric import FLUID_MAX_JOBS, SIM_ITERATIONS, SIM_STEADY
from halyard.policies import make_policy
from halyard.policies.cassini_math import AffinityGraph, link_score, solve_link
from halyard.scheduling import Simulator

SCHEMES = {"Themis": "themis", "Th+Cassini": "themis+cassini", "Th+Cassini-lock": "themis+cassini-lock",
           "Th+Cassini-joint": "themis+cassini-joint", "Random": "random"}


class Census:
    """Time-weighted tallies of the fabric's states (see the module doc)."""

    def __init__(self) -> None:
        self.job_s = defaultdict(float)  # category -> job-seconds
        self.link_s = defaultdict(float)  # jobs on a contended link (2, 3, 4, '>4') -> link-seconds
        self.slow_job_s = 0.0  # sum of slowdown x job-seconds
        self.planned = defaultdict(float)  # 'score', 'realised', 'planned', 'aligned', 'n' x link-seconds
        # (trace, job id): traces reuse job ids (j000, j001, ...), so the ids alone undercount over several seeds
        self.trace = 0
        self.contended_jobs: set[tuple[int, str]] = set()
        self.spanning_jobs: set[tuple[int, str]] = set()
        self._memo: dict[object, tuple[float, ...]] = {}

    def _link_figures(self, profiles, capacity, realised):
        key = (capacity, tuple(tuple((p.duration_s, p.demand_gbyte_s) for p in pr.phases) for pr in profiles))
        hit = self._memo.get(key)
        if hit is None:
            sol = solve_link(profiles, capacity)
            if len(profiles) > FLUID_MAX_JOBS:
                planned = aligned = float(np.mean([t / p.iteration_s for t, p in zip(
                    mean_field_iteration_times(profiles, capacity), profiles, strict=True)]))
            else:
                def mean_slowdown(shifts):
                    times = shared_link_iteration_times(profiles, capacity, time_shifts_s=shifts,
                                                        iterations=SIM_ITERATIONS, steady=SIM_STEADY).iteration_s
                    return float(np.mean([t / p.iteration_s for t, p in zip(times, profiles, strict=True)]))
                planned, aligned = mean_slowdown(sol.shifts_s), mean_slowdown([0.0] * len(profiles))
            spread = max(p.iteration_s for p in profiles) / min(p.iteration_s for p in profiles)
            within = (float(spread <= 1.01), float(spread <= 1.10))
            hit = self._memo[key] = (sol.score, link_score(profiles, capacity, [0.0] * len(profiles)), planned,
                                     aligned, within)
        return hit

    def record(self, sim: Simulator, dt: float) -> None:
        if dt <= 0.0:
            return
        fabric = sim.pool.pacer.fabric
        running = [r for r in sim.core.records.values() if r.state is JobState.RUNNING]
        self.job_s["running"] += dt * len(running)
        on_fabric = {r.job_id for r in running if len(r.allocation.nodes) > 1}
        self.job_s["spans nodes"] += dt * len(on_fabric)
        self.spanning_jobs |= {(self.trace, j) for j in on_fabric}
        shared, contended, mean_field = set(), set(), set()
        census = fabric.link_census()
        crossing: dict[str, list[object]] = defaultdict(list)
        same: dict[tuple[str, ...], list[object]] = defaultdict(list)  # links carrying the same jobs
        for link, jobs, *_ in census:
            if len(jobs) > 1:
                same[jobs].append(link)
                for j in jobs:
                    crossing[j].append(link)
        if AffinityGraph.of(crossing).has_loop():
            self.job_s["graph has a loop"] += dt
            merged = {j: {same[tuple(sorted(k for k in crossing if link in crossing[k]))][0] for link in links}
                      for j, links in crossing.items()}
            if AffinityGraph.of(merged).has_loop():
                self.job_s["graph has a loop, same-job links merged"] += dt
        self.job_s["time"] += dt
        for link, jobs, profiles, slowdowns, phases in census:
            if len(jobs) < 2:
                continue
            shared |= set(jobs)
            if sum(max(p.demand_gbyte_s for p in pr.phases) for pr in profiles) <= link.capacity_gbyte_s:
                continue
            contended |= set(jobs)
            n = len(jobs)
            self.link_s[str(n) if n <= FLUID_MAX_JOBS else f">{FLUID_MAX_JOBS}"] += dt
            if n > FLUID_MAX_JOBS:
                mean_field |= set(jobs)
            score, score0, planned, aligned, within = self._link_figures(profiles, link.capacity_gbyte_s, slowdowns)
            self.planned["score"] += dt * score
            self.planned["score0"] += dt * score0
            self.planned["score at phases"] += dt * link_score(profiles, link.capacity_gbyte_s, phases)
            self.planned["within 1%"] += dt * within[0]
            self.planned["within 10%"] += dt * within[1]
            self.planned["realised"] += dt * float(np.mean(slowdowns))
            self.planned["planned"] += dt * planned
            self.planned["aligned"] += dt * aligned
            self.planned["n"] += dt
        self.job_s["on a shared link"] += dt * len(shared)
        self.job_s["on a contended link"] += dt * len(contended)
        self.job_s[f"on a link of >{FLUID_MAX_JOBS} jobs (contended)"] += dt * len(mean_field)
        self.contended_jobs |= {(self.trace, j) for j in contended}
        self.slow_job_s += dt * sum(fabric.slowdown(r.job_id) for r in running)


def run(traces, cluster, policy: str, measured_up_demand: dict[str, float] | None = None) -> tuple[Census, int]:
    """The census of ``policy`` over ``traces`` under fair sharing (``measured_up_demand``: PerformanceModel's)."""
    census = Census()
    jobs = 0
    for i, trace in enumerate(traces):
        census.trace = i
        sim = Simulator(cluster, make_policy(policy),
                        PerformanceModel(contention="fair", measured_up_demand=measured_up_demand))
        pacer = sim.pool.pacer
        update = pacer.update
        last = [0.0]

        def timed(actions, now, update=update, sim=sim, last=last):
            census.record(sim, now - last[0])  # the state since the previous update lasted until now
            last[0] = now
            return update(actions, now)

        pacer.update = timed
        sim.run(trace)
        jobs += len(trace)
    return census, jobs


def figures(c: Census, jobs: int) -> dict[str, object]:
    """One scheme's census as the JSON stores it: fractions of the running jobs' time, per-contended-link
    means (link-time weighted), and the share of contended link-time by jobs on the link."""
    run_s, time_s = c.job_s["running"] or 1.0, c.job_s["time"] or 1.0
    frac = {k: v / run_s for k, v in c.job_s.items()}
    total_link = sum(c.link_s.values()) or 1.0
    p = {k: v / (c.planned["n"] or 1.0) for k, v in c.planned.items()}
    return {"spans_nodes": frac.get("spans nodes", 0.0), "shared": frac.get("on a shared link", 0.0),
            "contended": frac.get("on a contended link", 0.0),
            "mean_field": frac.get(f"on a link of >{FLUID_MAX_JOBS} jobs (contended)", 0.0),
            "jobs_contended": len(c.contended_jobs), "jobs": jobs, "mean_slowdown": c.slow_job_s / run_s,
            "loop": c.job_s["graph has a loop"] / time_s,
            "loop_merged": c.job_s["graph has a loop, same-job links merged"] / time_s,
            "by_jobs": [c.link_s.get(k, 0.0) / total_link for k in ("2", "3", "4", f">{FLUID_MAX_JOBS}")],
            **{k: p.get(k, 0.0) for k in ("score", "score0", "score at phases", "within 1%", "within 10%",
                                          "realised", "planned", "aligned")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--loads", default="0.8,1.0")
    parser.add_argument("--mix", choices=sorted(MIXES), default="table-4.2")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "reproductions")
    args = parser.parse_args()
    cluster = load_cluster(CLUSTER)
    pm = PerformanceModel()
    loads: dict[str, dict[str, dict]] = {}
    for load in (float(x) for x in args.loads.split(",")):
        traces = [poisson_trace(args.jobs, load, int(s), pm, cluster, args.mix) for s in args.seeds.split(",")]
        loads[f"{load:.0%}"] = {}
        for label, policy in SCHEMES.items():
            loads[f"{load:.0%}"][label] = figures(*run(traces, cluster, policy))
            print(census_row(args.mix, f"{load:.0%}", label, loads[f"{load:.0%}"][label]), flush=True)
    path = args.out / CENSUS_JSON
    stored = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"mixes": {}}
    stored["mixes"][args.mix] = {"jobs": args.jobs, "seeds": args.seeds, "loads": loads}
    path.write_text(json.dumps(stored, indent=1) + "\n", encoding="utf-8")
    for page, text in pages(args.out).items():
        page.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
