"""The inputs benchmarks/pollux_public_perjob.py gives Pollux's reference simulator (petuum/adaptdl, osdi21-artifact).

The side-by-side (docs/reproductions/pollux-public-comparison.md) rests on the claim that both simulators run
the same jobs at the same speeds. The peer is not installed in CI, so these tests hold that claim on the files
themselves: each placement the simulator can look up (rotated as its ``Application.get_throughput`` rotates it)
carries the iteration time Halyard charges there, at the local batch its ``Job.update_local_bsz`` computes;
the validation trace makes a step one iteration of progress and ends at the job's iterations; the workload and
Halyard's trace list the same jobs. And the shared join reports what it should on a tiny pair of runs.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from perjob import agree, common, jcts, stats
from pollux_public_perjob import (
    EPOCHS,
    GPUS_PER_NODE,
    STEPS,
    Timings,
    halyard_policy_and_perf,
    placements,
    tightest,
    variants,
    window,
    write_inputs,
)

from halyard.datamodel import parse_cluster
from halyard.traces import read_trace

NODES = 4  # the harness's cluster: job 3 of the window asks for 16 GPUs


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pollux-public")
    jobs = window(0, 4)
    return folder, jobs, write_inputs(jobs, NODES, folder)


def rotate(p: tuple[int, ...]) -> tuple[int, ...]:
    """The simulator's lookup key: zeros dropped, the lexicographically smallest rotation."""
    p = tuple(x for x in p if x)
    return min(p[i:] + p[:i] for i in range(len(p)))


def test_every_lookup_of_the_simulator_is_listed() -> None:
    """2 nodes of 4 GPUs: every per-node count pair the simulator can form, rotated, is listed once."""
    listed = placements(2, GPUS_PER_NODE)
    assert len(listed) == len(set(listed))
    formed = {rotate((a, b)) for a in range(GPUS_PER_NODE + 1) for b in range(GPUS_PER_NODE + 1) if a + b}
    assert set(listed) == formed
    assert (1, 3) in listed and (3, 1) not in listed


