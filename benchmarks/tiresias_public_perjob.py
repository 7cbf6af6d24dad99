"""Tiresias side by side with its authors' simulator (SymbioticLab/Tiresias ``simulator/``), on inputs Halyard writes.

    # a checkout of SymbioticLab/Tiresias (read, never copied), Python 2.7 and numpy for it, e.g.
    #   python2.7 -m pip install --target /work/ext/tiresias-py2 numpy==1.16.6
    nice -n 10 .venv/bin/python benchmarks/tiresias_public_perjob.py --checkout /work/ext/tiresias \\
        --py2 /root/.pyenv/versions/2.7.18/bin/python --py2-path /work/ext/tiresias-py2
    .venv/bin/python benchmarks/tiresias_public_perjob.py --from-json   # the page again, no simulation

Halyard writes, into ``<work>/``, the simulator's inputs: ``trace.csv`` in its ``60_job.csv`` layout
(``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``) and ``cluster.csv`` in its
``cluster_spec.csv`` layout, and the same jobs and cluster for Halyard (``halyard.csv``, a canonical trace
with ``duration_s``; ``cluster.toml``). The jobs are a window of Halyard's Philly sample
(``src/halyard/data/traces/philly_sample.csv``, read by ``read_trace``: sizes, durations and arrivals as
published, the models Halyard's loader draws), arrivals as in the sample and every time
rounded to whole seconds (the simulator keeps integer seconds); :data:`WORKLOADS` names the windows. Then:

* the authors' simulator runs ``run_sim.py --scheme=count --schedule=dlas-gpu`` (the README's example and
  ``sim_runs.sh``: discretised 2D-LAS on GPU time, GPUs counted, no placement) under Python 2.7, its
  modules unchanged, from the checkout. Its ``lp.py`` imports IBM CPLEX at import time and never calls
  it on this path: a stand-in ``cplex`` package of three empty names (written into ``<work>/py2-shim``)
  satisfies the import;
* Halyard's simulator runs the ``tiresias`` preset on the same jobs, and the cumulative ladder of
  :data:`STEPS`, each a named option off by default that removes one difference the page names;
* the two are joined per job: mean JCT, p99 JCT, makespan, the fraction of jobs whose JCTs agree within
  5 %, and each side's CPU seconds (``getrusage(RUSAGE_CHILDREN)`` around each side's child process).

Not part of the tests (the page's rendering from the JSON is: tests/test_reproduction_pages.py).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

# benchmarks/ is not a package: found on sys.path
import perjob  # benchmarks/ is not a package: found on sys.path
from perjob import agree, catalog_for, child_cpu, hours, jcts, named_steps, stats

ROOT = Path(__file__).resolve().parents[1]
JSON_NAME = "tiresias-public-comparison.json"
PAGE_NAME = "tiresias-public-comparison.md"
TEMPLATE = ROOT / "benchmarks" / "tiresias_public_page.md"
SAMPLE = ROOT / "src" / "halyard" / "data" / "traces" / "philly_sample.csv"
# name -> (first job of the Philly-sample window, jobs, arrival compression, the simulator's cluster spec)
WORKLOADS = {"philly-1000": (1000, 480, 1.0, "cluster_spec"), "philly-500": (500, 480, 1.0, "cluster_spec"),
             "philly-all": (0, 2000, 1.0, "n32g4")}
# The simulator's cluster specs (simulator/*.csv): num_switch, num_node_p_switch, num_gpu_p_node,
# num_cpu_p_node, mem_p_node. ``cluster_spec`` is its default file: 1 switch x 16 nodes x 4 GPUs.
CLUSTER_SPECS = {"cluster_spec": (1, 16, 4, 128, 254), "n32g4": (1, 32, 4, 40, 256)}
# The simulator's jobs.py _TFJobs: num_queue = 3, queue_limit = [3250, 7200, 18000]; dlas_sim_jobs demotes
# from queue k < num_queue - 1 at queue_limit[k], so two thresholds are live: 3,250 and 7,200 GPU-seconds.
PUBLIC_THRESHOLDS_GPU_S = (3250.0, 7200.0)
# Models its models.py knows (an unknown name makes it pick one at random); on the ``count`` scheme the
# model changes nothing in its schedule. Halyard's models keep their skew class: alexnet high, others low.
PUBLIC_MODEL = {"alexnet": "alexnet", "vgg11": "vgg11", "vgg16": "vgg16", "vgg19": "vgg19", "resnet50": "resnet50"}
PUBLIC_LOW_SKEW_STANDIN = "resnet50"
# Halyard's differences from the public simulator, each an option off by default, switched on one after
# another (cumulative), so that each step's effect is measured on its own.
STEPS = {
    "fixed-duration": "a job runs its trace duration wherever it is placed: no communication in the step time "
                      "(PerformanceModel(communication=False); the simulator's job ends duration seconds of "
                      "running after it starts, whatever its GPUs)",
    "free-restarts": "a preempted job resumes at no cost (a catalog with restart_fixed_s = 0 and "
                     "checkpoint_state_factor = 0; the simulator charges nothing to stop or resume)",
    "any-gpus": "every job takes any free GPUs: no strict consolidation of high-skew models "
                "(SkewConsolidation(is_high_skew=lambda m: False); the simulator's count scheme only counts GPUs)",
    "three-queues": "queues cut at 3,250 and 7,200 GPU-seconds (TwoDimensionalLas(thresholds=(3250, 7200)); the "
                    "simulator's num_queue = 3 with queue_limit = [3250, 7200, 18000])",
    "reference-lists": "each queue a list as the simulator keeps it (TwoDimensionalLas(reference_lists=True)): "
                       "appended on arrival and on demotion, and after every pass its waiting jobs moved behind "
                       "its running ones, so a running job goes before a waiting one of its queue; Halyard's "
                       "default orders a queue by arrival",
    "late-demotion": "demotions at the simulator's events only, its queue jumps computed as it computes them "
                     "(TwoDimensionalLas(reference_lists=True, late_demotion=True); run_sim.py: ceil((limit - "
                     "executed seconds) / GPUs), seconds where GPU-seconds are meant, so a multi-GPU job is "
                     "demoted at the next arrival or completion after it crosses, or later)",
    "second-rounds": "a round of 1 s (Simulator(round_s=1); passes without a change skipped), so that a pass "
                     "comes at each of the simulator's integer event times, not at the next 300 s round",
}


def variants() -> list[str]:
    """``tiresias`` and its cumulative variants (perjob.ladder)."""
    return perjob.ladder("tiresias", STEPS)


# ----------------------------------------------------------------------------- the inputs
def draw(start: int, jobs: int, compress: float) -> list[dict]:
    """Jobs ``start`` .. ``start + jobs - 1`` of the Philly sample in arrival order, arrivals from 0 divided
    by ``compress``, times in whole seconds."""
    from halyard.traces import read_trace

    sample = sorted(read_trace(SAMPLE, seed=0, strict=True).jobs, key=lambda j: (j.submit_time, j.job_id))
    window = sample[start:start + jobs]
    t0 = window[0].submit_time
    return [{"id": i, "submit": int((j.submit_time - t0) / compress), "gpus": j.num_gpus, "model": j.model,
             "duration": max(1, int(j.duration_s or 0))} for i, j in enumerate(window)]


def write_inputs(rows: list[dict], spec: tuple[int, ...], folder: Path) -> None:
    """The simulator's trace.csv and cluster.csv, and Halyard's halyard.csv and cluster.toml."""
    from halyard.datamodel import JobSpec
    from halyard.traces import write_trace

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "trace.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration", "interval"])
        for r, after in zip(rows, [*rows[1:], None], strict=True):
            w.writerow([r["id"], r["gpus"], r["submit"], r["duration"],
                        PUBLIC_MODEL.get(r["model"], PUBLIC_LOW_SKEW_STANDIN), r["duration"],
                        0 if after is None else after["submit"] - r["submit"]])
    switches, nodes, gpus, cpus, mem = spec
    (folder / "cluster.csv").write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
                                        f"{switches},{nodes},{gpus},{cpus},{mem}\n")
    (folder / "cluster.toml").write_text(
        f'name = "tiresias-{switches}x{nodes}x{gpus}"\n'
        f'description = "SymbioticLab/Tiresias cluster spec: {switches} switch x {nodes} nodes x {gpus} V100"\n'
        'spine_oversubscription = 1.0\n\n[[racks]]\nname = "r{i}"\n'
        f"count = {switches}\nuplink_gbit_s = 400\n\n"
        '[[racks.nodes]]\nname = "{rack}-n{i}"\n'
        f'count = {nodes}\ngpu_type = "V100"\ngpus = {gpus}\ncpus = {cpus}\nmemory_gb = {mem}\n'
        'fabric = "nvlink"\nfabric_gbyte_s = 150\nnic_gbit_s = 100\n')
    write_trace([JobSpec(job_id=str(r["id"]), submit_time=float(r["submit"]), model=r["model"], num_gpus=r["gpus"],
                         duration_s=float(r["duration"])) for r in rows], folder / "halyard.csv")


# ----------------------------------------------------------------------------- the two sides
def cplex_shim(folder: Path) -> Path:
    """A stand-in for the names ``lp.py`` imports from IBM CPLEX (never called with ``--scheme=count``)."""
    shim = folder / "py2-shim" / "cplex"
    (shim / "six").mkdir(parents=True, exist_ok=True)
    (shim / "__init__.py").write_text("# stand-in: lp.py imports cplex; dlas-gpu on the count scheme never calls it\n")
    (shim / "exceptions.py").write_text("class CplexError(Exception):\n    pass\n")
    (shim / "six" / "__init__.py").write_text("")
    (shim / "six" / "moves.py").write_text("range = xrange  # noqa: F821 (Python 2)\n")
    return shim.parent


def run_public(args: argparse.Namespace, folder: Path) -> dict:
    """The authors' simulator, its modules unchanged, on ``folder``'s inputs; per-job submit and end."""
    source = args.checkout.resolve() / "simulator"
    if not (source / "run_sim.py").is_file():
        raise SystemExit(f"--checkout {args.checkout}: no simulator/run_sim.py (give SymbioticLab/Tiresias)")
    log = folder / "public-dlas-gpu"
    (log / "job.csv").unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(cplex_shim(folder)), args.py2_path) if p)}
    before = child_cpu()
    began = time.monotonic()
    out = subprocess.run([args.py2, str(source / "run_sim.py"), "--cluster_spec=" + str(folder / "cluster.csv"),
                          "--scheme=count", "--trace_file=" + str(folder / "trace.csv"), "--schedule=dlas-gpu",
                          "--log_path=" + str(log)], cwd=folder, env=env, capture_output=True, text=True, check=False)
    cpu, wall = child_cpu() - before, time.monotonic() - began
    if out.returncode != 0:
        raise SystemExit(f"the public simulator failed ({out.returncode}):\n{out.stderr[-3000:]}")
    jobs = {}
    with open(log / "job.csv", newline="") as f:
        for row in csv.reader(f):  # count scheme: event_time, job_id, num_gpu, submit, start, end, executed, jct, ...
            if row and row[1].isdigit():
                jobs[row[1]] = {"submit": float(row[3]), "end": float(row[5]), "preempt": int(row[10])}
    return {"policy": "dlas-gpu (count)", "cpu_s": cpu, "wall_s": wall, "jobs": jobs}


def halyard_policy_and_perf(name: str) -> tuple[object, object]:
    """Halyard's ``tiresias`` with the :data:`STEPS` named in ``name`` switched on."""
    from halyard.emulator import PerformanceModel
    from halyard.policies import make_policy
    from halyard.policies.staged import StagedPolicy
    from halyard.policies.tiresias import TIRESIAS_THRESHOLDS_GPU_S, SkewConsolidation, TwoDimensionalLas

    steps = named_steps(name, STEPS)
    catalog = catalog_for(steps)
    perf = PerformanceModel(catalog, communication="fixed-duration" not in steps)
    if not {"any-gpus", "three-queues", "reference-lists", "late-demotion"} & set(steps):
        return make_policy("tiresias"), perf
    ordering = TwoDimensionalLas(PUBLIC_THRESHOLDS_GPU_S if "three-queues" in steps else TIRESIAS_THRESHOLDS_GPU_S,
                                 reference_lists="reference-lists" in steps, late_demotion="late-demotion" in steps)
    placement = SkewConsolidation(is_high_skew=lambda _model: False) if "any-gpus" in steps else SkewConsolidation()
    return StagedPolicy(name, ordering, placement=placement), perf


