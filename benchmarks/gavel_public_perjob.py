"""Gavel side by side with its authors' simulator (stanford-futuredata/gavel ``scheduler/``), on inputs Halyard writes.

    # a checkout of stanford-futuredata/gavel with its RPC stubs compiled (``make -C scheduler``), and a
    # Python with what its scheduler imports: python3.8 -m venv V && V/bin/pip install numpy scipy cvxpy \\
    #   grpcio grpcio-tools matrix_completion scikit-learn psutil preconditions
    nice -n 10 .venv/bin/python benchmarks/gavel_public_perjob.py --checkout /work/ext/gavel \\
        --gavel-python /work/ext/gavel-venv/bin/python

Halyard writes, into ``<work>/``: the first ``--jobs`` jobs of its Gavel sample trace
(``src/halyard/data/traces/gavel_philly_vc2869ce_seed0.trace``, read by ``read_trace``) in the 10-field
``.trace`` form the current ``utils.parse_trace`` reads, and ``throughputs.json`` in the layout of
its ``simulation_throughputs.json``: for every job type and scale factor, the steps per second of
Halyard's performance model (``1 / consolidated_iteration_time`` of the job type's Halyard model on
the worker type), isolated only (``null``; the ``_perf`` policies read nothing else). Gavel's
simulator then runs ``max_sum_throughput_perf`` with its 360 s rounds (``Scheduler.simulate``, in a
subprocess under ``--gavel-python``, its modules imported unchanged), and Halyard's simulator runs
the ``gavel`` preset on the same jobs with ``round_s=360``; the two are joined per job.

Worker types: Gavel's driver takes ``v100:p100:k80``; Halyard's catalog has no K80, so the cluster
has none (its throughputs are written as P100's and never used). First measurement only: the
differences are not yet attributed (see the page).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "halyard" / "data" / "traces" / "gavel_philly_vc2869ce_seed0.trace"
ROUND_S = 360.0  # Gavel scheduler.py simulate: time_per_iteration=360
SCALES = (1, 2, 4, 8)
JSON_NAME = "gavel-public-comparison.json"
PAGE_NAME = "gavel-public-comparison.md"


# ----------------------------------------------------------------------------- the public side (Python 3.8)
def run_public(args: argparse.Namespace) -> int:
    """Gavel's simulator, its modules unchanged, on ``<inputs>``; prints per-job arrival and JCT as JSON."""
    import contextlib
    import logging

    source = Path(args.checkout).resolve() / "scheduler"
    sys.path.insert(0, str(source))
    os.chdir(source)
    logging.disable(logging.CRITICAL)
    inputs = Path(args.inputs).resolve()
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        import scheduler
        import utils

        jobs, arrivals = utils.parse_trace(str(inputs / "trace.trace"))
        policy = utils.get_policy("max_sum_throughput_perf", solver="ECOS", seed=0)
        sched = scheduler.Scheduler(policy, throughputs_file=str(inputs / "throughputs.json"), simulate=True,
                                    seed=0, time_per_iteration=ROUND_S)
        v100, p100 = (int(x) for x in args.cluster.split(":"))
        began = time.process_time()
        sched.simulate({"v100": v100, "p100": p100, "k80": 0}, arrivals, jobs,
                       num_gpus_per_server={"v100": args.per_server, "p100": args.per_server, "k80": 1})
        cpu = time.process_time() - began
        out = {}
        for job_id, jct in sched._job_completion_times.items():  # JCT from arrival (add_job's timestamp)
            arrival = arrivals[job_id[0]]
            out[str(job_id[0])] = {"submit": arrival, "end": None if jct is None else arrival + jct}
        sched.shutdown()
    json.dump({"sim_cpu_s": cpu, "jobs": out}, sys.stdout)
    return 0


# ----------------------------------------------------------------------------- the inputs
def write_inputs(n: int, cluster: str, per_server: int, folder: Path) -> list[dict]:
    """The 10-field trace, the throughputs file, Halyard's canonical trace and cluster file."""
    from halyard.datamodel import JobSpec, parse_cluster
    from halyard.emulator import PerformanceModel
    from halyard.traces import read_trace, write_trace
    from halyard.traces.gavel import parse_job_type
    from halyard.traces.models import GAVEL_MODELS

    folder.mkdir(parents=True, exist_ok=True)
    v100, p100 = (int(x) for x in cluster.split(":"))
    toml = ('name = "gavel-public"\n[[racks]]\nname = "r{i}"\ncount = 1\nuplink_gbit_s = 400\n'
            + "".join(f'[[racks.nodes]]\nname = "{{rack}}-{t.lower()}{{i}}"\ncount = {g // per_server}\n'
                      f'gpu_type = "{t}"\ngpus = {per_server}\ncpus = 32\nmemory_gb = 256\nfabric = "nvlink"\n'
                      'fabric_gbyte_s = 150\nnic_gbit_s = 100\n' for t, g in (("V100", v100), ("P100", p100)) if g))
    (folder / "cluster.toml").write_text(toml)
    halyard_cluster = parse_cluster(toml)
    jobs = list(read_trace(SAMPLE, strict=True).jobs)[:n]
    perf = PerformanceModel()
    rows = []
    with open(folder / "trace.trace", "w") as f:
        for i, j in enumerate(jobs):
            e = j.extra
            f.write("\t".join([e["job_type"], e["command"], "", e["num_steps_arg"], e["needs_data_dir"],
                               str(j.iterations), str(j.num_gpus), "1", "-1", f"{j.submit_time:f}"]) + "\n")
            rows.append({"id": str(i), "job_type": e["job_type"], "gpus": j.num_gpus, "steps": j.iterations,
                         "submit": j.submit_time, "model": j.model})
    throughputs: dict[str, dict[str, dict[str, float]]] = {}
    types = sorted({r["job_type"] for r in rows})
    for worker, gtype in (("v100", "V100"), ("p100", "P100"), ("k80", "P100")):
        throughputs[worker] = {}
        for job_type in types:
            model = GAVEL_MODELS[parse_job_type(job_type)[0]].model
            for scale in sorted({*SCALES, *(r["gpus"] for r in rows)}):
                spec = JobSpec(job_id="profile", submit_time=0.0, model=model, num_gpus=scale, iterations=1)
                step = perf.consolidated_iteration_time(spec, halyard_cluster, gtype)
                throughputs[worker][str((job_type, scale))] = {"null": 1.0 / step}
    (folder / "throughputs.json").write_text(json.dumps(throughputs, indent=1) + "\n")
    write_trace([JobSpec(job_id=r["id"], submit_time=r["submit"], model=r["model"], num_gpus=r["gpus"],
                         iterations=r["steps"]) for r in rows], folder / "halyard.csv")
    return rows


