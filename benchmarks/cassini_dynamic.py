"""The Cassini thesis' dynamic trace (§4.5.1 (ii)): a busy cluster, then a set of jobs arrives together.

    .venv/bin/python benchmarks/cassini_dynamic.py --variant data            # §4.5.3 (default)
    .venv/bin/python benchmarks/cassini_dynamic.py --variant model-parallel  # §4.5.4
    .venv/bin/python benchmarks/cassini_dynamic.py --variant multi-gpu       # §4.5.6
    [--seeds 1-50] [--mix MIX] [--out docs/reproductions]

§4.5.1: "dynamic trace where a set of DNN training jobs are present in the cluster, and a new set of
jobs arrive". Per seed: jobs drawn as in reproduce_cassini.py's Poisson trace (model, 1-12 GPUs, batch,
200-1,000 iterations) fill ``BUSY_FRACTION`` of the cluster's GPUs at time 0; the next draws that fit
the GPUs left arrive together at ``ARRIVAL_S``, so their auction round has several winners (where
``+cassini-joint``'s cluster-wide candidates can differ from per-job ones). The variants
(:data:`VARIANTS`):

- ``data`` (§4.5.3): "the arrival of DLRM and ResNet50 to the cluster while the cluster is busy running
  other jobs". DLRM is not modelled (its embedding all-to-all is not in the catalog, and no source gives
  its step time), so both sets are drawn from the mix (default ``table-4.3-matched``).
- ``model-parallel`` (§4.5.4): "all jobs in the trace use model parallelism ... the arrival of multiple
  GPT and DLRM models while the cluster is training other model parallel jobs". Both sets are drawn
  from the ``model-parallel`` mix: GPT-1, GPT-2 and GPT-3 (XL) pipelines as Table 4.2's mix has them
  (one stage per GPU, 2-12 GPUs); DLRM is left out as above. ``--mix model-parallel-thesis-traffic`` runs the
  same jobs with the thesis' own GPT traffic (§4.1.1, Fig. 4.1(c): 25 Gbps through forward and backward;
  reproduce_cassini's ``MEASURED_UP_DEMAND``) in place of the performance model's activation sends, for
  every scheme and for the census alike; ``--mix model-parallel-line-rate-traffic`` the same at the NIC's
  50 Gbit/s (ours: the most one job can send, an upper bound on what traffic alone can do here).
- ``multi-gpu`` (§4.5.6, "Impact of Multiple GPUs per Server"): our text of the thesis stops after the
  section's first paragraph and Fig. 4.17 is missing, so the set-up is ours: the testbed's topology
  with ``MULTI_GPUS_PER_SERVER`` A100s per server behind the same 50 Gbit/s NIC
  (:func:`multi_gpu_testbed`), the jobs as in ``data``. The thesis says Cassini's gains "are more
  pronounced for models that are distributed outside the boundary of a server", so jobs larger than a
  server are also reported alone.

Schemes: Themis, Th+Cassini, Th+Cassini-joint and Ideal (Themis without contention) on the jobs as
drawn; Pollux and Po+Cassini on the same jobs with every data-parallel one elastic (reproduce_cassini's
``pollux_trace``). Per scheme, the average and p99 of the jobs' mean iteration times (all jobs, the
arriving set, jobs larger than a server), the baseline's figure over the scheme's, and 95% bootstrap
intervals over the seeds; for the Themis schemes also cassini_census.py's link census on the same
traces (``CENSUS_SCHEMES``: where jobs contend, Table 4.1's scores, the fluid slowdowns). Writes
``cassini-dynamic.json`` (this variant's entry; the others kept) and renders
``cassini-dynamic-table.md`` and the page's generated blocks from it (reproduce_cassini.py's
``pages``). Not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cassini_census import figures
from cassini_census import run as census_run
from reproduce_cassini import (
    CLUSTER,
    DYNAMIC_JSON,
    HYBRID_DATA_DEGREE,
    MEASURED_UP_DEMAND,
    MIXES,
    MODEL_PARALLEL,
    ROOT,
    page_blocks,
    pages,
    poisson_trace,
    pollux_trace,
    uplink_profile,
)

from halyard.datamodel import JobSpec, Parallelism, load_cluster, parse_cluster, read_cluster_text
from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.scheduling import Simulator

BUSY_FRACTION = 2 / 3  # ours: "busy" read as two thirds of the GPUs held when the new set arrives (16 of 24)
ARRIVAL_S = 60.0  # ours: the new set arrives a minute in, inside the busy jobs' first 10-minute lease
POOL = 40  # jobs drawn per seed per 24 GPUs to fill both sets from (ours; more than ever fit)
BOOTSTRAP = 1000  # resamples of the seeds for the intervals
# Ours (§4.5.6's set-up is not in our text): two A100s per server, the smallest multi-GPU server; the
# ASUS ESC4000A-E10 of §4.5.1 holds up to four double-width GPUs on PCIe (the testbed file's fabric).
MULTI_GPUS_PER_SERVER = 2
# label -> (policy, contention, elastic): elastic schemes run on pollux_trace's jobs
SCHEMES = {"Themis": ("themis", "fair", False), "Th+Cassini": ("themis+cassini", "fair", False),
           "Th+Cassini-joint": ("themis+cassini-joint", "fair", False), "Ideal": ("themis", "off", False),
           "Pollux": ("pollux", "fair", True), "Po+Cassini": ("pollux+cassini", "fair", True)}
CENSUS_SCHEMES = ("Themis", "Th+Cassini", "Th+Cassini-joint")  # censused again on the same traces
BASELINE = {"Th+Cassini": "Themis", "Th+Cassini-joint": "Themis", "Ideal": "Themis", "Po+Cassini": "Pollux"}


@dataclass(frozen=True)
class Variant:
    """One of the thesis' dynamic-trace experiments: its section, default mix and GPUs per server."""

    section: str
    mix: str
    gpus_per_server: int = 1