def run_halyard_child(args: argparse.Namespace) -> int:
    """One Halyard run in this (child) process; prints its per-job submit and end as JSON."""
    from halyard.datamodel import load_cluster
    from halyard.scheduling import Simulator
    from halyard.traces import read_trace

    policy, perf = halyard_policy_and_perf(args.variant)
    jobs = list(read_trace(Path(args.inputs) / "halyard.csv", strict=True).jobs)
    sim = Simulator(load_cluster(str(Path(args.inputs) / "cluster.toml")), policy, perf,
                    round_s=1.0 if "second-rounds" in args.variant.split("+") else 300.0)
    json.dump(perjob.simulated(args.variant, sim, jobs), sys.stdout)
    return 0


def run_halyard(variant: str, folder: Path) -> dict:
    return perjob.child([sys.executable, str(Path(__file__).resolve()), "halyard", "--inputs", str(folder),
                         "--variant", variant])


# ----------------------------------------------------------------------------- the join
def worst(public: dict, ours: dict, n: int = 8) -> list[dict]:
    """The ``n`` jobs whose JCTs differ most (Halyard - public), with what each side did."""
    jp, jh = jcts(public), jcts(ours)
    keys = sorted(set(jp) & set(jh), key=lambda k: -abs(jh[k] - jp[k]))[:n]
    return [{"job": k, "public_jct_s": jp[k], "halyard_jct_s": jh[k], "public_preempt": public["jobs"][k]["preempt"],
             "halyard_preempt": ours["jobs"][k]["preempt"]} for k in keys]


