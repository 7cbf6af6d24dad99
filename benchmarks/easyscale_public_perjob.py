"""EasyScale side by side with its authors' simulator (the SC'23 artifact), on inputs Halyard writes.

    # a checkout of sUntvoOk/EasyScale_info_for_SC23 (read, never copied) and a Python that has its
    # requirements (numpy, scipy, pandas, autograd), e.g. python3 -m venv V && V/bin/pip install pandas scipy autograd
    nice -n 10 .venv/bin/python benchmarks/easyscale_public_perjob.py --checkout /work/ext/easyscale \\
        --artifact-python /work/ext/es-venv/bin/python          # writes
        docs/reproductions/easyscale-public-comparison.{json,md}
    .venv/bin/python benchmarks/easyscale_public_perjob.py --from-json   # the page again, no simulation

For each workload Halyard writes, into ``<work>/<workload>/``, the artifact's inputs -- ``workload.csv``
in the column layout of its ``simulator/workloads/test.csv`` and ``logs/<application>/logs.json``, the
per-GPU-type step time of each application at each batch size the workload uses (the profiles the
artifact's README says it ships but its repository leaves out: ``logs/`` is git-ignored there), taken
from Halyard's performance model (``ideal_iteration_time``: compute only, as the artifact's step times
are) -- and the same jobs as Halyard traces (``fixed.csv`` for YARN-CS, ``elastic.csv`` for EasyScale).
Then:

* the artifact's simulator runs on them (``public``, in a subprocess under ``--artifact-python``): its
  modules imported unchanged from ``<checkout>/simulator`` through a scratch folder of symbolic links
  (so ``../logs`` resolves to Halyard's profiles), its ``simulate()`` called as its ``run.sh`` calls it
  (``--interval 60``, policies ``fifo`` = YARN-CS, ``easyscale_homo``, ``easyscale``). One adapter,
  because the published ``applications.py`` calls ``Intrajob`` without the ``gpu_mems`` argument that
  the published ``easy_policy.py`` requires and never calls its ``get_perf_candidates()``: the
  adapter passes ``gpu_mems`` = (32, 16, 16) GB (V100, P100, T4; the comment in ``easy_policy.py``)
  and calls ``get_perf_candidates()`` first, as ``easy_policy.py``'s own ``__main__`` does;
* Halyard's simulator runs ``yarn-cs``, ``easyscale-homo`` and ``easyscale-heter`` on the same jobs,
  and the named variants in :data:`VARIANTS`, each of which removes one difference the page names;
* the two are joined per job: mean JCT, p99 JCT, makespan, the fraction of jobs whose JCTs agree within
  :data:`AGREE_S`, and each side's CPU seconds.

Workloads: ``artifact-trace`` is the artifact's own §5.2 trace (``simulator/workloads/test.csv`` read
from the checkout, translated to Halyard's jobs and written back), the run behind the paper's 8.3x /
13.2x; ``artifact-mix-<seed>`` are the draws of benchmarks/reproduce_easyscale.py's ``artifact-mix``
(the artifact's sizes and types, Gavel's run times x 0.01), behind Halyard's 3.95x / 4.19x.
Not part of the tests (the page's rendering from the JSON is: tests/test_reproduction_pages.py).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import itertools
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from perjob import hours, jcts, stats  # benchmarks/ is not a package: found on sys.path

ROOT = Path(__file__).resolve().parents[1]
ROUND_S = 60  # the artifact's run.sh: --interval 60
AGREE_S = 120.0  # a job "agrees" when its two JCTs are within two of the artifact's 60 s rounds
# artifact simulator/applications.py APPLICATIONS: samples per epoch (1 % of each data set)
DATASET_LEN = {"resnet50": 1280000 * 0.01, "vgg19": 1280000 * 0.01, "shufflenetv2": 1280000 * 0.01,
               "swintransformer": 1280000 * 0.01, "yolov3": 16551 * 0.01, "bert": 88641 * 0.01,
               "electra": 88641 * 0.01, "ncf": 4970845 * 0.01}
# artifact application -> Halyard catalog model. Electra has no catalog entry; its artifact step times are
# BERT's within 0.5 % (overall-overhead/overhead.csv: 0.442 / 0.605 / 0.681 s against 0.441 / 0.607 / 0.681 s).
HALYARD_MODEL = {"resnet50": "resnet50", "vgg19": "vgg19", "shufflenetv2": "shufflenetv2", "swintransformer": "swint",
                 "yolov3": "yolov3", "bert": "bert-large", "electra": "bert-large", "ncf": "neumf"}
ARTIFACT_APP = {"resnet50": "resnet50", "vgg19": "vgg19", "shufflenetv2": "shufflenetv2", "swint": "swintransformer",
                "yolov3": "yolov3", "bert-large": "bert", "neumf": "ncf"}
GPU_TYPES = ("v100", "p100", "t4")  # the artifact's order (applications.py gpu_types)
GPU_MEMS = (32, 16, 16)  # GB; easy_policy.py: "v100(32G), p100(16G), and t4(16G)"
PUBLIC_POLICIES = {"yarn-cs": "fifo", "easyscale-homo": "easyscale_homo", "easyscale-heter": "easyscale"}
WORKLOADS = ("artifact-trace", *(f"artifact-mix-{s}" for s in range(5)))
# The differences the page names, each a Halyard option off by default, switched on one after another
# (cumulative) so that each step's effect is measured on its own: step -> what it changes.
STEPS = {
    "one-at-a-time": "YARN-CS starts only the head job and nothing behind it (yarn_cs(one_job_at_a_time=True); "
                     "the artifact's FifoPolicy allocates the first active job and breaks)",
    "requested-type": "a job that may not mix GPU types (every job under homo, convolution models under heter) "
                      "runs on the type it asked for only (the artifact's get_placement_proposals filter)",
    "rounds-only": "a scheduling pass only at 60 s round boundaries (Simulator(rounds_only=True); the artifact's "
                   "Cluster.step: arrivals and freed GPUs wait for the next round)",
    "artifact-costs": "20 s at a job's first start, nothing at a resize (PerformanceModel(start_cost_s=20, "
                      "resize_cost_s=0); the artifact's rescale_time, set once, never reset)",
    "free-communication": "no all-reduce and no EST gradient copy (PerformanceModel(communication=False); the "
                          "artifact's step is batch x maxP / compute time)",
    "slowest-first": "a new job starts on one GPU of the slowest type it may use, and waits for it "
                     "(EasyScaleOptions(first_on_slowest=True); the artifact gives a new job the last, least "
                     "speed-up, of its proposals)",
    "artifact-proposals": "a scale-out as fast as the current plan may be granted, and a GPU set a job fell back "
                          "from may be proposed again at once (EasyScaleOptions(allow_equal_speed=True, "
                          "retry_after_rounds=0); the artifact's speed-up >= and no memory of fallbacks)",
}
LADDERS = {"yarn-cs": ("one-at-a-time", "rounds-only", "artifact-costs", "free-communication"),
           "easyscale-homo": ("requested-type", "rounds-only", "artifact-costs", "free-communication",
                              "slowest-first", "artifact-proposals"),
           "easyscale-heter": ("requested-type", "rounds-only", "artifact-costs", "free-communication",
                               "slowest-first", "artifact-proposals")}
ARTIFACT_START_S = 20.0  # artifact simulator.py Job.rescale_time


def ladder(policy: str) -> list[str]:
    """``policy`` and its cumulative variants: ``policy+step1``, ``policy+step1+step2``, ..."""
    steps = LADDERS[policy]
    return ["+".join((policy, *steps[:k])) for k in range(len(steps) + 1)]


JSON_NAME = "easyscale-public-comparison.json"
PAGE_NAME = "easyscale-public-comparison.md"


# ----------------------------------------------------------------------------- the artifact's side
def run_public(args: argparse.Namespace) -> int:
    """Run the artifact's simulator (its modules unchanged) on ``<inputs>/workload.csv``; print JSON."""
    import logging

    checkout = Path(args.checkout).resolve()
    source = checkout / "simulator"
    if not (source / "simulator.py").is_file():
        raise SystemExit(f"--checkout {checkout}: no simulator/simulator.py (give sUntvoOk/EasyScale_info_for_SC23)")
    inputs = Path(args.inputs).resolve()
    shadow = inputs / "artifact"
    (shadow / "simulator").mkdir(parents=True, exist_ok=True)
    for module in source.glob("*.py"):
        link = shadow / "simulator" / module.name
        if not link.is_symlink():
            link.symlink_to(module)
    if not (shadow / "logs").is_symlink():
        (shadow / "logs").symlink_to(inputs / "logs", target_is_directory=True)
    sys.path.insert(0, str(shadow / "simulator"))
    os.chdir(shadow / "simulator")
    logging.disable(logging.CRITICAL)  # its FifoPolicy logs every job every round at CRITICAL
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        import applications  # the artifact's modules, from the links above
        import easy_policy
        import simulator

        def intrajob(**kwargs: object) -> object:
            """The call applications.py makes, completed as easy_policy.py's __main__ makes it."""
            intra = easy_policy.Intrajob(gpu_mems=GPU_MEMS, **kwargs)
            intra.get_perf_candidates()
            return intra

        applications.Intrajob = intrajob
        began = time.process_time()
        logs, _ = simulator.simulate(argparse.Namespace(workload=str(inputs / "workload.csv"), policy=args.policy,
                                                        interval=ROUND_S, output=None))
        cpu = time.process_time() - began
    final = logs[-1]
    jobs = {j["name"]: {"submit": j["submission_time"], "end": j["completion_time"],
                        "restarts": j["num_restarts"]} for j in final["submitted_jobs"]}
    json.dump({"policy": args.policy, "cpu_s": cpu, "last_round_s": final["timestamp"], "jobs": jobs}, sys.stdout)
    return 0


