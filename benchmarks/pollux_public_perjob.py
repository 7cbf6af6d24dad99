"""Pollux side by side with its authors' simulator (petuum/adaptdl, branch ``osdi21-artifact``, ``simulator/``).

    # a checkout of petuum/adaptdl at osdi21-artifact (read, never copied) and a Python 3.8 with what its
    # simulator imports: python3.8 -m venv V && V/bin/pip install "numpy~=1.19.2" "pandas~=1.1.2" \\
    #   "pymoo~=0.4.2.1" "scipy~=1.5.2" autograd
    nice -n 10 .venv/bin/python benchmarks/pollux_public_perjob.py --checkout /work/ext/adaptdl \\
        --pollux-python /work/ext/adaptdl-venv/bin/python
    .venv/bin/python benchmarks/pollux_public_perjob.py --from-json   # the page again, no simulation

Halyard writes, into ``<work>/<workload>/``, a window of its Pollux sample
(``src/halyard/data/traces/pollux_workload-6.csv``, the artifact's ``workloads/workload-6.csv`` as
``read_trace`` loads it: arrivals, applications and sizes as published, each job's length drawn from its
application's GPU-time bucket) and the simulator's inputs for those jobs:

* ``workload.csv`` in the layout of its ``workloads/*.csv`` (``name,time,application,num_replicas,batch_size``),
  each job its own application (``application`` = the job's name), so that each job has its own length;
* ``traces/<job>/`` in the layout of its ``traces/<application>/`` that ``applications.Application`` reads:
  ``placements.csv`` (step and sync time of every placement the simulator can give it on this cluster, at
  the local batch it runs there), an empty ``scalability.csv`` (never read: every placement is listed) and
  ``validation-<M0>.csv`` plus ``validation-1.csv`` (equal; the lower bound of its batch interpolation);
* ``halyard.csv`` and ``cluster.toml``: the same jobs and cluster for Halyard.

**The job speeds both sides see are Halyard's** (the choice the page explains): a job's step time on a
placement is the iteration time Halyard's performance model charges it there (``job_timing`` of the
job's one data-parallel stage keeping its global batch ``M0``, the plan Halyard's ``pollux`` runs it under)
and its sync time the exposed communication; its length is its iterations of ``M0``, written as the
validation trace's ``progress`` (10 epochs). Its gradient statistics are ``grad_sqr = 1``,
``grad_var = 0`` and ``M0`` is both its initial and its largest batch, so the simulator's statistical
efficiency is 1 and a step is one iteration of progress: the batch adaptation half of Pollux is out of
this comparison, because Halyard's jobs train their submitted batch (docs/pollux.md).

Then the authors' simulator runs ``simulate()`` of ``simulator.py`` with ``--policy pollux`` (its
defaults: ``--interval 60``, no interference, 4 GPUs per node) under ``--pollux-python``, its modules
imported unchanged from the checkout; the child fills the simulator's ``APPLICATIONS`` table with the
written traces (``Application(<dir>, init_batch_size=M0, max_batch_size=M0)``) and seeds numpy's
global generator (its genetic search draws from it) before the call. Halyard's simulator runs the
``pollux`` preset on the same jobs with 60 s rounds, then the cumulative ladder of :data:`STEPS`, each a
named option off by default; the two are joined per job (benchmarks/perjob.py): mean JCT, p99 JCT,
makespan, the fraction of jobs within 5 %, and each side's CPU seconds (issue 38).

Not part of the tests (the inputs and the join are: tests/test_pollux_public_inputs.py; the page's rendering
from the JSON: tests/test_reproduction_pages.py).
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

import perjob  # benchmarks/ is not a package: found on sys.path
from perjob import (  # benchmarks/ is not a package: found on sys.path
    agree,
    common,
    hours,
    jcts,
    named_steps,
    stats,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "halyard" / "data" / "traces" / "pollux_workload-6.csv"
TEMPLATE = ROOT / "benchmarks" / "pollux_public_page.md"
JSON_NAME = "pollux-public-comparison.json"
PAGE_NAME = "pollux-public-comparison.md"
ROUND_S = 60  # simulator.py: --interval default 60 (Pollux §4: re-optimised every 60 s)
RESCALE_S = 30.0  # simulator.py Job.reallocate: rescale_time = 30 at every new allocation, first one included
GPUS_PER_NODE = 4  # simulator.py: --num-gpus default 4 (Cluster asserts 1 <= num_gpus <= 4)
EPOCHS = 10  # rows of the written validation traces: the job's iterations in ten equal epochs
# Applications whose GPU-time bucket (10-1,000 GPU-hours, halyard.traces.pollux) would keep the simulator's
# genetic search (100 generations x 100 states every 60 s) busy for hours: left out of the windows.
LONG_APPLICATIONS = ("imagenet", "yolov3")
# name -> (first job of the window over the sample's other jobs, jobs, nodes of 4 GPUs)
WORKLOADS = {"jobs-0-29": (0, 30, 4), "jobs-30-59": (30, 30, 4)}
# Halyard's differences from the public simulator, each an option off by default, switched on one after
# another (cumulative), so that each step's effect is measured on its own.
STEPS = {
    "submitted-batch": "allocations ranked at the submitted batch M0, the one both sides train "
                       "(Pollux(adapt_batch=False)); the preset ranks them at the goodput-optimal batch of "
                       "Halyard's noise scales, which no job here trains, and the simulator's efficiency is 1",
    "rounds-only": "a pass only at 60 s round boundaries (Simulator(rounds_only=True); simulator.py Cluster.step: "
                   "an arrival or a freed GPU waits for the next 60 s step)",
    "penalize-starts": "the re-allocation factor on a job's first GPUs too (Pollux(penalize_starts=True); "
                       "pollux.py Problem._evaluate multiplies every state that differs from the current one)",
    "pollux-costs": f"{RESCALE_S:.0f} s lost at every new allocation: start, resize, move and restart "
                    f"(PerformanceModel(start_cost_s={RESCALE_S:.0f}, resize_cost_s={RESCALE_S:.0f}) and a catalog "
                    f"with restart_fixed_s = {RESCALE_S:.0f}, checkpoint_state_factor = 0; simulator.py "
                    "Job.reallocate sets rescale_time = 30, no checkpoint)",
    "explore-doubling": "a job gets at most twice the largest GPU count it has run on, 1 at first "
                        "(Pollux(explore_doubling=True); simulator.py get_pollux_job_info: max_replicas = "
                        "min(max(2 * max_profiled_replicas, 1), ...))",
    "isolated-links": "no slow-down of jobs that share a NIC (PerformanceModel(contention='off'); the simulator's "
                      "step times are each placement's own, and its interference is 0 by default)",
}


def variants() -> list[str]:
    """``pollux`` and its cumulative variants (perjob.ladder)."""
    return perjob.ladder("pollux", STEPS)


# ----------------------------------------------------------------------------- the public side (Python 3.8)
def run_public(args: argparse.Namespace) -> int:
    """The simulator's ``simulate()``, its modules unchanged, on ``<inputs>``; prints per-job submit and end
    (``end`` None for a job it did not finish), restarts and CPU seconds as JSON."""
    import contextlib
    import logging

    source = Path(args.checkout).resolve() / "simulator"
    if not (source / "simulator.py").is_file():
        raise SystemExit(f"--checkout {args.checkout}: no simulator/simulator.py (give petuum/adaptdl at "
                         "osdi21-artifact)")
    inputs = Path(args.inputs).resolve()
    sys.path.insert(0, str(source))
    os.chdir(source)
    logging.disable(logging.CRITICAL)
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        import applications
        import numpy as np
        import simulator

        with open(inputs / "workload.csv", newline="") as f:
            batches = {r["name"]: int(r["batch_size"]) for r in csv.DictReader(f)}
        applications.APPLICATIONS.clear()  # the table simulator.py reads (its own import of the same dict)
        for name, m0 in batches.items():
            applications.APPLICATIONS[name] = applications.Application(
                str(inputs / "traces" / name), init_batch_size=m0, max_batch_size=m0)
        np.random.seed(args.seed)  # pollux.py's NSGA-II, crossover, mutation and repair draw from np.random
        # simulate()'s loop without its per-step printing, with a cap on the steps: Cluster as simulate()
        # builds it for --policy pollux (its defaults: no autoscaling, no interference)
        cluster = simulator.Cluster(simulator.pandas.read_csv(inputs / "workload.csv"), simulator.PolluxPolicy(),
                                    args.nodes, num_gpus=GPUS_PER_NODE, interference=0.0)
        began = time.process_time()
        while not cluster.all_complete() and cluster.current_time < args.max_hours * 3600:
            cluster.step(ROUND_S)
            if len(cluster.logs) % 10 == 0:
                finished = sum(j.completion_time is not None for j in cluster.jobs)
                print(f"t={cluster.current_time} s: {finished} of {len(cluster.jobs)} done, "
                      f"{time.process_time() - began:.0f} s CPU", file=sys.stderr, flush=True)
        cpu = time.process_time() - began
        logs, done = cluster.logs, cluster.get_jcts()
    last = {j["name"]: j for j in logs[-1]["submitted_jobs"]}
    out = {}
    for name in batches:
        j = last[name]
        out[name] = {"submit": float(j["submission_time"]),
                     "end": float(j["submission_time"] + done[name]) if name in done else None,
                     "restarts": j["num_restarts"]}
    json.dump({"policy": "pollux", "sim_cpu_s": cpu, "steps": len(logs), "jobs": out}, sys.stdout)
    return 0


# ----------------------------------------------------------------------------- the inputs
def cluster_toml(nodes: int) -> str:
    """``nodes`` V100 servers of 4 GPUs in one rack (the simulator's cluster has no racks)."""
    from halyard.testing.cluster import small_cluster_toml

    return small_cluster_toml(nodes, GPUS_PER_NODE, nodes_per_rack=nodes)


def window(start: int, n: int) -> list:
    """Jobs ``start .. start + n - 1`` of the sample, the long applications left out (:data:`LONG_APPLICATIONS`)."""
    from halyard.traces import read_trace

    jobs = [j for j in read_trace(SAMPLE, strict=True).jobs if j.extra["application"] not in LONG_APPLICATIONS]
    return jobs[start:start + n]


def placements(nodes: int, gpus: int) -> list[tuple[int, ...]]:
    """Every placement the simulator can give a job on ``nodes`` nodes of ``gpus`` GPUs, as its
    ``Application.get_throughput`` looks it up: the GPUs on each node used, zeros dropped, rotated to the
    lexicographically smallest rotation."""
    out = set()
    for k in range(1, nodes + 1):
        for p in itertools.product(range(1, gpus + 1), repeat=k):
            out.add(min(p[i:] + p[:i] for i in range(k)))
    return sorted(out, key=lambda p: (sum(p), len(p), p))


class Timings:
    """Halyard's iteration time of a job on a placement (per-node GPU counts on the first nodes of the
    cluster), as its ``pollux`` runs it: one data-parallel stage keeping the global batch, the runtime plan
    it needs to fit memory; memoised by the placement's sorted counts."""

    def __init__(self, cluster) -> None:
        from halyard.emulator import PerformanceModel
        from halyard.policies.pollux import Pollux
        from halyard.scheduling import SchedulingCore

        self.cluster = cluster
        self.perf = PerformanceModel()
        self.view = SchedulingCore(cluster, Pollux(), self.perf).view(0.0)
        self._memo: dict = {}

    def time(self, spec, placement: tuple[int, ...]) -> tuple[float, float]:
        """(iteration seconds, exposed communication seconds) of ``spec`` on ``placement``."""
        from halyard.datamodel import Allocation, NodeAllocation, StagePlan
        from halyard.policies.adaptive import with_runtime_plan

        key = (spec.model, spec.batch_size, spec.num_gpus, tuple(sorted(placement, reverse=True)))
        if key not in self._memo:
            nodes = self.cluster.nodes
            parts = tuple(NodeAllocation(n.name, tuple(range(k)), n.proportional_cpus(k), n.proportional_memory_mb(k))
                          for n, k in zip(nodes, key[3], strict=False))
            g = sum(placement)
            alloc = with_runtime_plan(self.view, spec, Allocation(parts, stages=(StagePlan(g, data=g),)))
            if not self.perf.fits_plan(spec, alloc, self.cluster):
                raise ValueError(f"{spec.job_id}: no plan of {placement} holds {spec.model}")
            it = self.perf.job_timing(spec, alloc, self.cluster).iteration
            self._memo[key] = (float(it.total_s), float(it.exposed_s))
        return self._memo[key]


def tightest(gpus: int) -> tuple[int, ...]:
    """The consolidated placement of ``gpus`` GPUs: full nodes, then the rest."""
    return (GPUS_PER_NODE,) * (gpus // GPUS_PER_NODE) + ((gpus % GPUS_PER_NODE,) if gpus % GPUS_PER_NODE else ())


def write_inputs(jobs: list, nodes: int, folder: Path) -> list[dict]:
    """The simulator's workload and traces and Halyard's trace and cluster for ``jobs`` (canonical specs as
    ``read_trace`` gives them) on ``nodes`` nodes of 4 GPUs; one row per job for the page."""
    import dataclasses

    from halyard.datamodel import parse_cluster
    from halyard.traces import write_trace

    folder.mkdir(parents=True, exist_ok=True)
    toml = cluster_toml(nodes)
    (folder / "cluster.toml").write_text(toml)
    cluster = parse_cluster(toml, source="pollux-public")
    timings = Timings(cluster)
    total = nodes * GPUS_PER_NODE
    shapes = placements(nodes, GPUS_PER_NODE)
    t0 = min(j.submit_time for j in jobs)
    rows, specs = [], []
    for j in jobs:
        per_gpu = timings.perf.reference_batch(j.model)
        m0 = j.num_gpus * per_gpu
        if m0 < total:
            raise ValueError(f"{j.job_id}: global batch {m0} under {total} GPUs leaves a GPU no sample")
        # batch_size stays the loader's 0 (the catalog's reference per GPU), as Halyard runs the sample
        spec = dataclasses.replace(j, submit_time=j.submit_time - t0, duration_s=None,
                                   iterations=1, min_gpus=1, max_gpus=total, extra={})
        step_s = timings.time(spec, tightest(j.num_gpus))[0]
        spec = dataclasses.replace(spec, iterations=max(1, round(j.duration_s / step_s)))
        specs.append(spec)
        trace = folder / "traces" / j.job_id
        trace.mkdir(parents=True, exist_ok=True)
        with open(trace / "placements.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["placement", "local_bsz", "step_time", "sync_time"])
            for p in shapes:
                step, sync = timings.time(spec, p)
                local = m0 // sum(p)  # Job.update_local_bsz: atomic_bsz = min(ceil(M0 / r), int(M0 / r))
                for b in (local, local + 1):  # interp1d needs two points; both the time at M0
                    w.writerow(["".join(map(str, p)), b, repr(step), repr(sync)])
        (trace / "scalability.csv").write_text("num_nodes,num_replicas,local_bsz,step_time,sync_time\n")
        epochs = "".join(f"{spec.iterations * k / EPOCHS!r},{spec.iterations * k / EPOCHS!r},{k},1.0,0.0\n"
                         for k in range(1, EPOCHS + 1))
        for batch in sorted({1, m0}):
            (trace / f"validation-{batch}.csv").write_text("progress,iteration,metric,grad_sqr,grad_var\n" + epochs)
        rows.append({"id": j.job_id, "application": j.extra["application"], "model": j.model, "gpus": j.num_gpus,
                     "batch": m0, "iterations": spec.iterations, "submit": spec.submit_time,
                     "step_s": step_s})
    with open(folder / "workload.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "time", "application", "num_replicas", "batch_size"])
        for r in rows:
            w.writerow([r["id"], repr(r["submit"]), r["id"], r["gpus"], r["batch"]])
    write_trace(specs, folder / "halyard.csv")
    return rows


# ----------------------------------------------------------------------------- Halyard's side
def halyard_policy_and_perf(name: str) -> tuple[object, object]:
    """Halyard's ``pollux`` with the :data:`STEPS` named in ``name`` switched on."""
    import dataclasses

    from halyard.emulator import PerformanceModel
    from halyard.emulator.catalog import load_catalog
    from halyard.policies.pollux import Pollux

    steps = named_steps(name, STEPS)
    catalog = load_catalog()
    costs = {}
    if "pollux-costs" in steps:
        catalog = dataclasses.replace(catalog, constants=dataclasses.replace(
            catalog.constants, restart_fixed_s=RESCALE_S, checkpoint_state_factor=0.0))
        costs = {"start_cost_s": RESCALE_S, "resize_cost_s": RESCALE_S}
    perf = PerformanceModel(catalog, contention="off" if "isolated-links" in steps else "fair", **costs)
    return (Pollux(name=name, adapt_batch="submitted-batch" not in steps, penalize_starts="penalize-starts" in steps,
                   explore_doubling="explore-doubling" in steps), perf)


def run_halyard_child(args: argparse.Namespace) -> int:
    from halyard.datamodel import load_cluster
    from halyard.scheduling import Simulator
    from halyard.traces import read_trace

    inputs = Path(args.inputs)
    policy, perf = halyard_policy_and_perf(args.variant)
    sim = Simulator(load_cluster(str(inputs / "cluster.toml")), policy, perf, round_s=float(ROUND_S),
                    rounds_only="rounds-only" in named_steps(args.variant, STEPS))
    jobs = list(read_trace(inputs / "halyard.csv", strict=True).jobs)
    json.dump(perjob.simulated(args.variant, sim, jobs), sys.stdout)
    return 0


# ----------------------------------------------------------------------------- the page
def ladder_table(data: dict) -> str:
    return perjob.ladder_table(data, variants(), "Pollux simulator, `--policy pollux`")


def steps_table(data: dict) -> str:
    return perjob.steps_table(data, variants(), STEPS)


def perjob_table(data: dict) -> str:
    """Every job: its application, request and length, the public JCT and each Halyard run's over it."""
    pub = data["public"]
    jp = jcts(pub)
    names = variants()
    lines = ["| job | model | GPUs asked | iterations | s / iteration asked | public JCT (h) | public restarts | "
             + " | ".join(f"`{v.replace('pollux+', '+').split('+')[-1] or v}` / public" for v in names) + " |",
             "|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(names)]
    for r in data["trace"]:
        k = r["id"]
        cells = []
        for v in names:
            jh = jcts(data["halyard"][v])
            cells.append("—" if k not in jh else (f"{hours(jh[k])} h" if k not in jp else f"{jh[k] / jp[k]:.2f}"))
        lines.append(f"| {k} | {r['model']} | {r['gpus']} | {r['iterations']} | {r['step_s']:.3f} "
                     f"| {hours(jp[k]) if k in jp else 'not done'} | {pub['jobs'][k]['restarts']} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def steps_apart(data: dict) -> str:
    """How far the jobs outside 5 % are from the simulator's JCT with every step on, in its 60 s steps."""
    jp, jh = jcts(data["public"]), jcts(data["halyard"][variants()[-1]])
    off = sorted((jh[k] - jp[k], k) for k in jp.keys() & jh.keys() if abs(jh[k] - jp[k]) > 0.05 * jp[k])
    near = sum(abs(d) <= 2 * ROUND_S for d, _ in off)
    far = ", ".join(f"{k} ({d:+.0f} s)" for d, k in off if abs(d) > 2 * ROUND_S) or "none"
    return (f"With every step on, {len(off)} of {len(jp)} jobs are outside 5 % of the simulator's JCT; {near} of "
            f"them within two of its 60 s steps (120 s). Further: {far}.\n")


def render_page(data: dict) -> str:
    blocks, cpu = [], []
    for name, w in data["workloads"].items():
        blocks.append(f"### {name}: {w['config']}\n\n" + ladder_table(w) + "\n" + steps_apart(w)
                      + "\nEach step on its own:\n\n"
                      + steps_table(w) + "\nEvery job (JCT of each Halyard run over the public one; the columns "
                      "after the preset are named by the step they add):\n\n" + perjob_table(w))
        last = w["halyard"][variants()[-1]]
        pub, ours = w["public"], w["halyard"]["pollux"]
        cpu.append(f"| {name} | {pub['cpu_s']:.1f} ({pub['sim_cpu_s']:.1f} in its step loop) "
                   f"| {ours['cpu_s']:.2f} ({ours['sim_cpu_s']:.2f} in `run`) / {last['cpu_s']:.2f} "
                   f"| {pub['cpu_s'] / ours['cpu_s']:.0f}x ({pub['sim_cpu_s'] / ours['sim_cpu_s']:.0f}x) |")
    cpu_table = ("| workload | Pollux simulator CPU s | Halyard CPU s (`pollux` / every step on) "
                 "| ratio, child (simulation only) |\n|---|---:|---:|---:|\n" + "\n".join(cpu) + "\n")
    return TEMPLATE.read_text(encoding="utf-8").format(command=data["command"], commit=data["commit"],
                                                        workloads="\n".join(blocks), cpu=cpu_table)


def pages(docs: Path) -> dict[Path, str]:
    """The page rendered from the stored JSON, no simulation (tests/test_reproduction_pages.py)."""
    return {docs / PAGE_NAME: render_page(json.loads((docs / JSON_NAME).read_text(encoding="utf-8")))}


# ----------------------------------------------------------------------------- main
def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in ("public", "halyard"):
        p = argparse.ArgumentParser(prog=f"pollux_public_perjob.py {sys.argv[1]}")
        p.add_argument("side")
        p.add_argument("--inputs", required=True)
        p.add_argument("--checkout")
        p.add_argument("--nodes", type=int, default=4)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--max-hours", type=float, default=24.0)
        p.add_argument("--variant", default="pollux")
        args = p.parse_args()
        return run_public(args) if args.side == "public" else run_halyard_child(args)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", type=Path, help="a checkout of petuum/adaptdl at osdi21-artifact (read only)")
    p.add_argument("--pollux-python", default=sys.executable, help="a Python with what the simulator imports")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--seed", type=int, default=0, help="numpy's global seed in the simulator's process")
    p.add_argument("--work", type=Path, default=ROOT / "out" / "pollux-public")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "reproductions")
    p.add_argument("--from-json", action="store_true", help="no simulation: rewrite the page from the JSON")
    args = p.parse_args()
    if not args.from_json:
        if args.checkout is None:
            p.error("--checkout is required (or --from-json)")
        git = ["git", "-C", str(args.checkout)]
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        branch = subprocess.run([*git, "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        here = str(Path(__file__).resolve())
        argv = sys.argv[1:]
        if "--workloads" in argv:  # the workloads may run in separate processes; the page names them all
            i = argv.index("--workloads")
            j = next((k for k in range(i + 1, len(argv)) if argv[k].startswith("--")), len(argv))
            argv = argv[:i] + argv[j:]
        command = "python benchmarks/pollux_public_perjob.py " + shlex.join(argv)
        stored = args.out / JSON_NAME
        for name in args.workloads:
            start, n, nodes = WORKLOADS[name]
            folder = args.work / name
            rows = write_inputs(window(start, n), nodes, folder)
            w = {"config": (f"{n} jobs of the Pollux sample (workload-6, {start}-{start + n - 1} of its jobs "
                            f"other than {' and '.join(LONG_APPLICATIONS)}), arrivals from the first, on {nodes} "
                            f"nodes of {GPUS_PER_NODE} V100 GPUs"),
                 "trace": rows,
                 "public": perjob.child([args.pollux_python, here, "public", "--checkout", str(args.checkout),
                                  "--inputs", str(folder), "--nodes", str(nodes), "--seed", str(args.seed)]),
                 "halyard": {}}
            print(f"{name} public: {stats(w['public'])}", file=sys.stderr, flush=True)
            for v in variants():
                w["halyard"][v] = perjob.child([sys.executable, here, "halyard", "--variant", v,
                                                "--inputs", str(folder)])
                h = common(w["public"], w["halyard"][v])
                print(f"{name} halyard {v}: mean {stats(h[1])['mean_jct_s'] / stats(h[0])['mean_jct_s']:.3f}, "
                      f"agree {agree(w['public'], w['halyard'][v]):.0%}", file=sys.stderr, flush=True)
            # each workload merged into the stored JSON as it ends (another process may be running another)
            data = json.loads(stored.read_text(encoding="utf-8")) if stored.is_file() else {"workloads": {}}
            data.update(command=command, commit=f"{commit} ({branch})" if commit else "not a git checkout")
            data["workloads"] = {k: v for k, v in {**data["workloads"], name: w}.items()}
            data["workloads"] = {k: data["workloads"][k] for k in WORKLOADS if k in data["workloads"]}
            args.out.mkdir(parents=True, exist_ok=True)
            stored.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    data = json.loads((args.out / JSON_NAME).read_text(encoding="utf-8"))
    if TEMPLATE.is_file():
        for path, text in pages(args.out).items():
            path.write_text(text, encoding="utf-8")
    for name, w in data["workloads"].items():
        print(f"{name}: {w['config']}\n" + ladder_table(w) + "\n" + steps_table(w))
    return 0


if __name__ == "__main__":
    sys.exit(main())
