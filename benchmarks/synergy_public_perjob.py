"""Per-job comparison of Halyard's Synergy with the public simulator (msr-fiddle/synergy) on one trace.

    # 1. the public simulator on a Halyard canonical trace (a checkout of msr-fiddle/synergy, read, not copied;
    #    its own Python environment: numpy, pandas, matplotlib, cvxpy, grpcio, psutil, its stubs compiled)
    python benchmarks/synergy_public_perjob.py public --simulator SYNERGY/simulator --trace T.csv \\
        --scheduler SRTF --mode tune --measure 500:1000 --out pub.csv
    # 2. Halyard on the same trace
    .venv/bin/halyard simulate --trace T.csv --cluster synergy-128 --policy synergy-tune:srtf+starvation-guard \\
        --measure 500:1000 --until-measured --out-dir ours --table-format csv
    # 3. join by job id
    .venv/bin/python benchmarks/synergy_public_perjob.py join pub.csv ours/jobs.csv --measure 500:1000

The public simulator generates its own jobs (Philly job list cycled, its own random stream), so its
printed means and ours are of different jobs; its replay mode (``--replay_trace``: job id, model,
arrival, iterations, GPUs) runs the same jobs. A trace row's ``duration_s`` (time at the
GPU-proportional share) becomes ``duration_s / the model's iteration time`` iterations, as its
``iter_is_duration`` path does. ``public`` imports the simulator's modules unchanged and only wraps
``Job.allocate`` (to count rounds run and rounds at the speed-up) and ``Runner.finish_job`` (to
record finish times).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from pathlib import Path

# Halyard catalog name -> the public simulator's model name (simulator/models/*_1.py).
PUBLIC_NAMES = {"shufflenetv2": "shufflenet", "resnet18": "res18", "mobilenetv2": "mobilenet",
                "resnet50": "res50", "transformer-xl": "transformer", "alexnet": "alexnet", "gnmt": "gnmt",
                "lstm": "lstm", "m5": "m5", "deepspeech": "deepspeech"}
CLOSE_H = 0.5  # a job "agrees" when the two JCTs are within this many hours (well under two 300 s rounds)
FAR_H = 10.0
SHOW = 8  # jobs printed at each end of the difference list


def window(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(":")
    return int(lo), int(hi)


def job_number(job_id: str) -> int:
    """``job-17`` -> 17: the public simulator's ids are integers."""
    try:
        return int(job_id.rsplit("-", 1)[-1])
    except ValueError:
        raise SystemExit(f"job id {job_id!r}: the public simulator needs ids ending in a number") from None


def run_public(args: argparse.Namespace) -> int:
    simulator = Path(args.simulator).resolve()
    if not (simulator / "runner.py").exists():
        raise SystemExit(f"--simulator {simulator}: no runner.py there (give msr-fiddle/synergy's simulator/)")
    sys.path.insert(0, str(simulator))
    os.chdir(simulator)
    import collections.abc
    collections.Mapping = collections.abc.Mapping  # removed in Python 3.10; the simulator targets 3.6-3.8
    import models  # the simulator's per-model profiles
    import runner
    from jobs.job import Job

    lo, hi = args.measure
    replay = Path(args.out).resolve().with_suffix(".replay")
    with open(args.trace) as src, open(replay, "w") as dst:
        for row in csv.DictReader(src):
            if row["model"] not in PUBLIC_NAMES:
                raise SystemExit(f"{args.trace}: model {row['model']!r} has no profile in the public simulator")
            name = PUBLIC_NAMES[row["model"]]
            iteration_s = getattr(models, f"{name}_1")(name).iter_time
            dst.write(f"{job_number(row['job_id'])},{name},{float(row['submit_time'])},"
                      f"{int(float(row['duration_s']) / iteration_s)},{row['num_gpus']}\n")
    counts: dict[int, list[int]] = {}
    allocate = Job.allocate

    def counted(self, gpus, time=None, res_map=None, fair=True, simulate=True):
        c = counts.setdefault(self.job_id, [0, 0])
        c[0] += 1
        c[1] += (not fair) and self.synergy_speedup > 1
        return allocate(self, gpus, time, res_map, fair, simulate)

    finished: dict[int, tuple[float, object]] = {}
    finish = runner.Runner.finish_job

    def recorded(self, job):
        finished[job.job_id] = (self.time, job)
        return finish(self, job)

    Job.allocate, runner.Runner.finish_job = counted, recorded
    started, cpu0 = time.time(), time.process_time()
    sim = runner.Runner(cluster_job_log=None, scheduler=args.scheduler, series_id_filter=(lo, hi),
                        model_class_split=(20, 70, 10), placement=True, fair=args.mode == "fair",
                        tune=args.mode == "tune", trace=str(replay))
    sim.run_simulation()
    cpu = time.process_time() - cpu0
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "model", "arrival", "finish", "jct_h", "rounds", "rounds_at_speedup"])
        for jid, (t, job) in sorted(finished.items()):
            c = counts.get(jid, [0, 0])
            w.writerow([jid, job.job_model.model_name, job.job_arrival_time, t, (t - job.job_arrival_time) / 3600,
                        c[0], c[1]])
    measured = [(t - j.job_arrival_time) / 3600 for jid, (t, j) in finished.items() if lo <= jid < hi]
    print(f"public {args.scheduler}+{args.mode}: {len(measured)} measured jobs, average JCT "
          f"{statistics.mean(measured):.2f} h ({time.time() - started:.0f} s wall, {cpu:.1f} s CPU in the run, "
          f"{time.process_time():.1f} s CPU in the process)")
    if args.cpu_json:  # read by bench_synergy_public_config.py --public-simulator
        Path(args.cpu_json).write_text(json.dumps({
            "run_cpu_s": round(cpu, 2), "process_cpu_s": round(time.process_time(), 2),
            "wall_s": round(time.time() - started, 1), "measured_jobs": len(measured),
            "mean_jct_h": round(statistics.mean(measured), 4)}) + "\n", encoding="utf-8")
    return 0