# ----------------------------------------------------------------------------- Halyard's inputs
def artifact_trace(checkout: Path) -> list[dict]:
    """The artifact's test.csv as rows, repeated names merged as its simulator merges them (an OrderedDict
    keyed by name: the first row's position, the last row's values)."""
    rows: dict[str, dict] = {}
    with open(checkout / "simulator" / "workloads" / "test.csv", newline="") as f:
        for r in csv.DictReader(f):
            rows[r["name"]] = {"name": r["name"], "time": float(r["time"]), "application": r["application"],
                               "max_parallelism": int(r["max_parallelism"]), "batch_size": int(r["batch_size"]),
                               "epochs": float(r["epochs"]),
                               "hetero": bool(int(r["enable_heterogeneous_deterministic"])),
                               "preferred_gpu": r["preferred_gpu"]}
    return list(rows.values())


def mix_rows(seed: int) -> list[dict]:
    """benchmarks/reproduce_easyscale.py's ``artifact-mix`` draw ``seed`` as artifact rows: each job's
    iterations (its run time on its requested GPUs, as Halyard converts it) in epochs of the artifact's data set."""
    from halyard.datamodel import load_cluster
    from halyard.emulator import PerformanceModel
    from halyard.parallelism import needs_homogeneous

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import reproduce_easyscale as rep

    perf, cluster = PerformanceModel(), load_cluster(rep.CLUSTER)
    fixed, _ = rep.traces(0, 1.0, seed, 1.0, rep.WORKLOADS["artifact-mix"], perf, cluster)
    rows = []
    for j in fixed:
        app = ARTIFACT_APP[j.model]
        batch = j.batch_size or perf.reference_batch(j.model)
        rows.append({"name": j.job_id, "time": j.submit_time, "application": app, "max_parallelism": j.num_gpus,
                     "batch_size": batch, "epochs": j.iterations * batch * j.num_gpus / DATASET_LEN[app],
                     "hetero": not needs_homogeneous(j.model), "preferred_gpu": j.gpu_type.lower()})
    return rows