# ----------------------------------------------------------------------------- the page

def ladder_table(data: dict) -> str:
    pub = data["public"]
    sp = stats(pub)
    lines = ["| run | mean JCT (h) | / public | p99 JCT (h) | / public | makespan (h) | / public "
             "| jobs within 5 % | CPU s (child) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
             f"| public simulator, dlas-gpu (count) | {hours(sp['mean_jct_s'])} | 1.000 "
             f"| {hours(sp['p99_jct_s'])} | 1.000 "
             f"| {hours(sp['makespan_s'])} | 1.000 | 100% | {sp['cpu_s']:.2f} |"]
    for v in variants():
        run = data["halyard"][v]
        s = stats(run)
        lines.append(f"| Halyard `{v}` | {hours(s['mean_jct_s'])} | {s['mean_jct_s'] / sp['mean_jct_s']:.3f} "
                     f"| {hours(s['p99_jct_s'])} | {s['p99_jct_s'] / sp['p99_jct_s']:.3f} | {hours(s['makespan_s'])} "
                     f"| {s['makespan_s'] / sp['makespan_s']:.3f} | {agree(pub, run):.0%} | {s['cpu_s']:.2f} |")
    return "\n".join(lines) + "\n"


def steps_table(data: dict) -> str:
    lines = ["| step | what it changes | mean JCT, with / without | makespan, with / without "
             "| jobs within 5 % of public, without -> with |", "|---|---|---:|---:|---|"]
    pub, names = data["public"], variants()
    for before, after in itertools.pairwise(names):
        a, b = data["halyard"][before], data["halyard"][after]
        sa, sb = stats(a), stats(b)
        step = after.rsplit("+", 1)[1]
        lines.append(f"| `{step}` | {STEPS[step]} | {sb['mean_jct_s'] / sa['mean_jct_s']:.3f} "
                     f"| {sb['makespan_s'] / sa['makespan_s']:.3f} | {agree(pub, a):.0%} -> {agree(pub, b):.0%} |")
    return "\n".join(lines) + "\n"