def join(args: argparse.Namespace) -> int:
    lo, hi = args.measure
    with open(args.public) as f:
        pub = {int(r["id"]): r for r in csv.DictReader(f)}
    with open(args.ours) as f:
        ours = {job_number(r["job_id"]): r for r in csv.DictReader(f)}
    ids = [i for i in range(lo, hi) if i in pub and ours.get(i, {}).get("state") == "COMPLETED"]
    if not ids:
        raise SystemExit("no job of the window finished in both runs")
    p = {i: float(pub[i]["jct_h"]) for i in ids}
    o = {i: float(ours[i]["jct_s"]) / 3600 for i in ids}
    diff = sorted(ids, key=lambda i: o[i] - p[i], reverse=True)
    print(f"{len(ids)} jobs of {hi - lo} finished in both: public {statistics.mean(p.values()):.2f} h, "
          f"Halyard {statistics.mean(o.values()):.2f} h, ratio "
          f"{statistics.mean(o.values()) / statistics.mean(p.values()):.3f}")
    print(f"within {CLOSE_H} h: {sum(abs(o[i] - p[i]) < CLOSE_H for i in ids)}; Halyard slower by > {FAR_H} h: "
          f"{sum(o[i] - p[i] > FAR_H for i in ids)}; public slower by > {FAR_H} h: "
          f"{sum(p[i] - o[i] > FAR_H for i in ids)}; median difference "
          f"{statistics.median(o[i] - p[i] for i in ids):+.2f} h")
    models = sorted({ours[i]["model"] for i in ids})
    for m in models:
        sel = [i for i in ids if ours[i]["model"] == m]
        print(f"  {m:15s} {len(sel):4d} jobs: public {statistics.mean(p[i] for i in sel):7.2f} h, "
              f"Halyard {statistics.mean(o[i] for i in sel):7.2f} h")
    for i in diff[:SHOW] + diff[-SHOW:]:
        print(f"  job {i} {ours[i]['model']:14s} public {p[i]:7.1f} h ({pub[i]['rounds']} rounds, "
              f"{pub[i]['rounds_at_speedup']} at the speed-up), Halyard {o[i]:7.1f} h (run "
              f"{float(ours[i]['run_s']) / 3600:.1f} h, first wait {float(ours[i]['queue_s']) / 3600:.1f} h, "
              f"{ours[i]['preemptions']} preemptions)")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    pub = sub.add_parser("public", help="run the public simulator on a canonical trace, one row per finished job")
    pub.add_argument("--simulator", required=True, help="msr-fiddle/synergy's simulator/ folder")
    pub.add_argument("--trace", required=True, help="a Halyard canonical CSV trace (halyard trace generate)")
    pub.add_argument("--scheduler", choices=("FIFO", "SRTF", "LAS", "FTF"), default="SRTF")
    pub.add_argument("--mode", choices=("tune", "fair"), default="tune",
                     help="tune: Synergy-TUNE; fair: GPU-proportional")
    pub.add_argument("--measure", type=window, default=(4000, 5000), help="START:END job ids (the run ends when "
                     "they have finished, as the public simulator's series_id_filter)")
    pub.add_argument("--out", required=True)
    pub.add_argument("--cpu-json", help="also write the run's CPU seconds (time.process_time around "
                     "Runner.run_simulation, and the whole process's) and mean JCT to this JSON file")
    pub.set_defaults(run=run_public)
    j = sub.add_parser("join", help="join the public rows with halyard simulate's jobs.csv by job id")
    j.add_argument("public")
    j.add_argument("ours")
    j.add_argument("--measure", type=window, default=(4000, 5000))
    j.set_defaults(run=join)
    args = p.parse_args()
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