def iterations(row: dict) -> int:
    """Global steps of ``batch x maxP`` samples in the artifact's ``epochs x dataset_len`` (Job.total_progress)."""
    return max(1, round(row["epochs"] * DATASET_LEN[row["application"]] / (row["batch_size"] * row["max_parallelism"])))


def write_inputs(rows: list[dict], folder: Path) -> None:
    """The artifact's workload.csv and logs/*/logs.json, and Halyard's fixed.csv / elastic.csv, for ``rows``."""
    from halyard.datamodel import JobSpec
    from halyard.emulator import PerformanceModel
    from halyard.traces import write_trace

    perf = PerformanceModel()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "workload.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "time", "application", "max_parallelism", "batch_size", "epochs",
                    "enable_heterogeneous_deterministic", "preferred_gpu"])
        for r in rows:
            w.writerow([r["name"], r["time"], r["application"], r["max_parallelism"], r["batch_size"], r["epochs"],
                        int(r["hetero"]), r["preferred_gpu"]])
    for app, model in HALYARD_MODEL.items():  # every application: applications.py loads all eight at import
        ref = perf.reference_batch(model)
        batches = sorted({ref, 2 * ref, *(r["batch_size"] for r in rows if r["application"] == app)})
        step1 = {str(b): {"step1": [{"total_time": perf.ideal_iteration_time(
            JobSpec(job_id="profile", submit_time=0.0, model=model, num_gpus=1, iterations=1, batch_size=b),
            t.upper())} for t in GPU_TYPES]} for b in batches}
        (folder / "logs" / app).mkdir(parents=True, exist_ok=True)
        (folder / "logs" / app / "logs.json").write_text(json.dumps(step1, indent=1) + "\n")
    fixed, elastic = [], []
    for r in rows:
        base = {"job_id": r["name"], "submit_time": r["time"], "model": HALYARD_MODEL[r["application"]],
                "num_gpus": r["max_parallelism"], "batch_size": r["batch_size"], "iterations": iterations(r),
                "extra": {"requested_gpu_type": r["preferred_gpu"].upper()}}
        fixed.append(JobSpec(**base, gpu_type=r["preferred_gpu"].upper()))
        elastic.append(JobSpec(**base, min_gpus=1, max_gpus=r["max_parallelism"],
                               logical_workers=r["max_parallelism"]))
    order = sorted(range(len(rows)), key=lambda i: rows[i]["time"])
    write_trace([fixed[i] for i in order], folder / "fixed.csv")
    write_trace([elastic[i] for i in order], folder / "elastic.csv")


