"""A reduced reproduction of Cassini's evaluation (thesis §4.5) and MLTCP vs fair sharing.

    .venv/bin/python benchmarks/reproduce_cassini.py            # writes
    docs/reproductions/cassini-reproduction*.{md,json,png}

The testbed (§4.5.1): 24 servers of one A100 and one 50 Gbit/s NIC, the logical
topology of Fig. 4.10 (13 switches, 48 links, 2:1 oversubscribed): the built-in cluster
``cassini-testbed`` (6 ToRs of 4 servers, 2 pods of 2 aggregation switches, 3 cores, every
link 50 Gbit/s; the file says how the counts were read). Jobs contend on the switch links
of the routes between the ToRs they span (a one-GPU server's NIC carries one job).

1. **Poisson trace** (§4.5.2): jobs arrive at a load of 80% and 100% of the GPUs,
   each asks for 1-12 GPUs (Themis' initial worker counts, §4.5.1) and runs 200-1,000
   iterations, models drawn with equal probability from ``--mix``: ``table-4.2``
   (default) is Table 4.2's models as the catalog has them (DLRM left out: not
   modelled), the GPT family model parallel (a pipeline of one stage per GPU, at least
   2 GPUs; GPT-3 XL does not fit one A100); ``families`` is the six data-parallel
   models of the earlier, reduced reproduction (vgg11, resnet50, bert-large,
   transformer-xl, gnmt, alexnet), kept to separate the topology's effect from the
   mix's; ``vgg11`` is one model at one batch (every job's iteration within 0.2% of the
   others'), the case Cassini's interleaving is built for. Per-GPU batches are multiples of
   the catalog's reference batch that fit an A100 (Table 4.2's ranges are per job: VGG
   512-1800, ResNet 256-1800, BERT 8-32). ``table-4.3-matched`` (our option) draws batches inside
   those ranges so that every job's dedicated iteration lies within 5% of 0.3 s, the spread of
   Table 4.3's compatible snapshots (``matched_batches``). ``model-parallel`` (and
   ``model-parallel-hybrid``, our option: two data-parallel replicas of a pipeline) is the GPT rows
   alone, for the dynamic trace's §4.5.4 variant (benchmarks/cassini_dynamic.py);
   ``model-parallel-thesis-traffic`` is the same jobs with the thesis' GPT traffic (Fig. 4.1(c)'s 25 Gbps
   in forward and backward, ``MEASURED_UP_DEMAND``) in place of the performance model's, and
   ``model-parallel-line-rate-traffic`` the same at the NIC's 50 Gbit/s (ours: an upper bound).
   Schedulers: Themis (leases, policies/themis.py), Th+Cassini, Th+Cassini-lock (our option:
   near-equal iterations paced on one period, policies/cassini.py ``lock_periods``),
   Th+Cassini-joint (Algorithm 2 over cluster-wide candidates, ``CassiniJointPlacement``), Random (the
   ``random`` preset: FIFO order), Themis with random placement (the same auction, so only the
   placement differs), FIFO (consolidated placement: the same order as Random), Ideal
   (Themis with no link contention) and Themis under MLTCP sharing; Pollux and Po+Cassini
   (policies/pollux.py) on the same traces with every data-parallel job elastic from 1 to
   twice its GPUs (``pollux_trace``: Pollux sizes every job itself). Metrics over completed jobs:
   per-job mean iteration time (run time / iterations) -- average and p99 over jobs --
   and JCT.
2. **Snapshot table** (Table 4.3): pairs of jobs sharing a ToR-aggregation link, their
   compatibility score and time-shifts (Table 4.1 / Eq. 4.5) and their iteration times
   with the shifts (Th+Cassini) and started together under fair sharing (Themis), from
   the fabric's fluid model.
3. **MLTCP vs fair sharing on one link** (chapter 5): the same pairs, 1/64 of an
   iteration apart, under each sharing.

Runs in about a minute on a shared core. Not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from generated_blocks import filled  # benchmarks/ is not a package: found on sys.path

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, Parallelism, load_cluster
from halyard.emulator import PerformanceModel
from halyard.emulator.contention import shared_link_iteration_times
from halyard.policies import make_policy
from halyard.policies.cassini_math import solve_link
from halyard.scheduling import Simulator

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "cassini-testbed"  # src/halyard/data/clusters/cassini-testbed.toml (Fig. 4.10)
# ``--mix table-4.3-matched``: Table 4.2's batch ranges, read per job (a data-parallel job's global batch, split
# evenly over its GPUs), models as the catalog names them; the GPT rows' pipelines are left out (no batch in
# their ranges comes near the band below on the catalog's A100: 1.8 s and more, benchmarks output says so).
TABLE_4_2_BATCHES = {"vgg11": (512, 1800), "vgg16": (512, 1800), "vgg19": (512, 1800),
                     "wide-resnet101-2": (256, 1200), "resnet50": (256, 1800), "bert-large": (8, 32),
                     "roberta-base": (8, 32), "camembert-base": (8, 32), "xlm": (4, 32)}
BATCH_GRID = 24  # global batches tried per (model, GPUs): evenly spaced over the range (ours)
# Table 4.3's compatible snapshots (1-4) pair jobs whose iterations differ by at most 10% (164 vs 180 ms):
# a matched job's dedicated iteration lies within MATCH_BAND of MATCH_TARGET_S (max/min <= 1.10).
MATCH_BAND = 0.05
# Ours, not the paper's 138-180 ms: the catalog's A100 is slower than the testbed's, and 0.3 s is a time
# that seven of Table 4.2's nine data-parallel models reach inside their batch ranges (``matched_batches``;
# wide-resnet101-2 and xlm never do, so they are never drawn).
MATCH_TARGET_S = 0.3
# model -> per-GPU batches (multiples of the catalog's reference batch that fit an A100's memory)
MIXES = {
    "table-4.2": {"vgg11": (128, 256), "vgg16": (64, 128), "vgg19": (32, 64), "wide-resnet101-2": (32,),
                  "resnet50": (64, 128), "bert-large": (16, 32), "roberta-base": (16,), "camembert-base": (16,),
                  "xlm": (8,), "gpt1": (32,), "gpt2-medium": (8,), "gpt3-xl": (2,)},
    "families": {"vgg11": (128, 256), "resnet50": (64, 128), "bert-large": (16, 32), "transformer-xl": (128, 256),
                 "gnmt": (512, 1024), "alexnet": (512, 1024)},
    "vgg11": {"vgg11": (256,)},
    "table-4.3-matched": {m: () for m in TABLE_4_2_BATCHES},  # batches from matched_batches per job
    # §4.5.4: "all jobs in the trace use model parallelism": Table 4.2's GPT rows as the table-4.2 mix has them
    # (DLRM, the table's other model-parallel row, is not modelled); benchmarks/cassini_dynamic.py's variant.
    "model-parallel": {"gpt1": (32,), "gpt2-medium": (8,), "gpt3-xl": (2,)},
    # The same, each GPT job HYBRID_DATA_DEGREE data-parallel replicas of a shorter pipeline (our option).
    "model-parallel-hybrid": {"gpt1": (32,), "gpt2-medium": (8,), "gpt3-xl": (2,)},
    # The model-parallel mix's jobs (the same draws per seed), their GPT traffic the thesis' (MEASURED_UP_DEMAND),
    # and the same at the line rate (an upper bound).
    "model-parallel-thesis-traffic": {"gpt1": (32,), "gpt2-medium": (8,), "gpt3-xl": (2,)},
    "model-parallel-line-rate-traffic": {"gpt1": (32,), "gpt2-medium": (8,), "gpt3-xl": (2,)},
}
# §4.5.1 trains the GPT models "using a hybrid of data/model parallelism" (DeepSpeed) without giving the split.
# Ours, on ``--mix model-parallel-hybrid`` only: 2 replicas of a pipeline of half the GPUs, where the GPU count is
# even and leaves at least 2 stages (else one pipeline, as on the other mixes). DeepSpeed's default topology
# puts the data axis innermost, as the emulator's plan does: a stage is consecutive GPUs of the allocation.
HYBRID_DATA_DEGREE = {"model-parallel-hybrid": 2}
MODEL_PARALLEL = ("gpt1", "gpt2-medium", "gpt3-xl")  # Table 4.2: "Model Parallel" (DeepSpeed, §4.5.1)
# §4.1.1, Fig. 4.1(c): a GPT-3 (96 layers) tensor parallel across two servers of one A100 and a 50 Gbps NIC: "both
# forward and backpropagation phases introduce roughly 25 Gbps traffic followed by a short period of near-zero
# network demand during data loading". The one traffic level our text of the thesis gives for a model-parallel GPT
# job: Fig. 4.1(b)'s GPT-2 pipeline ("three small communication peaks", then the embedding all-reduce) and Fig.
# 4.1(d)'s hybrid GPT-3 are described without a figure, and no iteration time or byte count of any GPT job is given.
THESIS_GPT_UP_GBIT_S = 25.0
BITS_PER_BYTE = 8
# ``--mix model-parallel-thesis-traffic``: each GPT job's Up phases (its forward and backward sends; the Down is the
# rest of its iteration, the thesis' "short period") carry Fig. 4.1(c)'s level on every link it crosses, in place of
# the performance model's activation sends (PerformanceModel's ``measured_up_demand``; the phases' timing and the
# iteration time stay the model's, so bytes per iteration = 3.125 GB/s x the Up time). Ours: GPT-3's figure applied
# to GPT-1 and GPT-2 as well, and to every link a job crosses (the thesis measured a server's link).
# ``--mix model-parallel-line-rate-traffic`` (ours, a bound): the same at the NIC's line rate, the most one job can
# send; the testbed's servers have "one 50 Gbps Mellanox ConnectX5 NIC" (§4.5.1) and every link is 50 Gbit/s.
TESTBED_NIC_GBIT_S = 50.0
MEASURED_UP_DEMAND = {"model-parallel-thesis-traffic": {m: THESIS_GPT_UP_GBIT_S / BITS_PER_BYTE
                                                        for m in MODEL_PARALLEL},
                      "model-parallel-line-rate-traffic": {m: TESTBED_NIC_GBIT_S / BITS_PER_BYTE
                                                           for m in MODEL_PARALLEL}}
GPUS = (1, 12)  # Themis' initial worker counts (§4.5.1)
ITERATIONS = (200, 1000)  # "randomly selected between 200 - 1,000 iterations" (§4.5.1)
SCHEMES = {  # label -> (policy, contention)
    "Themis": ("themis", "fair"),
    "Th+Cassini": ("themis+cassini", "fair"),
    "Th+Cassini-lock": ("themis+cassini-lock", "fair"),
    "Th+Cassini-joint": ("themis+cassini-joint", "fair"),
    "Random": ("random", "fair"),
    "Themis, random placement": ("themis,placement=random", "fair"),
    "FIFO": ("fifo", "fair"),
    "Ideal": ("themis", "off"),
    "Themis, MLTCP": ("themis", "mltcp"),
}
# Pollux's schemes run on pollux_trace (the same jobs, elastic); label -> (policy, contention).
POLLUX_SCHEMES = {
    "Pollux": ("pollux", "fair"),
    "Po+Cassini": ("pollux+cassini", "fair"),
}
POLLUX_MAX_SCALE = 2  # ours: an elastic job may grow to twice the GPUs it asked for (Pollux sizes jobs itself)


def matched_batches(pm: PerformanceModel, cluster, model: str, gpus: int) -> list[int]:
    """Per-GPU batches of ``model`` on ``gpus`` whose job batch lies in Table 4.2's range and whose dedicated
    iteration lies within ``MATCH_BAND`` of ``MATCH_TARGET_S`` (``--mix table-4.3-matched``)."""
    lo, hi = TABLE_4_2_BATCHES[model]
    per_gpu = sorted({max(1, round(b / gpus)) for b in np.linspace(lo, hi, BATCH_GRID)})
    out = []
    for b in per_gpu:
        if not lo <= b * gpus <= hi:
            continue
        spec = JobSpec(job_id="probe", submit_time=0.0, model=model, batch_size=b, num_gpus=gpus, iterations=1)
        if abs(pm.consolidated_iteration_time(spec, cluster) / MATCH_TARGET_S - 1.0) <= MATCH_BAND:
            out.append(b)
    return out


def poisson_trace(n: int, load: float, seed: int, pm: PerformanceModel, cluster, mix: str) -> list[JobSpec]:
    """§4.5.1's Poisson trace: arrivals so that on average ``load`` of the GPUs serve jobs. On
    ``table-4.3-matched`` the models that reach the band at some size are drawn with equal probability
    (§4.5.1), a GPU count with no matched batch for the model is drawn again (so GPU counts lean to
    those where its range reaches the band) and the batch is drawn among the matched ones."""
    rng = np.random.default_rng(seed)
    models = MIXES[mix]
    matched: dict[tuple[str, int], list[int]] = {}
    if mix == "table-4.3-matched":  # models that reach the band at some size, drawn with equal probability
        sizes = range(GPUS[0], GPUS[1] + 1)
        models = {m: b for m, b in models.items()
                  if any(matched.setdefault((m, g), matched_batches(pm, cluster, m, g)) for g in sizes)}
    jobs = []
    for i in range(n):
        model = str(rng.choice(list(models)))
        gpus = int(rng.integers(GPUS[0], GPUS[1] + 1))
        if mix == "table-4.3-matched":
            while not matched.setdefault((model, gpus), matched_batches(pm, cluster, model, gpus)):
                gpus = int(rng.integers(GPUS[0], GPUS[1] + 1))
            models = {**models, model: tuple(matched[model, gpus])}
        parallel = None
        if model in MODEL_PARALLEL:  # a pipeline of one stage per GPU (the catalog's layers split evenly)
            gpus = max(2, gpus)
            data = HYBRID_DATA_DEGREE.get(mix, 1)
            data = data if gpus % data == 0 and gpus // data >= 2 else 1
            parallel = Parallelism(data=data, tensor=1, pipeline=gpus // data)
        jobs.append(JobSpec(job_id=f"j{i:03d}", submit_time=0.0, model=model, batch_size=int(rng.choice(models[model])),
                            num_gpus=gpus, iterations=int(rng.integers(ITERATIONS[0], ITERATIONS[1] + 1)),
                            parallelism=parallel))
    work = np.mean([j.num_gpus * j.iterations * pm.consolidated_iteration_time(j, cluster) for j in jobs])
    gap = work / (load * cluster.total_gpus)  # mean seconds between arrivals
    t = np.cumsum(rng.exponential(gap, n))
    return [JobSpec(job_id=j.job_id, submit_time=float(s), model=j.model, batch_size=j.batch_size,
                    num_gpus=j.num_gpus, iterations=j.iterations, parallelism=j.parallelism)
            for j, s in zip(jobs, t, strict=True)]


def pollux_trace(jobs: list[JobSpec], cluster) -> list[JobSpec]:
    """The same jobs for Pollux: each data-parallel one elastic from 1 GPU to ``POLLUX_MAX_SCALE`` times
    its request (capped by the cluster), its global batch (``num_gpus x batch_size``) the initial batch
    Pollux's efficiency is measured from; model-parallel jobs keep their size."""
    return [j if j.parallelism is not None else
            JobSpec(job_id=j.job_id, submit_time=j.submit_time, model=j.model, batch_size=j.batch_size,
                    num_gpus=j.num_gpus, iterations=j.iterations, min_gpus=1,
                    max_gpus=min(POLLUX_MAX_SCALE * j.num_gpus, cluster.total_gpus))
            for j in jobs]


