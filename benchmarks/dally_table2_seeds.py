"""Dally Table 2 (auto-tuner vs manual timers) over many drawn workloads, with a confidence interval.

    .venv/bin/python benchmarks/dally_table2_seeds.py --seeds 1-20 [--racks 8] [--arrival batch]

One run of the reproduction's workload (benchmarks/reproduce_dally.py: Table 1 profile, no
contention, 300 s rounds) gives Dally-manual / Dally average JCT anywhere from 0.64 to 1.66, so
this runs ``dally-literal`` and ``dally-manual-literal`` (the paper's text, whose 30-seed interval
docs/reproductions/dally-reproduction.md reports) on seeds 1..N and reports, per seed, the ratio and where
the difference comes from, then the mean ratio with a 95 % Student-t confidence interval, the
ratio of the pooled means, and a sign test against "no difference" (Table 2: 1.11, the tuner ahead).

Mechanism columns: ``top10`` is the share of the difference in summed JCT that the 10 jobs whose
JCT differs most make (a handful of jobs decide a run when it is near 1); ``net`` counts the jobs
each policy started across racks (the paper's Dally never moves a running job, so a cross-rack
start of a communication-heavy model runs at its Table 1 network overhead to the end).
"""

from __future__ import annotations

import argparse
import math
import statistics

from reproduce_dally import BATCH_JOBS, CATALOG, POISSON_JOBS, POISSON_PER_DAY, ROUND_S, dally_trace
from scipy import stats

from halyard.datamodel import load_cluster
from halyard.emulator import PerformanceModel, load_model_catalog
from halyard.policies import make_policy
from halyard.policies.dally_pass import allocation_level
from halyard.policies.plan import Start
from halyard.scheduling import Simulator

PAPER_RATIO = 3128566 / 2828955  # Table 2, 8 racks, batch: Dally-manual / Dally average JCT (1.11)
CONFIDENCE = 0.95
TOP_JOBS = 10  # jobs whose JCT differs most, for the "a handful decides" share


def run(policy_name: str, racks: int, seed: int, arrival: str) -> tuple[dict[str, float], dict[str, str], dict]:
    """Per-job JCT (s), the consolidation level of each job's first start, and the job specs."""
    policy = make_policy(policy_name)
    level: dict[str, str] = {}
    schedule = policy.schedule

    def observed(view, state):
        plan = schedule(view, state)
        for action in plan.actions:
            if isinstance(action, Start):
                level.setdefault(action.job_id, allocation_level(action.allocation, view.cluster).name.lower())
        return plan

    policy.schedule = observed
    jobs = (dally_trace(BATCH_JOBS, seed=seed, poisson_per_day=None) if arrival == "batch"
            else dally_trace(POISSON_JOBS, seed=seed + 1, poisson_per_day=POISSON_PER_DAY))
    sim = Simulator(load_cluster(f"dally-{racks}rack"), policy,
                    PerformanceModel(load_model_catalog(CATALOG), contention="off"), round_s=ROUND_S)
    sim.run(jobs)
    records = sim.core.records.values()
    return {r.job_id: r.end_time - r.spec.submit_time for r in records}, level, {r.job_id: r.spec for r in records}


def seeds(text: str) -> list[int]:
    """``1-20`` or ``1,2,5``."""
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-"))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",")]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=seeds, default=seeds("1-20"))
    p.add_argument("--racks", type=int, default=8)
    p.add_argument("--arrival", choices=("batch", "poisson"), default="batch")
    p.add_argument("--show", type=int, default=3, help="jobs whose JCT differs most to print per seed "
                   "(model x GPUs, first-start level dally/manual, JCT dally/manual)")
    args = p.parse_args()
    ratios, tuned_means, manual_means = [], [], []
    print("seed  manual/dally  dally d  manual d  top10  net dally/manual  jobs differing most")
    for seed in args.seeds:
        tuned, tuned_level, spec = run("dally-literal", args.racks, seed, args.arrival)
        manual, manual_level, _ = run("dally-manual-literal", args.racks, seed, args.arrival)
        t_mean, m_mean = statistics.mean(tuned.values()), statistics.mean(manual.values())
        order = sorted(tuned, key=lambda j: abs(manual[j] - tuned[j]), reverse=True)
        total = sum(manual[j] - tuned[j] for j in order)
        top = sum(manual[j] - tuned[j] for j in order[:TOP_JOBS]) / total if total else math.nan
        net = (sum(v == "network" for v in tuned_level.values()), sum(v == "network" for v in manual_level.values()))
        ratios.append(m_mean / t_mean)
        tuned_means.append(t_mean)
        manual_means.append(m_mean)
        print(f"{seed:4d}  {ratios[-1]:12.2f}  {t_mean / 86400:7.2f}  {m_mean / 86400:8.2f}  {top:5.2f}  "
              f"{net[0]:3d}/{net[1]}  " + "; ".join(
                  f"{spec[j].model} x{spec[j].num_gpus} {tuned_level.get(j, '-')}/{manual_level.get(j, '-')} "
                  f"{tuned[j] / 86400:.0f}/{manual[j] / 86400:.0f} d" for j in order[:args.show]), flush=True)
    n = len(ratios)
    mean = statistics.mean(ratios)
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * statistics.stdev(ratios) / math.sqrt(n) if n > 1 else math.nan
    logs = [math.log(r) for r in ratios]
    g_half = stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * statistics.stdev(logs) / math.sqrt(n) if n > 1 else math.nan
    above = sum(r > 1 for r in ratios)
    sign_p = stats.binomtest(above, n, 0.5).pvalue
    print(f"\n{n} seeds, {args.racks} racks, {args.arrival}: Dally-manual / Dally average JCT")
    print(f"  mean of ratios {mean:.3f}, {CONFIDENCE:.0%} CI [{mean - half:.3f}, {mean + half:.3f}]")
    print(f"  geometric mean {math.exp(statistics.mean(logs)):.3f}, {CONFIDENCE:.0%} CI "
          f"[{math.exp(statistics.mean(logs) - g_half):.3f}, {math.exp(statistics.mean(logs) + g_half):.3f}]")
    print(f"  pooled: {statistics.mean(manual_means) / statistics.mean(tuned_means):.3f}; "
          f"manual slower on {above} of {n} seeds (sign test p = {sign_p:.3f}); paper {PAPER_RATIO:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