def test_step_times_are_halyards(written) -> None:
    folder, jobs, rows = written
    cluster = parse_cluster((folder / "cluster.toml").read_text(), source="t")
    timings = Timings(cluster)
    specs = {j.job_id: j for j in read_trace(folder / "halyard.csv", strict=True).jobs}
    for r in rows:
        spec = specs[r["id"]]
        with open(folder / "traces" / r["id"] / "placements.csv") as f:
            table = list(csv.DictReader(f))
        assert {row["placement"] for row in table} == {"".join(map(str, p)) for p in placements(NODES, GPUS_PER_NODE)}
        for row in table:
            p = tuple(int(c) for c in row["placement"])
            step, sync = timings.time(spec, p)
            assert float(row["step_time"]) == step and float(row["sync_time"]) == sync
            # Job.update_local_bsz with M0 as both initial and largest batch: int(M0 / replicas)
            assert int(row["local_bsz"]) in (r["batch"] // sum(p), r["batch"] // sum(p) + 1)
        # the job's length: its trace duration at the GPUs it asked for, in iterations of M0
        asked = timings.time(spec, tightest(r["gpus"]))[0]
        assert spec.iterations == max(1, round(jobs[rows.index(r)].duration_s / asked))


def test_progress_is_iterations_and_efficiency_is_one(written) -> None:
    folder, _, rows = written
    for r in rows:
        files = sorted((folder / "traces" / r["id"]).glob("validation-*.csv"))
        assert {p.name for p in files} == {"validation-1.csv", f"validation-{r['batch']}.csv"}
        for path in files:
            with open(path) as f:
                table = list(csv.DictReader(f))
            assert len(table) == EPOCHS
            assert float(table[-1]["progress"]) == pytest.approx(r["iterations"])
            # simulator.py Job.step: gain = (var + sqr) / (var / scale + sqr) = 1 at any batch when var = 0
            assert all(float(x["grad_var"]) == 0.0 and float(x["grad_sqr"]) > 0 for x in table)


def test_workload_and_trace_list_the_same_jobs(written) -> None:
    folder, _, rows = written
    with open(folder / "workload.csv") as f:
        workload = list(csv.DictReader(f))
    assert list(workload[0]) == ["name", "time", "application", "num_replicas", "batch_size"]
    specs = {j.job_id: j for j in read_trace(folder / "halyard.csv", strict=True).jobs}
    assert [w["name"] for w in workload] == [r["id"] for r in rows] == list(specs)
    for w in workload:
        s = specs[w["name"]]
        assert w["application"] == w["name"]  # each job its own application: its own length
        assert float(w["time"]) == s.submit_time and int(w["num_replicas"]) == s.num_gpus
        assert (s.min_gpus, s.max_gpus) == (1, NODES * GPUS_PER_NODE)
    assert min(s.submit_time for s in specs.values()) == 0.0


def test_every_step_is_a_named_option() -> None:
    names = variants()
    assert names[0] == "pollux" and len(names) == len(STEPS) + 1
    policy, perf = halyard_policy_and_perf(names[-1])
    assert (policy.adapt_batch, policy.penalize_starts, policy.explore_doubling) == (False, True, True)
    assert perf.contention == "off" and perf.start_cost_s == 30.0
    policy, perf = halyard_policy_and_perf("pollux")
    assert (policy.adapt_batch, policy.penalize_starts, policy.explore_doubling) == (True, False, False)
    assert perf.contention == "fair" and perf.start_cost_s == 0.0


def test_the_join_on_a_tiny_pair() -> None:
    public = {"cpu_s": 10.0, "jobs": {"a": {"submit": 0.0, "end": 100.0}, "b": {"submit": 10.0, "end": 210.0},
                                      "c": {"submit": 20.0, "end": None}}}
    ours = {"cpu_s": 0.1, "jobs": {"a": {"submit": 0.0, "end": 104.0}, "b": {"submit": 10.0, "end": 310.0},
                                   "c": {"submit": 20.0, "end": 50.0}}}
    assert jcts(public) == {"a": 100.0, "b": 200.0}
    assert agree(public, ours) == 0.5  # a within 5 %, b 1.5x; c finished by one side only
    p, h = common(public, ours)
    assert set(p["jobs"]) == set(h["jobs"]) == {"a", "b"}
    assert stats(h)["mean_jct_s"] / stats(p)["mean_jct_s"] == pytest.approx(404 / 300)
    assert stats(p)["makespan_s"] == 210.0 and math.isclose(stats(h)["p99_jct_s"], 300.0)


PEER = Path(os.environ.get("POLLUX_CHECKOUT", "/work/ext/adaptdl")) / "simulator"
PEER_PYTHON = os.environ.get("POLLUX_PYTHON", "/work/ext/adaptdl-venv/bin/python")


@pytest.mark.skipif(not (PEER / "applications.py").is_file() or not Path(PEER_PYTHON).is_file(),
                    reason="the peer (petuum/adaptdl osdi21-artifact and its Python) is not installed here")
def test_the_peer_reads_halyards_step_times(written) -> None:
    """Where the peer is installed: its own ``Application`` reads the written folder and answers, for a
    placement and its rotation, the step time Halyard charges, and takes M0 as initial and largest batch."""
    folder, _, rows = written
    r = next(r for r in rows if r["gpus"] > 4)
    script = ("import sys, json; sys.path.insert(0, sys.argv[1]); import applications as a\n"
              "app = a.Application(sys.argv[2], init_batch_size=int(sys.argv[3]), max_batch_size=int(sys.argv[3]))\n"
              "m0 = int(sys.argv[3])\n"
              "print(json.dumps([float(a.Application.get_throughput(app, p, m0 // sum(p))[0]) "
              "for p in ((1,), (4, 2), (2, 4), (3, 3))] + [app.max_epochs, app.init_batch_size, app.max_batch_size]))")
    out = subprocess.run([PEER_PYTHON, "-c", script, str(PEER), str(folder / "traces" / r["id"]), str(r["batch"])],
                         capture_output=True, text=True, check=True, cwd=PEER)
    one, four_two, two_four, three_three, epochs, init, largest = json.loads(out.stdout.strip().splitlines()[-1])
    timings = Timings(parse_cluster((folder / "cluster.toml").read_text(), source="t"))
    spec = {j.job_id: j for j in read_trace(folder / "halyard.csv", strict=True).jobs}[r["id"]]
    assert one == timings.time(spec, (1,))[0] and four_two == two_four == timings.time(spec, (4, 2))[0]
    assert three_three == timings.time(spec, (3, 3))[0]
    assert (epochs, init, largest) == (EPOCHS, r["batch"], r["batch"])