def run(traces: list[list[JobSpec]], cluster, policy: str, contention: str) -> dict[str, float]:
    """One scheme over several traces (seeds); per-job figures pooled over them."""
    iters, jct, shifts, preemptions = [], [], 0, 0
    for jobs in traces:
        sim = Simulator(cluster, make_policy(policy), PerformanceModel(contention=contention))
        sim.run(jobs)
        done = [r for r in sim.core.records.values() if r.end_time is not None]
        iters += [r.run_time_s(r.end_time) / r.spec.iterations for r in done]
        jct += [r.end_time - r.spec.submit_time for r in done]
        shifts += sum(1 for e in sim.core.log if e.kind.name == "TIME_SHIFT")
        preemptions += sum(r.preemptions for r in sim.core.records.values())
    return {"jobs": len(jct), "avg_iter_s": float(np.mean(iters)), "p99_iter_s": float(np.percentile(iters, 99)),
            "avg_jct_s": float(np.mean(jct)), "p99_jct_s": float(np.percentile(jct, 99)), "time_shifts": shifts,
            "preemptions": preemptions,
            "iteration_s": sorted(float(x) for x in iters)}


def uplink_profile(pm: PerformanceModel, cluster, model: str, batch: int, parallel: Parallelism | None = None):
    """A 4-GPU job across ToRs 0 and 1 (2 + 2 servers): its profile on the first switch link of the route
    (data parallel, or ``parallel``'s plan)."""
    alloc = Allocation(tuple(NodeAllocation(f"tor{r}-n{i}", (0,), 16, 256_000) for r in (0, 1) for i in (0, 1)))
    spec = JobSpec(job_id=model, submit_time=0.0, model=model, batch_size=batch, num_gpus=4, iterations=100,
                   parallelism=parallel)
    timing = pm.job_timing(spec, alloc, cluster)
    link = cluster.route(0, 1)[0]
    return next(load.profile for load in timing.links if (load.kind, load.name) == link)


