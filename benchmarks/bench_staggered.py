"""What ``+staggered``'s incremental auctions save (policies/dally_staggered.py): CPU and work, one by one
against incremental, on the reproduction's drawn workloads (benchmarks/reproduce_dally.py).

    .venv/bin/python benchmarks/bench_staggered.py --jobs 200 --racks 4 --repeat 2
    .venv/bin/python benchmarks/bench_staggered.py --policy dally-literal+reauction+staggered+hoard --jobs 100 --racks 2

Each run is a process of its own, the two paths alternating (``Dally.shortcuts`` off: the auctions one
by one; on: incremental), so that the machine's load falls on both alike. Each prints its CPU seconds,
the work behind them (benchmarks/opcounts.py: ``passes`` and ``offers``, Algorithm 1's evaluations) and
the digest of its event log (as benchmarks/pin_schedules.py takes it): the two paths must print the
same digest. ``--cpu-limit`` stops a run that takes longer (its row says so).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(policy_name: str, arrival: str, racks: int, seed: int, jobs: int | None, shortcuts: bool) -> dict:
    """One run in this process: its CPU, counts and event digest."""
    sys.path.insert(0, str(HERE))
    from opcounts import add_core, counting
    from reproduce_dally import BATCH_JOBS, CATALOG, POISSON_JOBS, POISSON_PER_DAY, ROUND_S, dally_trace

    from halyard.datamodel import load_cluster
    from halyard.emulator.catalog import load_model_catalog
    from halyard.policies import make_policy
    from halyard.scheduling import Simulator
    from halyard.scheduling.timing import performance_model_for

    drawn = (dally_trace(jobs or BATCH_JOBS, seed=seed, poisson_per_day=None) if arrival == "batch"
             else dally_trace(jobs or POISSON_JOBS, seed=seed + 1, poisson_per_day=POISSON_PER_DAY))
    policy = make_policy(policy_name)
    policy.shortcuts = shortcuts
    sim = Simulator(load_cluster(f"dally-{racks}rack"), policy,
                    performance_model_for(policy, contention="off", catalog=load_model_catalog(CATALOG)),
                    round_s=ROUND_S)
    with counting(policy) as counts:
        cpu0 = time.process_time()
        sim.run(drawn)
        cpu = time.process_time() - cpu0
    add_core(counts, sim.core)
    h = hashlib.sha256()
    for e in sim.core.log:
        h.update(f"{e.seq}|{e.time:.6f}|{e.job_id}|{e.kind.value}|{e.state.value}|{e.detail}\n".encode())
    return {"cpu_s": round(cpu, 2), "passes": counts["passes"], "offers": counts["offers"],
            "digest": h.hexdigest()[:16]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # the reading with +staggered that was the `dally` preset before issue 35's chain (policies/registry.py)
    p.add_argument("--policy", default="dally-literal+reauction+staggered")
    p.add_argument("--arrival", default="batch", choices=("batch", "poisson"))
    p.add_argument("--racks", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=None, help="jobs drawn (default: the reproduction's 500 / 400)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each path, alternating")
    p.add_argument("--cpu-limit", type=float, default=1800.0, help="wall seconds a run may take before it is stopped")
    p.add_argument("--child", choices=("on", "off"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.policy, args.arrival, args.racks, args.seed, args.jobs, args.child == "on")))
        return 0
    base = [sys.executable, __file__, "--policy", args.policy, "--arrival", args.arrival, "--racks", str(args.racks),
            "--seed", str(args.seed), *(["--jobs", str(args.jobs)] if args.jobs else [])]
    digests = set()
    for i in range(args.repeat):
        for path, flag in (("one by one", "off"), ("incremental", "on")):
            try:
                done = subprocess.run([*base, "--child", flag], capture_output=True, text=True, check=True,
                                      timeout=args.cpu_limit)
            except subprocess.TimeoutExpired:
                print(f"{args.policy} {args.arrival} {args.racks} racks seed {args.seed} {path:12} run {i + 1}: "
                      f"stopped after {args.cpu_limit:.0f} s", flush=True)
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            digests.add(row["digest"])
            print(f"{args.policy} {args.arrival} {args.racks} racks seed {args.seed} {path:12} run {i + 1}: "
                  f"cpu {row['cpu_s']:.1f} s passes={row['passes']} offers={row['offers']} "
                  f"offers/pass={row['offers'] / max(1, row['passes']):.1f} digest {row['digest']}", flush=True)
    print("same event log" if len(digests) == 1 else f"EVENT LOGS DIFFER: {sorted(digests)}")
    return 0 if len(digests) <= 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