# ----------------------------------------------------------------------------- Halyard's side
def run_halyard_child(args: argparse.Namespace) -> int:
    from halyard.datamodel import load_cluster
    from halyard.policies import make_policy
    from halyard.scheduling import Simulator
    from halyard.traces import read_trace

    inputs = Path(args.inputs)
    sim = Simulator(load_cluster(str(inputs / "cluster.toml")), make_policy(args.variant), round_s=ROUND_S)
    began = time.process_time()
    sim.run(list(read_trace(inputs / "halyard.csv", strict=True).jobs))
    cpu = time.process_time() - began
    json.dump({"sim_cpu_s": cpu, "jobs": {r.spec.job_id: {"submit": r.spec.submit_time, "end": r.end_time}
                                          for r in sim.core.records.values()}}, sys.stdout)
    return 0


def child(command: list[str]) -> dict:
    child_cpu = joined().child_cpu
    before, began = child_cpu(), time.monotonic()
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    cpu, wall = child_cpu() - before, time.monotonic() - began
    if out.returncode != 0:
        raise SystemExit(f"{shlex.join(command[:3])} failed:\n{out.stderr[-3000:]}")
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "cpu_s": cpu, "wall_s": wall}


# ----------------------------------------------------------------------------- the join
def joined() -> ModuleType:
    """The join of benchmarks/tiresias_public_perjob.py (jcts, p99, stats, agree): runs hold submit and end."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tiresias_public_perjob

    return tiresias_public_perjob


def table(data: dict) -> str:
    stats, agree = joined().stats, joined().agree
    pub = data["public"]
    sp = stats(pub)
    lines = ["| run | jobs done | mean JCT (h) | / public | p99 JCT (h) | / public | makespan (h) | / public "
             "| jobs within 5 % | CPU s (child) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
             f"| Gavel simulator, max_sum_throughput_perf | {sp['jobs']} | {sp['mean_jct_s'] / 3600:.2f} | 1.000 "
             f"| {sp['p99_jct_s'] / 3600:.2f} | 1.000 | {sp['makespan_s'] / 3600:.2f} | 1.000 | 100% "
             f"| {sp['cpu_s']:.2f} |"]
    for name, run in data["halyard"].items():
        s = stats(run)
        lines.append(f"| Halyard `{name}` | {s['jobs']} | {s['mean_jct_s'] / 3600:.2f} "
                     f"| {s['mean_jct_s'] / sp['mean_jct_s']:.3f} | {s['p99_jct_s'] / 3600:.2f} "
                     f"| {s['p99_jct_s'] / sp['p99_jct_s']:.3f} | {s['makespan_s'] / 3600:.2f} "
                     f"| {s['makespan_s'] / sp['makespan_s']:.3f} | {agree(pub, run):.0%} | {s['cpu_s']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in ("public", "halyard"):
        p = argparse.ArgumentParser(prog=f"gavel_public_perjob.py {sys.argv[1]}")
        p.add_argument("side")
        p.add_argument("--inputs", required=True)
        p.add_argument("--checkout")
        p.add_argument("--cluster", default="16:16")
        p.add_argument("--per-server", type=int, default=4)
        p.add_argument("--variant", default="gavel")
        args = p.parse_args()
        return run_public(args) if args.side == "public" else run_halyard_child(args)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", type=Path, required=True, help="a checkout of stanford-futuredata/gavel (read only)")
    p.add_argument("--gavel-python", default=sys.executable, help="a Python with what Gavel's scheduler imports")
    p.add_argument("--jobs", type=int, default=100)
    p.add_argument("--cluster", default="16:16", help="V100:P100 GPUs")
    p.add_argument("--per-server", type=int, default=4)
    p.add_argument("--work", type=Path, default=ROOT / "out" / "gavel-public")
    p.add_argument("--json", type=Path, default=ROOT / "out" / "gavel-public" / JSON_NAME)
    args = p.parse_args()
    rows = write_inputs(args.jobs, args.cluster, args.per_server, args.work)
    here = str(Path(__file__).resolve())
    common = ["--inputs", str(args.work), "--cluster", args.cluster, "--per-server", str(args.per_server)]
    data = {"command": "python benchmarks/gavel_public_perjob.py " + shlex.join(sys.argv[1:]), "trace": rows,
            "public": child([args.gavel_python, here, "public", "--checkout", str(args.checkout), *common]),
            "halyard": {"gavel": child([sys.executable, here, "halyard", *common])}}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
