"""The Cassini thesis' dynamic trace (§4.5.1 (ii), §4.5.3): a busy cluster, then a set of jobs arrives together.

    .venv/bin/python benchmarks/cassini_dynamic.py [--seeds 1-10] [--mix table-4.3-matched]

§4.5.1: "dynamic trace where a set of DNN training jobs are present in the cluster, and a new
set of jobs arrive"; §4.5.3 triggers "the arrival of DLRM and ResNet50 to the cluster while the
cluster is busy running other jobs" (DLRM is not modelled here, so both sets are drawn from the
mix). Per seed: jobs drawn as in reproduce_cassini.py's Poisson trace (model, 1-12 GPUs, batch,
200-1,000 iterations) fill ``BUSY_GPUS`` of the 24 GPUs at time 0; the next draws that fit the
GPUs left arrive together at ``ARRIVAL_S``, so their auction round has several winners (where
``+cassini-joint``'s cluster-wide candidates can differ from per-job ones). Prints, per scheme,
the average and p99 of the jobs' mean iteration times (all jobs, and the arriving set alone),
and Themis' figure over the scheme's. Not part of the tests; its figures are typed into
docs/reproductions/cassini-reproduction.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reproduce_cassini import CLUSTER, MIXES, poisson_trace

from halyard.datamodel import JobSpec, load_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.scheduling import Simulator

BUSY_GPUS = 16  # ours: "busy" read as two thirds of the 24 GPUs held when the new set arrives
ARRIVAL_S = 60.0  # ours: the new set arrives a minute in, inside the busy jobs' first 10-minute lease
POOL = 40  # jobs drawn per seed to fill both sets from
BOOTSTRAP = 1000  # resamples of the seeds for the printed intervals
SCHEMES = {"Themis": ("themis", "fair"), "Th+Cassini": ("themis+cassini", "fair"),
           "Th+Cassini-joint": ("themis+cassini-joint", "fair"), "Ideal": ("themis", "off")}


def dynamic_trace(seed: int, pm: PerformanceModel, cluster, mix: str) -> tuple[list[JobSpec], set[str]]:
    """The busy set at 0 and the arriving set at ``ARRIVAL_S`` (its job ids returned too)."""
    pool = poisson_trace(POOL, 1.0, seed, pm, cluster, mix)
    jobs, arriving, held = [], set(), 0
    for j in pool:
        if held < BUSY_GPUS:
            if held + j.num_gpus <= cluster.total_gpus:
                jobs.append(JobSpec(job_id=j.job_id, submit_time=0.0, model=j.model, batch_size=j.batch_size,
                                    num_gpus=j.num_gpus, iterations=j.iterations, parallelism=j.parallelism))
                held += j.num_gpus
        elif held + j.num_gpus <= cluster.total_gpus:
            jobs.append(JobSpec(job_id=j.job_id, submit_time=ARRIVAL_S, model=j.model, batch_size=j.batch_size,
                                num_gpus=j.num_gpus, iterations=j.iterations, parallelism=j.parallelism))
            arriving.add(j.job_id)
            held += j.num_gpus
    return jobs, arriving


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1-10", help="first-last")
    parser.add_argument("--mix", choices=sorted(MIXES), default="table-4.3-matched")
    args = parser.parse_args()
    first, last = (int(x) for x in args.seeds.split("-"))
    cluster, pm = load_cluster(CLUSTER), PerformanceModel()
    traces = [dynamic_trace(s, pm, cluster, args.mix) for s in range(first, last + 1)]
    arrivals = [len(a) for _, a in traces]
    print(f"{len(traces)} seeds, mix {args.mix}: {sum(len(t) for t, _ in traces)} jobs, arriving sets of "
          f"{min(arrivals)}-{max(arrivals)} jobs (mean {np.mean(arrivals):.1f})\n")
    rows, per_seed = {}, {}
    for label, (policy, contention) in SCHEMES.items():
        every, new, seeds = [], [], []
        for jobs, arriving in traces:
            sim = Simulator(cluster, make_policy(policy), PerformanceModel(contention=contention))
            sim.run(jobs)
            mine = []
            for r in sim.core.records.values():
                if r.end_time is not None:
                    it = r.run_time_s(r.end_time) / r.spec.iterations
                    mine.append(it)
                    if r.spec.job_id in arriving:
                        new.append(it)
            every += mine
            seeds.append(np.array(mine))
        rows[label] = [float(np.mean(every)), float(np.percentile(every, 99)),
                       float(np.mean(new)), float(np.percentile(new, 99))]
        per_seed[label] = seeds
    print("| scheme | avg iter (ms) | p99 iter (ms) | arriving set: avg / p99 (ms) | Themis / scheme: avg / p99, "
          "arriving avg / p99 |")
    print("| --- | --- | --- | --- | --- |")
    th = rows["Themis"]
    for label, r in rows.items():
        ratios = " / ".join(f"{a / b:.2f}x" for a, b in zip(th, r, strict=True))
        print(f"| {label} | {r[0] * 1e3:.0f} | {r[1] * 1e3:.0f} | {r[2] * 1e3:.0f} / {r[3] * 1e3:.0f} | {ratios} |")
    print(f"\n95% interval over seeds (bootstrap, {BOOTSTRAP} resamples of the seeds), Themis / scheme, all jobs:")
    rng = np.random.default_rng(0)
    draws = [rng.integers(len(traces), size=len(traces)) for _ in range(BOOTSTRAP)]
    for label in SCHEMES:
        if label == "Themis":
            continue
        avg, p99 = [], []
        for idx in draws:
            th = np.concatenate([per_seed["Themis"][i] for i in idx])
            sc = np.concatenate([per_seed[label][i] for i in idx])
            avg.append(th.mean() / sc.mean())
            p99.append(np.percentile(th, 99) / np.percentile(sc, 99))
        lo_a, hi_a = np.percentile(avg, [2.5, 97.5])
        lo_p, hi_p = np.percentile(p99, [2.5, 97.5])
        print(f"  {label}: avg [{lo_a:.2f}x, {hi_a:.2f}x], p99 [{lo_p:.2f}x, {hi_p:.2f}x]")


if __name__ == "__main__":
    main()