# ----------------------------------------------------------------------------- Halyard's side
def run_halyard(name: str, folder: Path) -> dict:
    """Halyard's simulator on the folder's trace, ``name`` = a policy and the :data:`STEPS` switched on
    (``yarn-cs+one-at-a-time+rounds-only``); per-job submit and end, and the CPU seconds of the run."""
    from halyard.datamodel import load_cluster
    from halyard.emulator import PerformanceModel
    from halyard.policies import make_policy
    from halyard.policies.easyscale import EasyScaleOptions, EasyScalePlacement, EasyScaleProposals, SmallestProposal
    from halyard.policies.ordering import Fifo
    from halyard.policies.staged import StagedPolicy
    from halyard.policies.yarn import yarn_cs
    from halyard.scheduling import Simulator
    from halyard.traces import read_trace

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from reproduce_easyscale import requested_type  # the artifact's type rule, as the reproduction measures it

    policy, *steps = name.split("+")
    jobs = list(read_trace(folder / ("fixed.csv" if policy == "yarn-cs" else "elastic.csv"), strict=True).jobs)
    if "requested-type" in steps:
        jobs = requested_type(policy, jobs)
    costs = {"start_cost_s": ARTIFACT_START_S, "resize_cost_s": 0.0} if "artifact-costs" in steps else {}
    perf = PerformanceModel(communication="free-communication" not in steps, **costs)
    options = EasyScaleOptions(heterogeneous=policy == "easyscale-heter", first_on_slowest="slowest-first" in steps,
                               **({"allow_equal_speed": True, "retry_after_rounds": 0}
                                  if "artifact-proposals" in steps else {}))
    chosen = (yarn_cs(one_job_at_a_time=True, name=name) if "one-at-a-time" in steps
              else make_policy(policy) if policy == "yarn-cs" or options == EasyScaleOptions(options.heterogeneous)
              else StagedPolicy(name, Fifo(), sizing=SmallestProposal(), placement=EasyScalePlacement(options),
                                adjusters=(EasyScaleProposals(options, name=policy),)))
    sim = Simulator(load_cluster("easyscale-64"), chosen, perf, round_s=float(ROUND_S),
                    rounds_only="rounds-only" in steps)
    began = time.process_time()
    sim.run(jobs)
    cpu = time.process_time() - began
    return {"policy": name, "cpu_s": cpu,
            "jobs": {r.spec.job_id: {"submit": r.spec.submit_time, "end": r.end_time}
                     for r in sim.core.records.values()}}