def snapshots(pm: PerformanceModel, cluster) -> list[dict]:
    capacity = cluster.link_gbyte_s(cluster.route(0, 1)[0])
    pairs = [(("vgg11", 256), ("resnet50", 64)), (("vgg11", 256), ("vgg11", 256)), (("alexnet", 1024), ("vgg11", 256)),
             (("bert-large", 32), ("transformer-xl", 256)), (("gnmt", 512), ("alexnet", 1024)),
             (("bert-large", 16), ("gnmt", 512))]
    rows = []
    for (a, ba), (b, bb) in pairs:
        pa, pb = uplink_profile(pm, cluster, a, ba), uplink_profile(pm, cluster, b, bb)
        a, b = f"{a} ({ba})", f"{b} ({bb})"
        sol = solve_link([pa, pb], capacity)
        shifted = shared_link_iteration_times([pa, pb], capacity, time_shifts_s=sol.shifts_s).iteration_s
        together = shared_link_iteration_times([pa, pb], capacity).iteration_s
        apart = [0.0, pb.iteration_s / 64]
        fair = shared_link_iteration_times([pa, pb], capacity, time_shifts_s=apart).iteration_s
        mltcp = shared_link_iteration_times([pa, pb], capacity, sharing="mltcp", time_shifts_s=apart).iteration_s
        rows.append({"pair": f"{a} + {b}", "dedicated_ms": [pa.iteration_s * 1e3, pb.iteration_s * 1e3],
                     "up_share": [pa.up_fraction, pb.up_fraction], "score": sol.score,
                     "shift_ms": [s * 1e3 for s in sol.shifts_s], "cassini_ms": [t * 1e3 for t in shifted],
                     "themis_ms": [t * 1e3 for t in together], "fair_ms": [t * 1e3 for t in fair],
                     "mltcp_ms": [t * 1e3 for t in mltcp]})
    return rows


