"""Gavel side by side with its authors' simulator (stanford-futuredata/gavel ``scheduler/``), on inputs Halyard writes.

    # a checkout of stanford-futuredata/gavel with its RPC stubs compiled (``make -C scheduler``), and a
    # Python with what its scheduler imports: python3.8 -m venv V && V/bin/pip install numpy scipy cvxpy \\
    #   grpcio grpcio-tools matrix_completion scikit-learn psutil preconditions
    nice -n 10 .venv/bin/python benchmarks/gavel_public_perjob.py --checkout /work/ext/gavel \\
        --gavel-python /work/ext/gavel-venv/bin/python
    .venv/bin/python benchmarks/gavel_public_perjob.py --from-json   # the page again, no simulation

Halyard writes, into ``<work>/<workload>/``: a window of jobs of its Gavel sample trace
(``src/halyard/data/traces/gavel_philly_vc2869ce_seed0.trace``, read by ``read_trace``; :data:`WORKLOADS`)
in the 10-field ``.trace`` form the current ``utils.parse_trace`` reads, arrivals from the window's first,
and ``throughputs.json`` in the layout of its ``simulation_throughputs.json``: for every job type and
scale factor, the steps per second of Halyard's performance model (``1 / consolidated_iteration_time`` of
the job type's Halyard model on the worker type), isolated only (``null``; the ``_perf`` policies read
nothing else). Gavel's simulator then runs ``max_sum_throughput_perf`` with its 360 s rounds
(``Scheduler.simulate``, in a subprocess under ``--gavel-python``, its modules imported unchanged), and
Halyard's simulator runs the ``gavel`` preset on the same jobs with ``round_s=360``, then the cumulative
ladder of :data:`STEPS`, each a named option off by default; the two are joined per job over the jobs
both finished (benchmarks/perjob.py), and a job the public simulator fails is reported apart.

Worker types: Gavel's driver takes ``v100:p100:k80``; Halyard's catalog has no K80, so the cluster
has none (its throughputs are written as P100's and never used).

Not part of the tests (the page's rendering from the JSON is: tests/test_reproduction_pages.py).
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

import perjob  # benchmarks/ is not a package: found on sys.path
from perjob import (  # benchmarks/ is not a package: found on sys.path
    agree,
    catalog_for,
    hours,
    jcts,
    named_steps,
    stats,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "halyard" / "data" / "traces" / "gavel_philly_vc2869ce_seed0.trace"
TEMPLATE = ROOT / "benchmarks" / "gavel_public_page.md"
ROUND_S = 360.0  # Gavel scheduler.py simulate: time_per_iteration=360
SCALES = (1, 2, 4, 8)
JSON_NAME = "gavel-public-comparison.json"
PAGE_NAME = "gavel-public-comparison.md"
# name -> (first job of the sample's window, jobs, V100:P100 GPUs, GPUs per server)
WORKLOADS = {"jobs-0-19": (0, 20, "32:32", 4), "jobs-20-39": (20, 20, "32:32", 4)}
# Halyard's differences from the public simulator, each an option off by default, switched on one after
# another (cumulative), so that each step's effect is measured on its own.
STEPS = {
    "raw-throughput-sum": "the LP maximises steps per second summed over jobs (Gavel(raw_throughput_sum=True); "
                          "Gavel's max_sum_throughput.py objective sum(throughputs * x), its scale = 1 / "
                          "throughputs.sum(axis=1) unused); Halyard's default normalises each job by its best type",
    "spread-ties": "tied jobs share the optimum (Gavel(spread_ties=True): a second LP over the optimal face "
                   "maximises the least time fraction of any job); Gavel solves its LP with ECOS, an "
                   "interior-point method, which ends inside the optimal face, not at a vertex as HiGHS does",
    "work-conserving": "GPUs the ranked pass leaves idle go to jobs the LP gave nothing (Gavel(work_conserving="
                       "True); Gavel's per-type lists hold every job, priority 0 included, and its pass goes down "
                       "them while workers last, v100 first)",
    "free-restarts": "a preempted or moved job resumes at no cost (a catalog with restart_fixed_s = 0 and "
                     "checkpoint_state_factor = 0; Gavel's simulator runs num_steps / throughput per micro-task, "
                     "nothing to stop or resume)",
}


def variants() -> list[str]:
    """``gavel`` and its cumulative variants (perjob.ladder)."""
    return perjob.ladder("gavel", STEPS)


# ----------------------------------------------------------------------------- the public side (Python 3.8)
def run_public(args: argparse.Namespace) -> int:
    """Gavel's simulator, its modules unchanged, on ``<inputs>``; prints per-job arrival and end as JSON
    (``end`` None for a job it marks failed: ``_job_completion_times`` holds None for it)."""
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
            out[str(job_id[0])] = {"submit": arrival, "end": None if jct is None else arrival + jct,
                                   "steps_run": sched._total_steps_run.get(job_id)}
        sched.shutdown()
    json.dump({"policy": "max_sum_throughput_perf", "sim_cpu_s": cpu, "jobs": out}, sys.stdout)
    return 0


# ----------------------------------------------------------------------------- the inputs
def write_inputs(start: int, n: int, cluster: str, per_server: int, folder: Path) -> list[dict]:
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
    jobs = list(read_trace(SAMPLE, strict=True).jobs)[start:start + n]
    t0 = jobs[0].submit_time
    perf = PerformanceModel()
    rows = []
    with open(folder / "trace.trace", "w") as f:
        for i, j in enumerate(jobs):
            e = j.extra
            f.write("\t".join([e["job_type"], e["command"], "", e["num_steps_arg"], e["needs_data_dir"],
                               str(j.iterations), str(j.num_gpus), "1", "-1", f"{j.submit_time - t0:f}"]) + "\n")
            rows.append({"id": str(i), "job_type": e["job_type"], "gpus": j.num_gpus, "steps": j.iterations,
                         "submit": j.submit_time - t0, "model": j.model})
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
def halyard_policy_and_perf(name: str) -> tuple[object, object]:
    """Halyard's ``gavel`` with the :data:`STEPS` named in ``name`` switched on."""
    from halyard.emulator import PerformanceModel
    from halyard.policies.gavel import Gavel

    steps = named_steps(name, STEPS)
    catalog = catalog_for(steps)
    return (Gavel(name, raw_throughput_sum="raw-throughput-sum" in steps, spread_ties="spread-ties" in steps,
                  work_conserving="work-conserving" in steps),
            PerformanceModel(catalog))