# ----------------------------------------------------------------------------- the join
def agree(a: dict, b: dict) -> float:
    ja, jb = jcts(a), jcts(b)
    both = set(ja) & set(jb)
    return sum(abs(ja[k] - jb[k]) <= AGREE_S for k in both) / max(1, len(both))


# ----------------------------------------------------------------------------- the page

def comparison_table(data: dict) -> str:
    """Per workload and policy: the artifact's and Halyard's means, p99s and makespans, the jobs that agree, CPU."""
    lines = ["| workload | policy | artifact mean JCT (h) | Halyard mean JCT (h) | Halyard / artifact "
             "| artifact p99 (h) | Halyard p99 (h) | artifact makespan (h) | Halyard makespan (h) | jobs within 120 s "
             "| CPU s artifact / Halyard |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, w in data["workloads"].items():
        for policy, public in PUBLIC_POLICIES.items():
            a, h = w["artifact"][public], w["halyard"][policy]
            sa, sh = stats(a), stats(h)
            lines.append(f"| {name} | {policy} | {hours(sa['mean_jct_s'])} | {hours(sh['mean_jct_s'])} "
                         f"| {sh['mean_jct_s'] / sa['mean_jct_s']:.2f}x | {hours(sa['p99_jct_s'])} "
                         f"| {hours(sh['p99_jct_s'])} "
                         f"| {hours(sa['makespan_s'])} | {hours(sh['makespan_s'])} | {agree(a, h):.0%} "
                         f"| {sa['cpu_s']:.1f} / {sh['cpu_s']:.1f} |")
    return "\n".join(lines) + "\n"


def gains_table(data: dict) -> str:
    """EasyScale's gains over YARN-CS (mean JCT and makespan), per simulator, per workload; Halyard also with
    every step of :data:`LADDERS` on."""
    lines = ["| workload | simulator | homo JCT gain | heter JCT gain | homo makespan gain | heter makespan gain "
             "| heter's makespan below homo's |", "|---|---|---:|---:|---:|---:|---|"]
    mix: dict[str, list[dict[str, float]]] = {}
    for name, w in data["workloads"].items():
        sides = (("artifact", w["artifact"], PUBLIC_POLICIES),
                 ("Halyard", w["halyard"], {p: p for p in PUBLIC_POLICIES}),
                 ("Halyard, every step on", w["halyard"], {p: ladder(p)[-1] for p in PUBLIC_POLICIES}))
        for label, runs, names in sides:
            g = gains(runs, names)
            if name.startswith("artifact-mix"):
                mix.setdefault(label, []).append(g)
            lines.append(f"| {name} | {label} | " + gain_cells(g) + " |")
    for label, gs in mix.items():
        mean = {k: sum(g[k] for g in gs) / len(gs) for k in gs[0]}
        lines.append(f"| artifact-mix, mean of {len(gs)} seeds | {label} | " + gain_cells(mean)
                     + f" ({sum(g['homo_makespan_s'] > g['heter_makespan_s'] for g in gs)} of {len(gs)} seeds) |")
    return "\n".join(lines) + "\n"


def gains(runs: dict, names: dict[str, str]) -> dict[str, float]:
    """EasyScale homo's and heter's mean-JCT and makespan gains over YARN-CS in ``runs``, and their makespans."""
    s = {p: stats(runs[n]) for p, n in names.items()}
    base = s["yarn-cs"]
    return {"homo_jct": base["mean_jct_s"] / s["easyscale-homo"]["mean_jct_s"],
            "heter_jct": base["mean_jct_s"] / s["easyscale-heter"]["mean_jct_s"],
            "homo_makespan": base["makespan_s"] / s["easyscale-homo"]["makespan_s"],
            "heter_makespan": base["makespan_s"] / s["easyscale-heter"]["makespan_s"],
            "homo_makespan_s": s["easyscale-homo"]["makespan_s"],
            "heter_makespan_s": s["easyscale-heter"]["makespan_s"]}


def gain_cells(g: dict[str, float]) -> str:
    ratio = g["homo_makespan_s"] / g["heter_makespan_s"]
    return (f"{g['homo_jct']:.2f}x | {g['heter_jct']:.2f}x | {g['homo_makespan']:.2f}x | {g['heter_makespan']:.2f}x "
            f"| {'yes' if ratio > 1 else 'no'}, homo / heter {ratio:.2f}x")


def variants_table(data: dict) -> str:
    """Each policy's ladder (:data:`LADDERS`) against the artifact's run of the same policy, per workload."""
    lines = ["| workload | Halyard run (steps on) | mean JCT (h): artifact / Halyard | Halyard / artifact "
             "| makespan (h): artifact / Halyard | Halyard / artifact | jobs within 120 s |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for name, w in data["workloads"].items():
        for policy, public in PUBLIC_POLICIES.items():
            a = w["artifact"][public]
            sa = stats(a)
            for v in ladder(policy):
                h = w["halyard"][v]
                sh = stats(h)
                lines.append(f"| {name} | {v} | {hours(sa['mean_jct_s'])} / {hours(sh['mean_jct_s'])} "
                             f"| {sh['mean_jct_s'] / sa['mean_jct_s']:.2f}x | {hours(sa['makespan_s'])} / "
                             f"{hours(sh['makespan_s'])} | {sh['makespan_s'] / sa['makespan_s']:.2f}x "
                             f"| {agree(a, h):.0%} |")
    return "\n".join(lines) + "\n"


def steps_table(data: dict) -> str:
    """What each step does on its own: Halyard's mean JCT and makespan with the step on over the same run
    without it (the ladder's previous row), per workload."""
    names = list(data["workloads"])
    lines = ["| policy | step | mean JCT, with / without, per workload (" + ", ".join(names) + ") | makespan, same |",
             "|---|---|---|---|"]
    for policy in PUBLIC_POLICIES:
        lad = ladder(policy)
        for before, after in itertools.pairwise(lad):
            cells = []
            for key in ("mean_jct_s", "makespan_s"):
                ratios = [stats(w["halyard"][after])[key] / stats(w["halyard"][before])[key]
                          for w in data["workloads"].values()]
                cells.append(" ".join(f"{r:.2f}" for r in ratios))
            lines.append(f"| {policy} | {after.rsplit('+', 1)[1]} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def cpu_line(data: dict) -> str:
    a = sum(r["cpu_s"] for w in data["workloads"].values() for r in w["artifact"].values())
    h = sum(w["halyard"][p]["cpu_s"] for w in data["workloads"].values() for p in PUBLIC_POLICIES)
    return (f"CPU seconds over every workload and the three policies: artifact {a:.1f} s, Halyard {h:.1f} s "
            f"(artifact / Halyard = {a / h:.2f}x).\n")


BLOCKS = {"comparison": comparison_table, "gains": gains_table, "variants": variants_table, "steps": steps_table,
          "cpu": cpu_line}


def pages(docs: Path) -> dict[Path, str]:
    """The page's generated blocks from ``docs/reproductions/easyscale-public-comparison.json`` (no simulation)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from reproduce_easyscale import filled

    data = json.loads((docs / JSON_NAME).read_text(encoding="utf-8"))
    return {docs / PAGE_NAME: filled(docs / PAGE_NAME, {k: f(data) for k, f in BLOCKS.items()})}


# ----------------------------------------------------------------------------- main
def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "public":
        p = argparse.ArgumentParser(prog="easyscale_public_perjob.py public")
        p.add_argument("public")
        p.add_argument("--checkout", required=True)
        p.add_argument("--inputs", required=True)
        p.add_argument("--policy", required=True, choices=sorted(PUBLIC_POLICIES.values()))
        return run_public(p.parse_args())
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", type=Path, help="a checkout of sUntvoOk/EasyScale_info_for_SC23 (read only)")
    p.add_argument("--artifact-python", default=sys.executable,
                   help="a Python with the artifact's requirements (numpy, scipy, pandas, autograd)")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--work", type=Path, default=ROOT / "out" / "easyscale-public")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "reproductions")
    p.add_argument("--from-json", action="store_true", help="no simulation: rewrite the page from the JSON")
    args = p.parse_args()
    if not args.from_json:
        if args.checkout is None:
            p.error("--checkout is required (or --from-json)")
        data = {"command": "python benchmarks/easyscale_public_perjob.py " + shlex.join(sys.argv[1:]),
                "commit": subprocess.run(["git", "-C", str(args.checkout), "rev-parse", "HEAD"], capture_output=True,
                                         text=True).stdout.strip() or "not a git checkout",
                "workloads": {}}
        for name in args.workloads:
            rows = artifact_trace(args.checkout) if name == "artifact-trace" else mix_rows(int(name.rsplit("-", 1)[1]))
            folder = args.work / name
            write_inputs(rows, folder)
            w = {"jobs": len(rows), "artifact": {}, "halyard": {}}
            for public in PUBLIC_POLICIES.values():
                out = subprocess.run([args.artifact_python, str(Path(__file__).resolve()), "public",
                                      "--checkout", str(args.checkout), "--inputs", str(folder), "--policy", public],
                                     capture_output=True, text=True, check=False)
                if out.returncode != 0:
                    raise SystemExit(f"artifact {public} on {name} failed:\n{out.stderr[-3000:]}")
                w["artifact"][public] = json.loads(out.stdout)
                print(f"{name} artifact {public}: {stats(w['artifact'][public])}", file=sys.stderr, flush=True)
            for policy in (v for p in PUBLIC_POLICIES for v in ladder(p)):
                w["halyard"][policy] = run_halyard(policy, folder)
                print(f"{name} halyard {policy}: {stats(w['halyard'][policy])}", file=sys.stderr, flush=True)
            data["workloads"][name] = w
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / JSON_NAME).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    page = args.out / PAGE_NAME
    if page.is_file():
        for path, text in pages(args.out).items():
            path.write_text(text, encoding="utf-8")
    data = json.loads((args.out / JSON_NAME).read_text(encoding="utf-8"))
    print("\n".join(f(data) for f in BLOCKS.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