VARIANTS = {"data": Variant("§4.5.3", "table-4.3-matched"),
            "model-parallel": Variant("§4.5.4", "model-parallel"),
            "multi-gpu": Variant("§4.5.6", "table-4.3-matched", MULTI_GPUS_PER_SERVER)}


def multi_gpu_testbed(gpus: int):
    """The testbed (Fig. 4.10's switches and links, unchanged) with ``gpus`` A100s per server."""
    text, _ = read_cluster_text(CLUSTER)
    text, n = re.subn(r"(?m)^gpus = 1$", f"gpus = {gpus}", text)
    assert n == 1, "cassini-testbed.toml: expected one 'gpus = 1' line"
    text = re.sub(r'(?m)^name = "cassini-testbed"$', f'name = "cassini-testbed-{gpus}gpu"', text)
    return parse_cluster(text, source=f"<cassini-testbed, {gpus} GPUs per server>")


def dynamic_trace(seed: int, pm: PerformanceModel, cluster, mix: str) -> tuple[list[JobSpec], set[str]]:
    """The busy set at 0 and the arriving set at ``ARRIVAL_S`` (its job ids returned too)."""
    pool = poisson_trace(POOL * cluster.total_gpus // 24, 1.0, seed, pm, cluster, mix)
    busy = round(BUSY_FRACTION * cluster.total_gpus)
    jobs, arriving, held = [], set(), 0
    for j in pool:
        if held + j.num_gpus > cluster.total_gpus:
            continue
        late = held >= busy
        jobs.append(JobSpec(job_id=j.job_id, submit_time=ARRIVAL_S if late else 0.0, model=j.model,
                            batch_size=j.batch_size, num_gpus=j.num_gpus, iterations=j.iterations,
                            parallelism=j.parallelism))
        if late:
            arriving.add(j.job_id)
        held += j.num_gpus
    return jobs, arriving


def uplink_demands(mix: str) -> dict[str, dict[str, float]]:
    """Per model of ``mix`` at its first batch, a 4-GPU job across two ToRs as the mix runs it (GPT rows a
    pipeline, of one stage per GPU or, on the hybrid mix, of 2 stages of ``HYBRID_DATA_DEGREE`` GPUs): its
    iteration, Up share, peak demand and GB per iteration on the ToR uplink, and the link's capacity. Says
    whether two such jobs can oversubscribe a link at all (peaks summing above capacity)."""
    cluster, pm = load_cluster(CLUSTER), PerformanceModel(measured_up_demand=MEASURED_UP_DEMAND.get(mix))
    capacity = cluster.link_gbyte_s(cluster.route(0, 1)[0])
    out = {}
    for model, batches in MIXES[mix].items():
        if not batches:
            continue
        data = HYBRID_DATA_DEGREE.get(mix, 1)
        parallel = Parallelism(data=data, tensor=1, pipeline=4 // data) if model in MODEL_PARALLEL else None
        prof = uplink_profile(pm, cluster, model, batches[0], parallel)
        out[f"{model} ({batches[0]})"] = {"iteration_s": prof.iteration_s, "up_share": prof.up_fraction,
                                         "peak_gbyte_s": max(p.demand_gbyte_s for p in prof.phases),
                                         "gbytes": prof.gbytes,
                                         "capacity_gbyte_s": capacity}
    return out


def per_job(jobs: list[JobSpec], cluster, policy: str, contention: str,
            measured_up_demand: dict[str, float] | None = None) -> dict[str, float]:
    """Job id -> mean iteration time (run time / iterations) of each completed job."""
    sim = Simulator(cluster, make_policy(policy),
                    PerformanceModel(contention=contention, measured_up_demand=measured_up_demand))
    sim.run(jobs)
    return {r.spec.job_id: r.run_time_s(r.end_time) / r.spec.iterations
            for r in sim.core.records.values() if r.end_time is not None}


def _stats(xs: list[float]) -> list[float]:
    return [float(np.mean(xs)), float(np.percentile(xs, 99))] if xs else []


def interval(base: list[np.ndarray], scheme: list[np.ndarray], draws: list[np.ndarray]) -> list[list[float]]:
    """95% bootstrap intervals over seeds of base / scheme, [[avg lo, hi], [p99 lo, hi]]."""
    avg, p99 = [], []
    for idx in draws:
        b = np.concatenate([base[i] for i in idx])
        s = np.concatenate([scheme[i] for i in idx])
        avg.append(b.mean() / s.mean())
        p99.append(np.percentile(b, 99) / np.percentile(s, 99))
    return [[float(x) for x in np.percentile(avg, [2.5, 97.5])], [float(x) for x in np.percentile(p99, [2.5, 97.5])]]


def measure(variant: str, mix: str, first: int, last: int) -> dict:
    """Every scheme on the variant's traces, seeds ``first``-``last``: the JSON entry of the variant."""
    v = VARIANTS[variant]
    cluster = load_cluster(CLUSTER) if v.gpus_per_server == 1 else multi_gpu_testbed(v.gpus_per_server)
    pm, measured = PerformanceModel(), MEASURED_UP_DEMAND.get(mix)
    traces = [dynamic_trace(s, pm, cluster, mix) for s in range(first, last + 1)]
    arrivals = [len(a) for _, a in traces]
    seeds: dict[str, list[np.ndarray]] = {}
    schemes = {}
    for label, (policy, contention, elastic) in SCHEMES.items():
        every, new, wide, per_seed = [], [], [], []
        for jobs, arriving in traces:
            spec = {j.job_id: j for j in jobs}
            times = per_job(pollux_trace(jobs, cluster) if elastic else jobs, cluster, policy, contention, measured)
            every += times.values()
            new += [t for k, t in times.items() if k in arriving]
            wide += [t for k, t in times.items() if spec[k].num_gpus > v.gpus_per_server]
            per_seed.append(np.array(list(times.values())))
        seeds[label] = per_seed
        schemes[label] = {"jobs": len(every), "all": _stats(every), "arriving": _stats(new),
                          "wider_than_a_server": _stats(wide)}
        print(f"  {label}: {len(every)} jobs, avg / p99 {schemes[label]['all'][0] * 1e3:.0f} / "
              f"{schemes[label]['all'][1] * 1e3:.0f} ms", flush=True)
    census = {}  # the link census of cassini_census.py on the same traces: where contention is, and phases
    for label in CENSUS_SCHEMES:
        policy = SCHEMES[label][0]
        census[label] = figures(*census_run([jobs for jobs, _ in traces], cluster, policy, measured))
    rng = np.random.default_rng(0)
    draws = [rng.integers(len(traces), size=len(traces)) for _ in range(BOOTSTRAP)]
    intervals = {label: interval(seeds[base], seeds[label], draws) for label, base in BASELINE.items()}
    return {"section": v.section, "mix": mix, "cluster": cluster.name, "gpus_per_server": v.gpus_per_server,
            "seeds": f"{first}-{last}", "busy_gpus": round(BUSY_FRACTION * cluster.total_gpus),
            "total_gpus": cluster.total_gpus, "arrival_s": ARRIVAL_S,
            "jobs": sum(len(t) for t, _ in traces),
            "arriving": {"min": min(arrivals), "max": max(arrivals), "mean": float(np.mean(arrivals))},
            "schemes": schemes, "baseline": BASELINE, "ci95": intervals, "uplink_demand": uplink_demands(mix),
            "census": census}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="data")
    parser.add_argument("--seeds", default="1-50", help="first-last")
    parser.add_argument("--mix", choices=sorted(MIXES), default=None, help="the variant's mix unless given")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "reproductions")
    args = parser.parse_args()
    first, last = (int(x) for x in args.seeds.split("-"))
    mix = args.mix or VARIANTS[args.variant].mix
    key = args.variant if mix == VARIANTS[args.variant].mix else f"{args.variant}:{mix}"
    print(f"dynamic trace, {key}, seeds {first}-{last}", flush=True)
    entry = measure(args.variant, mix, first, last)
    path = args.out / DYNAMIC_JSON
    stored = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"variants": {}}
    stored["variants"][key] = entry
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stored, indent=1) + "\n", encoding="utf-8")
    rendered = pages(args.out)
    for page, text in rendered.items():
        if page.name != "cassini-reproduction.md" or page_blocks(args.out) is not None:
            page.write_text(text, encoding="utf-8")
    print((args.out / "cassini-dynamic-table.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