def run_halyard_child(args: argparse.Namespace) -> int:
    from halyard.datamodel import load_cluster
    from halyard.scheduling import Simulator
    from halyard.traces import read_trace

    inputs = Path(args.inputs)
    policy, perf = halyard_policy_and_perf(args.variant)
    sim = Simulator(load_cluster(str(inputs / "cluster.toml")), policy, perf, round_s=ROUND_S)
    jobs = list(read_trace(inputs / "halyard.csv", strict=True).jobs)
    json.dump(perjob.simulated(args.variant, sim, jobs), sys.stdout)
    return 0


# ----------------------------------------------------------------------------- the page

def failed(run: dict) -> list[str]:
    return sorted((k for k, v in run["jobs"].items() if v["end"] is None), key=int)


def ladder_table(data: dict) -> str:
    return perjob.ladder_table(data, variants(), "Gavel simulator, max_sum_throughput_perf")


def steps_table(data: dict) -> str:
    return perjob.steps_table(data, variants(), STEPS)


def perjob_table(data: dict) -> str:
    """Every job: its type and size, the public JCT and each Halyard run's JCT over it."""
    pub = data["public"]
    jp = jcts(pub)
    names = variants()
    lines = ["| job | type | GPUs | steps | public JCT (h) | " + " | ".join(f"`{v}` / public" for v in names) + " |",
             "|---|---|---:|---:|---:|" + "---:|" * len(names)]
    for r in data["trace"]:
        k = r["id"]
        cells = []
        for v in names:
            jh = jcts(data["halyard"][v])
            cells.append("—" if k not in jh else (f"{hours(jh[k])} h" if k not in jp else f"{jh[k] / jp[k]:.3f}"))
        lines.append(f"| {k} | {r['job_type']} | {r['gpus']} | {r['steps']} "
                     f"| {hours(jp[k]) if k in jp else 'failed'} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_page(data: dict) -> str:
    blocks, cpu = [], []
    for name, w in data["workloads"].items():
        sp = stats(w["public"])
        rows = {r["id"]: r for r in w["trace"]}
        gone = [f"job {k} ({rows[k]['gpus']} GPUs, {rows[k]['job_type']}: {w['public']['jobs'][k]['steps_run']} of "
                f"{rows[k]['steps']} steps run)" for k in failed(w["public"])]
        blocks.append(f"### {name}: {w['config']}\n\nThe public simulator: mean JCT {hours(sp['mean_jct_s'])} h, "
                      f"makespan {hours(sp['makespan_s'])} h over the {sp['jobs']} jobs it finished; it marks "
                      f"{', '.join(gone) if gone else 'no job'} failed.\n\n"
                      + ladder_table(w) + "\nEach step on its own:\n\n" + steps_table(w)
                      + "\nEvery job (JCT of each Halyard run over the public one; a failed job's Halyard JCT in "
                        "hours):\n\n" + perjob_table(w))
        last = w["halyard"][variants()[-1]]
        cpu.append(f"| {name} | {w['public']['cpu_s']:.2f} | {w['halyard']['gavel']['cpu_s']:.2f} / "
                   f"{last['cpu_s']:.2f} | {w['public']['cpu_s'] / w['halyard']['gavel']['cpu_s']:.1f}x |")
    cpu_table = ("| workload | Gavel simulator CPU s | Halyard CPU s (`gavel` / every step on) | ratio |\n"
                 "|---|---:|---:|---:|\n" + "\n".join(cpu) + "\n")
    return TEMPLATE.read_text(encoding="utf-8").format(command=data["command"], commit=data["commit"],
                                                        workloads="\n".join(blocks), cpu=cpu_table)


def pages(docs: Path) -> dict[Path, str]:
    """The page rendered from the stored JSON, no simulation (tests/test_reproduction_pages.py)."""
    return {docs / PAGE_NAME: render_page(json.loads((docs / JSON_NAME).read_text(encoding="utf-8")))}


# ----------------------------------------------------------------------------- main
def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in ("public", "halyard"):
        p = argparse.ArgumentParser(prog=f"gavel_public_perjob.py {sys.argv[1]}")
        p.add_argument("side")
        p.add_argument("--inputs", required=True)
        p.add_argument("--checkout")
        p.add_argument("--cluster", default="32:32")
        p.add_argument("--per-server", type=int, default=4)
        p.add_argument("--variant", default="gavel")
        args = p.parse_args()
        return run_public(args) if args.side == "public" else run_halyard_child(args)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", type=Path, help="a checkout of stanford-futuredata/gavel (read only)")
    p.add_argument("--gavel-python", default=sys.executable, help="a Python with what Gavel's scheduler imports")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--work", type=Path, default=ROOT / "out" / "gavel-public")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "reproductions")
    p.add_argument("--from-json", action="store_true", help="no simulation: rewrite the page from the JSON")
    args = p.parse_args()
    if not args.from_json:
        if args.checkout is None:
            p.error("--checkout is required (or --from-json)")
        commit = subprocess.run(["git", "-C", str(args.checkout), "rev-parse", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        if not commit and (args.checkout / "COMMIT").is_file():
            commit = (args.checkout / "COMMIT").read_text().strip()
        here = str(Path(__file__).resolve())
        data = {"command": "python benchmarks/gavel_public_perjob.py " + shlex.join(sys.argv[1:]),
                "commit": commit or "not a git checkout", "workloads": {}}
        for name in args.workloads:
            start, n, cluster, per_server = WORKLOADS[name]
            folder = args.work / name
            rows = write_inputs(start, n, cluster, per_server, folder)
            common_args = ["--inputs", str(folder), "--cluster", cluster, "--per-server", str(per_server)]
            w = {"config": (f"{n} jobs of the Gavel sample trace ({start}-{start + n - 1}), arrivals from the "
                            f"first, on {cluster.replace(':', ' V100 + ')} P100 GPUs, {per_server} per server"),
                 "trace": rows,
                 "public": perjob.child([args.gavel_python, here, "public", "--checkout", str(args.checkout),
                                         *common_args]),
                 "halyard": {}}
            print(f"{name} public: {stats(w['public'])}", file=sys.stderr, flush=True)
            for v in variants():
                w["halyard"][v] = perjob.child([sys.executable, here, "halyard", "--variant", v, *common_args])
                print(f"{name} halyard {v}: agree {agree(w['public'], w['halyard'][v]):.0%}", file=sys.stderr,
                      flush=True)
            data["workloads"][name] = w
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / JSON_NAME).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    data = json.loads((args.out / JSON_NAME).read_text(encoding="utf-8"))
    if TEMPLATE.is_file():
        for path, text in pages(args.out).items():
            path.write_text(text, encoding="utf-8")
    for name, w in data["workloads"].items():
        print(f"{name}: {w['config']}\n" + ladder_table(w) + "\n" + steps_table(w))
    return 0


if __name__ == "__main__":
    sys.exit(main())