def fmt(xs: list[float]) -> str:
    return " / ".join(f"{x:.0f}" for x in xs)


def table(results: dict, snaps: list[dict]) -> str:
    out = ["# Cassini reproduction (generated by benchmarks/reproduce_cassini.py)", "",
           "## Poisson trace (§4.5.2): per-job mean iteration time and JCT, completed jobs of all seeds", "",
           "| load | scheme | jobs | avg iter (ms) | p99 iter (ms) | avg JCT (s) | p99 JCT (s) | shifts | preempted |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for load, by in results.items():
        for label, r in by.items():
            out.append(f"| {load} | {label} | {r['jobs']} | {r['avg_iter_s'] * 1e3:.0f} | {r['p99_iter_s'] * 1e3:.0f} "
                       f"| {r['avg_jct_s']:.0f} | {r['p99_jct_s']:.0f} | {r['time_shifts']} | {r['preemptions']} |")
        th = by["Themis"]
        for scheme in (s for s in ("Th+Cassini", "Th+Cassini-lock", "Th+Cassini-joint", "Ideal") if s in by):
            cs = by[scheme]
            out.append(f"| {load} | **Themis / {scheme}** | | {th['avg_iter_s'] / cs['avg_iter_s']:.2f}x "
                       f"| {th['p99_iter_s'] / cs['p99_iter_s']:.2f}x | {th['avg_jct_s'] / cs['avg_jct_s']:.2f}x "
                       f"| {th['p99_jct_s'] / cs['p99_jct_s']:.2f}x | | |")
        if "Pollux" in by:
            po, pc = by["Pollux"], by["Po+Cassini"]
            out.append(f"| {load} | **Pollux / Po+Cassini** | | {po['avg_iter_s'] / pc['avg_iter_s']:.2f}x "
                       f"| {po['p99_iter_s'] / pc['p99_iter_s']:.2f}x | {po['avg_jct_s'] / pc['avg_jct_s']:.2f}x "
                       f"| {po['p99_jct_s'] / pc['p99_jct_s']:.2f}x | | |")
    out += ["", "## Snapshots (Table 4.3): two 4-GPU jobs (batch) sharing a ToR-aggregation link (6.25 GB/s)", "",
            "| pair | dedicated (ms) | Up share | score | time-shift (ms) | Th+Cassini (ms) | Themis (ms) |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for s in snaps:
        out.append(f"| {s['pair']} | {fmt(s['dedicated_ms'])} | {' / '.join(f'{u:.2f}' for u in s['up_share'])} "
                   f"| {s['score']:.2f} | {fmt(s['shift_ms'])} | {fmt(s['cassini_ms'])} | {fmt(s['themis_ms'])} |")
    out += ["", "## MLTCP vs fair sharing on the same link (chapter 5), jobs 1/64 iteration apart", "",
            "| pair | dedicated (ms) | fair (ms) | MLTCP (ms) |", "| --- | --- | --- | --- |"]
    for s in snaps:
        out.append(f"| {s['pair']} | {fmt(s['dedicated_ms'])} | {fmt(s['fair_ms'])} | {fmt(s['mltcp_ms'])} |")
    return "\n".join(out) + "\n"


# The page's "paper against ours" table: (effect, the paper's figure, direction); each row's cells come from
# ``versus_cells`` over the three mixes' JSON (docs/reproductions/cassini-reproduction{,-vgg11,-families}.json).
PAGE_MIXES = ("table-4.2", "vgg11", "families", "table-4.3-matched")


def stem(mix: str) -> str:
    """The output files' stem of a run on ``mix`` (the page's default mix keeps the plain name)."""
    return "cassini-reproduction" if mix == "table-4.2" else f"cassini-reproduction-{mix}"


def _x(a: float, b: float) -> str:
    return f"{a / b:.2f}x"


def _ratios(results: dict, scheme: str, keys: tuple[str, ...], loads: bool = False) -> str:
    """Themis' figure over ``scheme``'s for each key, "a / b" per load, loads comma-separated."""
    cells = []
    for load, by in results.items():
        cell = " / ".join(_x(by["Themis"][k], by[scheme][k]) for k in keys)
        cells.append(f"{cell} ({load})" if loads else cell)
    return ", ".join(cells)


def _pair(snaps: list[dict], name: str) -> dict:
    return next(s for s in snaps if s["pair"] == name)


def versus_table(runs: dict[str, dict]) -> str:
    """The page's table of the paper's effects against ours, one column per mix of :data:`PAGE_MIXES`."""
    t, v, f, mt = (runs[m]["results"] for m in PAGE_MIXES)
    snaps = runs["table-4.2"]["snapshots"]
    vv, bg = _pair(snaps, "vgg11 (256) + vgg11 (256)"), _pair(snaps, "bert-large (16) + gnmt (512)")
    it, p99, jct = ("avg_iter_s",), ("p99_iter_s",), ("avg_jct_s", "p99_jct_s")
    lock, ideal = ("avg_iter_s", "avg_jct_s", "p99_jct_s"), ("avg_iter_s", "avg_jct_s")
    rnd = ", ".join(_x(by["Themis"]["avg_jct_s"], by["Random"]["avg_jct_s"]) for by in t.values())
    rnd99 = ", ".join(_x(by["Themis"]["p99_jct_s"], by["Random"]["p99_jct_s"]) for by in t.values())
    mltcp = {m: ", ".join(_x(by["Themis"]["avg_jct_s"], by["Themis, MLTCP"]["avg_jct_s"]) for by in r.values())
             for m, r in (("t", t), ("v", v), ("f", f), ("mt", mt))}
    joint = ("avg_iter_s", "p99_iter_s", "avg_jct_s", "p99_jct_s")
    loads = list(t)
    rows = [
        ("Th+Cassini vs Themis, avg iteration time (Poisson)", "1.6x",
         _ratios(t, "Th+Cassini", it, True), _ratios(v, "Th+Cassini", it), _ratios(f, "Th+Cassini", it),
         _ratios(mt, "Th+Cassini", it), "same sign, far smaller"),
        ("Th+Cassini vs Themis, p99 iteration time", "1.8x", _ratios(t, "Th+Cassini", p99),
         _ratios(v, "Th+Cassini", p99), _ratios(f, "Th+Cassini", p99), _ratios(mt, "Th+Cassini", p99),
         "same sign on Table 4.2's mix"),
        ("Th+Cassini vs Themis, JCT avg / p99", "tail up to 2.2x (dynamic trace)", _ratios(t, "Th+Cassini", jct, True),
         _ratios(v, "Th+Cassini", jct), _ratios(f, "Th+Cassini", jct), _ratios(mt, "Th+Cassini", jct), "same sign"),
        ("**Th+Cassini-lock** (our option) vs Themis, avg iteration / avg JCT / p99 JCT",
         "(Th+Cassini close to Ideal)", _ratios(t, "Th+Cassini-lock", lock, True), _ratios(v, "Th+Cassini-lock", lock),
         _ratios(f, "Th+Cassini-lock", lock), _ratios(mt, "Th+Cassini-lock", lock),
         "gains only where iterations match"),
        ("**Th+Cassini-joint** (Algorithm 2 on cluster-wide candidates) vs Themis, avg / p99 iteration, "
         "avg / p99 JCT", "1.6x / 1.8x iteration", _ratios(t, "Th+Cassini-joint", joint, True), "", "",
         _ratios(mt, "Th+Cassini-joint", joint, True),
         "no larger than per-job candidates"),
        ("Ideal (no contention) vs Themis, avg iteration / avg JCT", "Th+Cassini close to Ideal (so about 1.6x)",
         _ratios(t, "Ideal", ideal), _ratios(v, "Ideal", ideal), _ratios(f, "Ideal", ideal),
         _ratios(mt, "Ideal", ideal), "contention is real but small on Table 4.2's mix"),
        ("Random vs Themis", "worst", f"worst on average JCT ({rnd}), better p99 JCT ({rnd99})",
         ", ".join(_x(by["Themis"]["avg_jct_s"], by["Random"]["avg_jct_s"]) for by in v.values()) + " avg JCT",
         ", ".join(_x(by["Themis"]["avg_jct_s"], by["Random"]["avg_jct_s"]) for by in f.values()),
         ", ".join(_x(by["Themis"]["avg_jct_s"], by["Random"]["avg_jct_s"]) for by in mt.values()),
         "same on averages; the p99 is FIFO's (below)"),
        ("snapshot, fully compatible pair (Table 4.3: 1.0, 138/148 ms vs 206/199 ms)", "1.3-1.5x",
         f"vgg11 + vgg11: score {vv['score']:.2f}, shift {max(vv['shift_ms']):.0f} ms, {vv['cassini_ms'][0]:.0f} ms vs "
         f"{vv['themis_ms'][0]:.0f} ms ({vv['themis_ms'][0] / vv['cassini_ms'][0]:.2f}x)", "", "", "",
         "same, same size"),
        ("snapshot, partly compatible (score 0.6: gains vanish)", "1.0x at 0.6",
         f"bert-large + gnmt score {bg['score']:.2f}: mixed ({fmt(bg['cassini_ms']).replace(' / ', '/')} vs "
         f"{fmt(bg['themis_ms']).replace(' / ', '/')} ms)", "", "", "", "same"),
        ("MLTCP vs fair on a link", "up to 1.9x avg (chapter 5)",
         f"vgg11 + vgg11: {vv['mltcp_ms'][0]:.0f} ms vs {vv['fair_ms'][0]:.0f} ms "
         f"({vv['fair_ms'][0] / vv['mltcp_ms'][0]:.2f}x); Poisson JCT "
         + ", ".join(f"{x} ({load})" for x, load in zip(mltcp["t"].split(", "), loads, strict=True)),
         f"Poisson JCT {mltcp['v']}", mltcp["f"], mltcp["mt"], "same"),
    ]
    lines = ["| effect | paper | ours, Table 4.2 mix (table) | ours, one model (`--mix vgg11`) | ours, six-model mix "
             "| ours, matched iterations (`--mix table-4.3-matched`) | direction |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def pollux_table(results: dict, dynamic: dict | None = None) -> str:
    """The page's Pollux table: Pollux' figure over Po+Cassini's, and Themis against Pollux, per load (the
    dynamic trace's row from ``dynamic``, cassini-dynamic.json, when given)."""
    by = list(results.values())
    loads = list(results)

    def cell(k: str, unit: str, scale: float, r: dict) -> str:
        po, pc = r["Pollux"][k] * scale, r["Po+Cassini"][k] * scale
        return f"{po / pc:.2f}x ({po:,.0f} vs {pc:,.0f} {unit})"

    def jct(r: dict, detail: bool) -> str:
        po, pc = r["Pollux"], r["Po+Cassini"]
        text = f"{_x(po['avg_jct_s'], pc['avg_jct_s'])} / {_x(po['p99_jct_s'], pc['p99_jct_s'])}"
        return text + (f" ({po['avg_jct_s']:,.0f} vs {pc['avg_jct_s']:,.0f} s; {po['p99_jct_s']:,.0f} vs "
                       f"{pc['p99_jct_s']:,.0f} s)" if detail else "")

    def themis(r: dict, detail: bool) -> str:
        th, po = r["Themis"]["avg_jct_s"], r["Pollux"]["avg_jct_s"]
        return (f"Themis {po / th:.2f}x faster ({th:,.0f} vs {po:,.0f} s)" if detail
                else f"{po / th:.2f}x ({th:,.0f} vs {po:,.0f} s)")

    lines = [f"| effect | paper | ours, Table 4.2 mix, {loads[0]} | {' | '.join(loads[1:])} | direction |",
             "| --- | --- | --- | --- | --- |",
             "| Po+Cassini vs Pollux, avg iteration time (Poisson) | \"similar gains\" to Th+Cassini's 1.6x | "
             + " | ".join(cell("avg_iter_s", "ms", 1e3, r) for r in by) + " | same sign, far smaller |",
             "| Po+Cassini vs Pollux, p99 iteration time (Poisson) | similar to 1.8x | "
             + " | ".join(_x(r["Pollux"]["p99_iter_s"], r["Po+Cassini"]["p99_iter_s"]) for r in by)
             + " | same sign, far smaller |",
             "| Po+Cassini vs Pollux, dynamic trace (§4.5.3) | 1.6x avg, 2.5x p99 iteration time | "
             + (_dynamic_cell(dynamic["variants"]["data"], "Po+Cassini") if dynamic and "data" in dynamic["variants"]
                else "not run")
             + " (matched mix, `cassini-dynamic.json`; no ECN) | " + " | ".join("" for _ in by[1:]) + " | |",
             "| Po+Cassini vs Pollux, JCT avg / p99 | tail JCT up to 2.5x | "
             + " | ".join(jct(r, i == 0) for i, r in enumerate(by))
             + " | same sign; the largest JCT gain we have measured, still half the paper's tail |",
             "| Pollux vs Themis, JCT avg | (not compared in the paper) | "
             + " | ".join(themis(r, i == 0) for i, r in enumerate(by)) + " | |"]
    return "\n".join(lines) + "\n"


# The dynamic trace (benchmarks/cassini_dynamic.py writes DYNAMIC_JSON, one entry per variant).
DYNAMIC_JSON = "cassini-dynamic.json"
# The thesis' figures, baseline over scheme, (avg, p99) iteration time; None where our text gives none.
# Its Th+Cassini is Algorithm 2 on Themis' candidates, so the figure stands beside both of our variants.
DYNAMIC_PAPER: dict[str, dict[str, tuple[float, float] | str | None]] = {
    "data": {"Th+Cassini": (1.5, 2.2), "Th+Cassini-joint": (1.5, 2.2),  # §4.5.3, Fig. 4.13
             "Po+Cassini": (1.6, 2.5), "Ideal": None},
    "model-parallel": {"Th+Cassini": (1.2, 1.6), "Th+Cassini-joint": (1.2, 1.6),  # §4.5.4, Fig. 4.15a
                       "Po+Cassini": "\"similar gains\"", "Ideal": None},
    "multi-gpu": {"Th+Cassini": "not in our text (Fig. 4.17 missing)", "Th+Cassini-joint": None,  # §4.5.6
                  "Po+Cassini": None, "Ideal": None},
}
DYNAMIC_NAMES = {"data": "data parallel", "model-parallel": "all model parallel",
                 "multi-gpu": "multi-GPU servers"}


def _dynamic_cell(v: dict, scheme: str) -> str:
    """``avg [lo, hi] / p99 [lo, hi]``: the variant's baseline over ``scheme``, all jobs, 95% intervals."""
    base, sc = v["schemes"][v["baseline"][scheme]]["all"], v["schemes"][scheme]["all"]
    (alo, ahi), (plo, phi) = v["ci95"][scheme]
    return (f"{base[0] / sc[0]:.2f}x [{alo:.2f}, {ahi:.2f}] / {base[1] / sc[1]:.2f}x [{plo:.2f}, {phi:.2f}]")


def _over(v: dict, scheme: str, part: str) -> str:
    base, sc = v["schemes"][v["baseline"][scheme]][part], v["schemes"][scheme][part]
    return f"{base[0] / sc[0]:.2f}x / {base[1] / sc[1]:.2f}x" if base and sc else "-"


def _paper(figure: tuple[float, float] | str | None) -> str:
    if figure is None:
        return "-"
    return figure if isinstance(figure, str) else f"{figure[0]}x / {figure[1]}x"


def _variants(dynamic: dict) -> list[tuple[str, dict]]:
    """The stored variants in the thesis' order (§4.5.3, §4.5.4, §4.5.6), a variant's other mixes after it in
    :data:`MIXES`' order."""
    order, mixes = list(DYNAMIC_NAMES), list(MIXES)

    def key(kv: tuple[str, dict]) -> tuple[int, int, int]:
        variant, _, mix = kv[0].partition(":")
        return order.index(variant), bool(mix), mixes.index(mix) if mix else 0

    return sorted(dynamic["variants"].items(), key=key)


def _contended(v: dict, scheme: str) -> str:
    """The census' share of job-time on a contended link, the baseline's -> the scheme's ("-" where either
    was not censused: Ideal runs without contention, Pollux's schemes are not in the census)."""
    census, base = v.get("census", {}), v["baseline"][scheme]
    if scheme not in census or base not in census:
        return "-"
    return f"{census[base]['contended']:.0%} -> {census[scheme]['contended']:.0%}"


def _variant_name(key: str, v: dict) -> str:
    variant, _, mix = key.partition(":")
    return f"{v['section']} {DYNAMIC_NAMES[variant]}" + (f" (`--mix {mix}`)" if mix else f", {v['mix']} mix")


def dynamic_block(dynamic: dict) -> str:
    """The page's dynamic-trace table: per variant and scheme, the thesis' figure beside ours with 95%
    bootstrap intervals over seeds, ours on the arriving set and on jobs wider than a server, and the link
    census' job-time on a contended link under the baseline and the scheme."""
    lines = ["| experiment | scheme (over its baseline) | paper: avg / p99 iteration | ours, all jobs: avg [95% CI] / "
             "p99 [95% CI] | arriving set: avg / p99 | jobs wider than a server: avg / p99 "
             "| job-time on a contended link: baseline -> scheme | jobs (seeds) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, v in _variants(dynamic):
        paper = DYNAMIC_PAPER[key.partition(":")[0]]
        for i, scheme in enumerate(v["baseline"]):
            first = i == 0
            lines.append(f"| {_variant_name(key, v) if first else ''} | {scheme} / {v['baseline'][scheme]} "
                         f"| {_paper(paper.get(scheme))} | {_dynamic_cell(v, scheme)} | {_over(v, scheme, 'arriving')} "
                         f"| {_over(v, scheme, 'wider_than_a_server')} | {_contended(v, scheme)} "
                         f"| {str(v['jobs']) + ' (' + v['seeds'] + ')' if first else ''} |")
    return "\n".join(lines) + "\n"


def dynamic_table(dynamic: dict) -> str:
    """cassini-dynamic-table.md: every variant's figures in ms, as cassini_dynamic.py measured them."""
    out = ["# Cassini's dynamic trace (generated by benchmarks/cassini_dynamic.py)", "",
           "Per-job mean iteration time (run time / iterations) of completed jobs, pooled over seeds.", ""]
    for key, v in _variants(dynamic):
        out += [f"## {_variant_name(key, v)}", "",
                f"Cluster `{v['cluster']}` ({v['total_gpus']} GPUs, {v['gpus_per_server']} per server); seeds "
                f"{v['seeds']}; {v['jobs']} jobs; {v['busy_gpus']} GPUs busy at 0, sets of {v['arriving']['min']}-"
                f"{v['arriving']['max']} jobs (mean {v['arriving']['mean']:.1f}) arriving at {v['arrival_s']:.0f} s.",
                "",
                "| scheme | jobs | avg / p99 iter (ms) | arriving set (ms) | wider than a server (ms) |",
                "| --- | --- | --- | --- | --- |"]
        for label, r in v["schemes"].items():
            ms = [" / ".join(f"{x * 1e3:,.0f}" for x in r[part]) or "-"
                  for part in ("all", "arriving", "wider_than_a_server")]
            out.append(f"| {label} | {r['jobs']} | {ms[0]} | {ms[1]} | {ms[2]} |")
        out.append("")
        if v.get("census"):
            out += ["Link census on the same traces (benchmarks/cassini_census.py's columns):", "",
                    "| mix | load | scheme | spans nodes | shared link | contended link | >4 jobs (mean field) "
                    "| jobs ever contended | mean slowdown | time with a loop (merged) "
                    "| contended link-time by jobs 2/3/4/>4 | score best / unshifted / at the fabric's phases "
                    "| iterations within 1%, 10% | slowdown realised / at planned shifts / aligned |",
                    "| --- " * 14 + "|"]
            out += [census_row(v["mix"], "dynamic", scheme, c) for scheme, c in v["census"].items()]
            out.append("")
        if v.get("uplink_demand"):
            out += ["A 4-GPU job of each model across two ToRs, on the ToR uplink (``uplink_demands``):", "",
                    "| model (batch) | iteration (ms) | Up share | peak demand (GB/s) | GB per iteration "
                    "| link (GB/s) |",
                    "| --- | --- | --- | --- | --- | --- |"]
            out += [f"| {m} | {d['iteration_s'] * 1e3:,.0f} | {d['up_share']:.2f} | {d['peak_gbyte_s']:.2f} "
                    f"| {d['gbytes']:.2f} | {d['capacity_gbyte_s']:.2f} |" for m, d in v["uplink_demand"].items()]
            out.append("")
    return "\n".join(out)


# The link census (benchmarks/cassini_census.py writes CENSUS_JSON, one entry per mix).
CENSUS_JSON = "cassini-census.json"
CENSUS_MIX_NAMES = {"table-4.2": "Table 4.2", "vgg11": "vgg11", "families": "six models",
                    "table-4.3-matched": "matched", "model-parallel": "GPT pipelines",
                    "model-parallel-hybrid": "GPT hybrid", "model-parallel-thesis-traffic": "GPT, thesis traffic",
                    "model-parallel-line-rate-traffic": "GPT, line-rate traffic"}
CENSUS_PAGE_SCHEMES = ("Themis", "Th+Cassini", "Th+Cassini-lock", "Th+Cassini-joint")  # Random: table only


def census_row(mix: str, load: str, scheme: str, c: dict) -> str:
    """Every census figure of one scheme, one markdown row (the script prints these as it goes)."""
    head = (f"| {CENSUS_MIX_NAMES[mix]} | {load} | {scheme} | {c['spans_nodes']:.0%} | {c['shared']:.0%} "
            f"| {c['contended']:.0%} | {c['mean_field']:.1%} | {c['jobs_contended']}/{c['jobs']} "
            f"| {c['mean_slowdown']:.3f} | {c['loop']:.0%} ({c['loop_merged']:.0%}) ")
    if c["realised"] == 0.0:  # no contended link at any time: the per-link means are empty
        return head + "| - | - | - | - |"
    by_n = " / ".join(f"{x:.0%}" for x in c["by_jobs"])
    return head + (f"| {by_n} | {c['score']:.2f} / {c['score0']:.2f} / {c['score at phases']:.2f} "
                   f"| {c['within 1%']:.0%}, {c['within 10%']:.0%} "
                   f"| {c['realised']:.3f} / {c['planned']:.3f} / {c['aligned']:.3f} |")


def _census_mixes(census: dict) -> list[tuple[str, dict]]:
    return [(m, census["mixes"][m]) for m in PAGE_MIXES if m in census["mixes"]]


def census_table(census: dict) -> str:
    """cassini-census-table.md: every figure the census stores, every mix, load and scheme."""
    out = ["# Cassini link census (generated by benchmarks/cassini_census.py)", "",
           "Fractions of the running jobs' time; per contended link, link-time weighted means.", "",
           "| mix | load | scheme | spans nodes | shared link | contended link | >4 jobs (mean field) "
           "| jobs ever contended | mean slowdown | time with a loop (merged) | contended link-time by jobs 2/3/4/>4 "
           "| score best / unshifted / at the fabric's phases | iterations within 1%, 10% "
           "| slowdown realised / at planned shifts / aligned |", "| --- " * 14 + "|"]
    for mix, entry in _census_mixes(census):
        for load, by in entry["loads"].items():
            out += [census_row(mix, load, scheme, c) for scheme, c in by.items()]
    return "\n".join(out) + "\n"


def census_block(census: dict) -> str:
    """The page's census table: the schemes of ``CENSUS_PAGE_SCHEMES`` on every stored mix and load."""
    lines = ["| mix, load | scheme | job-time on a contended link | ... on one of > 4 jobs (mean field) "
             "| mean slowdown | time with a loop (merged) | score best / unrotated / at the fabric's phases "
             "| contended link-time with iterations within 1%, 10% | slowdown realised / at planned shifts / aligned |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for mix, entry in _census_mixes(census):
        for load, by in entry["loads"].items():
            for i, scheme in enumerate(s for s in CENSUS_PAGE_SCHEMES if s in by):
                c = by[scheme]
                lines.append(f"| {f'{CENSUS_MIX_NAMES[mix]}, {load}' if i == 0 else ''} | {scheme} "
                             f"| {c['contended']:.0%} | {c['mean_field']:.1%} | {c['mean_slowdown']:.3f} "
                             f"| {c['loop']:.0%} ({c['loop_merged']:.0%}) "
                             f"| {c['score']:.2f} / {c['score0']:.2f} / {c['score at phases']:.2f} "
                             f"| {c['within 1%']:.0%}, {c['within 10%']:.0%} "
                             f"| {c['realised']:.3f} / {c['planned']:.3f} / {c['aligned']:.3f} |")
    return "\n".join(lines) + "\n"


def page_blocks(docs: Path) -> dict[str, str] | None:
    """The page's generated blocks from the three mixes' JSON in ``docs``; None while one is missing."""
    paths = {m: docs / f"{stem(m)}.json" for m in PAGE_MIXES}
    if not all(p.is_file() for p in paths.values()):
        return None
    dyn, cen = docs / DYNAMIC_JSON, docs / CENSUS_JSON
    if not dyn.is_file() or not cen.is_file():
        return None
    runs = {m: json.loads(p.read_text(encoding="utf-8")) for m, p in paths.items()}
    dynamic = json.loads(dyn.read_text(encoding="utf-8"))
    return {"versus": versus_table(runs), "pollux": pollux_table(runs["table-4.2"]["results"], dynamic),
            "dynamic": dynamic_block(dynamic), "census": census_block(json.loads(cen.read_text(encoding="utf-8")))}


def pages(docs: Path) -> dict[Path, str]:
    """Every page this script writes, rendered from the JSON stored in ``docs`` (no simulation)."""
    out = {}
    for m in PAGE_MIXES:
        stored = docs / f"{stem(m)}.json"
        if stored.is_file():
            data = json.loads(stored.read_text(encoding="utf-8"))
            out[docs / f"{stem(m)}-table.md"] = table(data["results"], data["snapshots"])
    if (docs / DYNAMIC_JSON).is_file():
        dynamic = json.loads((docs / DYNAMIC_JSON).read_text(encoding="utf-8"))
        out[docs / "cassini-dynamic-table.md"] = dynamic_table(dynamic)
    if (docs / CENSUS_JSON).is_file():
        census = json.loads((docs / CENSUS_JSON).read_text(encoding="utf-8"))
        out[docs / "cassini-census-table.md"] = census_table(census)
    blocks = page_blocks(docs)
    if blocks is not None:
        out[docs / "cassini-reproduction.md"] = filled(docs / "cassini-reproduction.md", blocks)
    return out


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), squeeze=False)
    for ax, (load, by) in zip(axes[0], results.items(), strict=True):
        for label, r in by.items():
            xs = np.array(r["iteration_s"]) * 1e3
            ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=label)
        ax.set_title(f"Poisson trace, load {load}")
        ax.set_xlabel("per-job mean iteration time (ms)")
        ax.set_ylabel("CDF of jobs")
        ax.set_xscale("log")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--seeds", default="1,2,3", help="one Poisson trace per seed; jobs pooled")
    parser.add_argument("--loads", default="0.8,1.0")
    parser.add_argument("--mix", choices=sorted(MIXES), default="table-4.2", help="the models jobs are drawn from")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "reproductions")
    parser.add_argument("--no-pollux", action="store_true", help="leave out Pollux and Po+Cassini")
    args = parser.parse_args()
    cluster = load_cluster(CLUSTER)
    pm = PerformanceModel()
    results: dict[str, dict] = {}
    for load in (float(x) for x in args.loads.split(",")):
        traces = [poisson_trace(args.jobs, load, int(seed), pm, cluster, args.mix) for seed in args.seeds.split(",")]
        results[f"{load:.0%}"] = {label: run(traces, cluster, policy, contention)
                                  for label, (policy, contention) in SCHEMES.items()}
        if not args.no_pollux:
            elastic = [pollux_trace(t, cluster) for t in traces]
            results[f"{load:.0%}"].update({label: run(elastic, cluster, policy, contention)
                                           for label, (policy, contention) in POLLUX_SCHEMES.items()})
    snaps = snapshots(pm, cluster)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "img").mkdir(exist_ok=True)
    name = stem(args.mix)
    (args.out / f"{name}-table.md").write_text(table(results, snaps), encoding="utf-8")
    (args.out / f"{name}.json").write_text(json.dumps(
        {"jobs": args.jobs, "seeds": args.seeds, "mix": args.mix, "cluster": CLUSTER, "results": results,
         "snapshots": snaps}, indent=1), encoding="utf-8")
    plot(results, args.out / "img" / f"{name}.png")
    page = args.out / "cassini-reproduction.md"
    blocks = page_blocks(args.out)
    if page.is_file() and blocks is not None:
        page.write_text(filled(page, blocks), encoding="utf-8")
    assert all(math.isfinite(r["avg_iter_s"]) for by in results.values() for r in by.values())


if __name__ == "__main__":
    main()