def worst_table(data: dict) -> str:
    last = variants()[-1]
    lines = [f"| job | GPUs | public JCT (h) | `{last}` JCT (h) | preemptions public / Halyard |",
             "|---|---:|---:|---:|---|"]
    gpus = {str(r["id"]): r["gpus"] for r in data["trace"]}
    for w in worst(data["public"], data["halyard"][last]):
        lines.append(f"| {w['job']} | {gpus[w['job']]} | {hours(w['public_jct_s'])} | {hours(w['halyard_jct_s'])} "
                     f"| {w['public_preempt']} / {w['halyard_preempt']} |")
    return "\n".join(lines) + "\n"


def cpu_table(data: dict) -> str:
    """Issue 38's peer row: both sides' child-process CPU on the same jobs."""
    pub, ours = data["public"], data["halyard"]["tiresias"]
    last = data["halyard"][variants()[-1]]
    return ("| peer | configuration | peer CPU s | Halyard CPU s (`tiresias` / every step on) | ratio "
            "| mean JCT agreement |\n|---|---|---:|---:|---:|---|\n"
            f"| SymbioticLab/Tiresias simulator (Python 2.7) | {data['config']} | {pub['cpu_s']:.2f} "
            f"| {ours['cpu_s']:.2f} / {last['cpu_s']:.2f} | {pub['cpu_s'] / ours['cpu_s']:.2f}x / "
            f"{pub['cpu_s'] / last['cpu_s']:.2f}x "
            f"| {stats(last)['mean_jct_s'] / stats(pub)['mean_jct_s']:.3f} (every step on) |\n")


