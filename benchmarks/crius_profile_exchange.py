"""Crius' agile estimation fed by the Profile / ProfileResult exchange (§5.1), and §8.2's accuracy from it.

A test cluster (control plane + one emulated agent per node, real gRPC on loopback) of the
``crius-64`` testbed (§8.1: 16 x 2 A40 + 16 x 2 A10) is asked for every stage profiling of the
Cells of a few models at N_G = 2, 4, 8 (Cells of N_G/2, N_G, 2 N_G GPUs, §6.1); each profiling
is a ``Profile`` to an agent of the Cell's type. Printed: the profilings exchanged, their wall
time against the same profilings taken from the performance model in-process first (a ratio in
one run; the agents share that model, so their answers hit its plan cache: the ratio is the
exchange's own cost), whether every exchanged profile equals the model's, and §8.2's estimation
accuracy ``1 - |Te - Td| / Td`` of every Cell and stage choice from the exchanged profiles (``Te``: the best of the 2^S
assembled plans; ``Td``: the best plan of the Cell's whole DP x TP space run on the model). Both
sides use one performance model, so the accuracy measures what the assembly misses, not model
error (the paper: 93.4 % mean, 90.5 % worst, Fig. 12a).

    .venv/bin/python benchmarks/crius_profile_exchange.py
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import numpy as np

from halyard.datamodel import JobSpec, read_cluster_text
from halyard.policies import ClusterView, FreeResources
from halyard.policies.crius import Cell, gpu_choices, stage_choices
from halyard.policies.crius_profiles import ModelProfiles, cell_accuracy
from halyard.testing.cluster import TestCluster

MODELS = ("bert-large", "transformer-xl", "gnmt", "bert-0.76b", "wresnet-0.5b", "moe-0.69b")
N_G = (2, 4, 8)


async def run() -> None:
    toml, _ = read_cluster_text("crius-64")
    specs = [JobSpec(f"{m}-{n}", 0.0, m, n, iterations=1, min_gpus=max(1, n // 2), max_gpus=2 * n)
             for m in MODELS for n in N_G]
    async with TestCluster(policy="crius", cluster_toml=toml) as tc:
        cp = tc.control_plane
        requests = {r.key: r for s in specs for r in cp.core.preparations(s)}
        model = ModelProfiles(cp.perf, cp.cluster)  # the model the emulated agents share
        t0 = time.perf_counter()
        local = {k: model.stage_profiles(r) for k, r in requests.items()}
        local_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        await cp.profiles.fetch(requests.values())
        exchange_s = time.perf_counter() - t0
        same = all(cp.profiles.cached(r) == local[k] for k, r in requests.items())
        print(f"profilings: {len(requests)} over {len(tc.agents)} agents; exchanged {cp.profiles.exchanged}, "
              f"refused {len(cp.profiles.errors)}; all equal to the model's: {same}")
        print(f"exchange wall (agents' model cache warm) / in-process model profiling (cold): "
              f"{exchange_s / local_s:.1f}x ({exchange_s * 1e3:.0f} ms vs {local_s * 1e3:.0f} ms, same run)")
        view = replace(ClusterView(0.0, cp.cluster, FreeResources(cp.cluster), {}, [], cp.perf, 300.0, {}),
                       profiles=cp.profiles)
        found = []
        for spec in specs:
            for gpu_type in cp.cluster.gpu_types:
                for gpus in gpu_choices(spec):
                    for stages in stage_choices(spec.num_gpus, cp.perf.layers(spec.model)):
                        acc = cell_accuracy(view, spec, Cell(gpu_type, gpus, stages)) if gpus % stages == 0 else None
                        if acc is not None:
                            found.append((acc, f"{spec.model} {gpus} x {gpu_type}, {stages} stage(s)"))
        worst = min(found)
        print(f"estimation accuracy (§8.2) from exchanged profiles over {len(found)} Cells: "
              f"mean {np.mean([a for a, _ in found]):.1%}, worst {worst[0]:.1%} ({worst[1]}); "
              f"paper 93.4% mean, 90.5% worst")


if __name__ == "__main__":
    asyncio.run(run())