def render_page(data: dict) -> str:
    """The page: the template with each workload's tables, and the CPU rows of every workload."""
    blocks = []
    for name, w in data["workloads"].items():
        sp = stats(w["public"])
        blocks.append(f"### {name}: {w['config']}\n\nThe public simulator: mean JCT {hours(sp['mean_jct_s'])} h, "
                      f"makespan {hours(sp['makespan_s'])} h.\n\n" + ladder_table(w) + "\nEach step on its own:\n\n"
                      + steps_table(w) + "\nThe jobs that still differ most, every step on:\n\n" + worst_table(w))
    cpu = [cpu_table(w).splitlines() for w in data["workloads"].values()]
    return TEMPLATE.read_text(encoding="utf-8").format(
        command=data["command"], commit=data["commit"], workloads="\n".join(blocks),
        cpu="\n".join([*cpu[0][:2], *(c[2] for c in cpu)]) + "\n")


def pages(docs: Path) -> dict[Path, str]:
    """The page rendered from the stored JSON, no simulation (tests/test_reproduction_pages.py)."""
    return {docs / PAGE_NAME: render_page(json.loads((docs / JSON_NAME).read_text(encoding="utf-8")))}


# ----------------------------------------------------------------------------- main
def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "halyard":
        p = argparse.ArgumentParser(prog="tiresias_public_perjob.py halyard")
        p.add_argument("halyard")
        p.add_argument("--inputs", required=True)
        p.add_argument("--variant", required=True)
        return run_halyard_child(p.parse_args())
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", type=Path, help="a checkout of SymbioticLab/Tiresias (read only)")
    p.add_argument("--py2", default="python2.7", help="a Python 2.7 (the simulator's README: python2.7 is required)")
    p.add_argument("--py2-path", default="", help="PYTHONPATH entry holding numpy for --py2")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--work", type=Path, default=ROOT / "out" / "tiresias-public")
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
        data = {"command": "python benchmarks/tiresias_public_perjob.py " + shlex.join(sys.argv[1:]),
                "commit": commit or "not a git checkout", "workloads": {}}
        for name in args.workloads:
            start, jobs, compress, cluster = WORKLOADS[name]
            rows = draw(start, jobs, compress)
            spec = CLUSTER_SPECS[cluster]
            folder = args.work / name
            write_inputs(rows, spec, folder)
            w = {"config": (f"{len(rows)} Philly-sample jobs ({start}-{start + len(rows) - 1}), arrivals / "
                            f"{compress:g}, on {cluster}.csv ({spec[0]} x {spec[1]} x {spec[2]} GPUs)"),
                 "trace": rows, "public": run_public(args, folder), "halyard": {}}
            print(f"{name} public: {stats(w['public'])}", file=sys.stderr, flush=True)
            for v in variants():
                w["halyard"][v] = run_halyard(v, folder)
                print(f"{name} halyard {v}: {stats(w['halyard'][v])} agree {agree(w['public'], w['halyard'][v]):.0%}",
                      file=sys.stderr, flush=True)
            data["workloads"][name] = w
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / JSON_NAME).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    data = json.loads((args.out / JSON_NAME).read_text(encoding="utf-8"))
    if TEMPLATE.is_file():
        for path, text in pages(args.out).items():
            path.write_text(text, encoding="utf-8")
    for name, w in data["workloads"].items():
        print(f"{name}: {w['config']}\n" + ladder_table(w) + "\n" + steps_table(w))
    print(render_page(data).split("## CPU", 1)[-1] if TEMPLATE.is_file() else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
