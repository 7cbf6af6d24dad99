"""The inputs benchmarks/dally_public_perjob.py gives Dally's reference simulator (aakash-sharma/cluster-sim).

The side-by-side (docs/reproductions/dally-public-comparison.md) is only as good as the claim that both simulators
run the same jobs under the same performance model. These tests hold the two halves of that claim
without Java: the ASTRA-sim stand-in, run as cluster-sim runs it (a real process with ASTRA-sim's
command line), answers Dally Table 1's figure for the slowest tier in the network file cluster-sim
writes (§4.2.1: "The percentage value is applied to the iteration time from the trace"), and the job
file gives each job the run time Halyard's ``duration_s`` means.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from dally_public_perjob import (
    EVENT_S,
    GPUS_PER_MACHINE,
    compile_variant,
    count_overheads,
    overheads,
    read_workbook,
    tightest_overhead,
    write_public_inputs,
)
from reproduce_dally import dally_trace


def ask_standin(folder: Path, paths: dict, job: int, model: str, types: list[str], units: list[int]) -> float:
    """Run the stand-in as IntraJobScheduler.astra_sim does; return communication / compute."""
    astra = folder / "astra"
    run = astra / "runs" / "r"
    (run / "network").mkdir(parents=True, exist_ok=True)
    (run / "results").mkdir(exist_ok=True)
    net = run / "network" / f"{job}.json"
    # the field order and spelling of json-simple's output, as cluster-sim writes the file
    net.write_text(json.dumps({"topologies-per-dim": ["Switch"] * len(units), "units-count": units,
                               "topology-name": "Hierarchical", "dimension-type": types,
                               "dimensions-count": len(units)}, separators=(",", ":")))
    cluster = json.loads(paths["cluster"].read_text())
    subprocess.run([cluster["astra_sim_bin_path"], f"--network-configuration={net}",
                    f"--system-configuration={run}/system/{job}.txt",
                    f"--workload-configuration={cluster['astra_sim_path']}/workload/{model}.txt",
                    f"--path={run}/results/", f"--run-name={job}", "--compute-scale=1.0"], check=True, cwd=run)
    values = (run / "results" / "EndToEnd.csv").read_text().splitlines()[1].split(",")
    return float(values[13]) / float(values[12])


def test_standin_answers_table1_by_the_slowest_tier(tmp_path):
    """Dally Table 1 (MobileNetV3: machine 42 %, rack 940 %, network 19592 %) by the slowest dimension
    cluster-sim wrote: N only -> machine, a P -> rack, a PP -> network; the same at any GPU count."""
    table = overheads()
    paths = write_public_inputs(dally_trace(3, seed=1, poisson_per_day=None), tmp_path, 2, table, 300.0, "table1")
    assert ask_standin(tmp_path, paths, 1, "mobilenetv3", ["N"], [4]) == pytest.approx(0.42)
    assert ask_standin(tmp_path, paths, 2, "mobilenetv3", ["N", "P"], [4, 2]) == pytest.approx(9.40)
    assert ask_standin(tmp_path, paths, 3, "mobilenetv3", ["N", "N", "P", "PP"], [1, 1, 1, 2]) == pytest.approx(195.92)
    assert ask_standin(tmp_path, paths, 4, "vgg11", ["P"], [16]) == pytest.approx(0.06)


def test_standin_by_gpu_count_reads_the_counts_cluster_sim_writes(tmp_path):
    """``--profile count``: groups = the slowest dimension's units, per group = the others' product;
    the fitted collective model's figure for exactly that split."""
    paths = write_public_inputs(dally_trace(3, seed=1, poisson_per_day=None), tmp_path, 2, overheads(), 300.0,
                                "count")
    fit = {(m, t, p, g): f for m, t, p, g, f in count_overheads()}
    assert ask_standin(tmp_path, paths, 1, "resnet18", ["N", "PP"], [1, 2]) == pytest.approx(
        fit[("resnet18", 4, 1, 2)], rel=1e-9)
    assert ask_standin(tmp_path, paths, 2, "resnet18", ["N", "P"], [4, 2]) == pytest.approx(
        fit[("resnet18", 3, 4, 2)], rel=1e-9)
    assert fit[("resnet18", 4, 1, 2)] != fit[("resnet18", 4, 8, 8)]  # the count matters in this profile


def test_job_file_gives_halyards_run_time(tmp_path):
    """iterations x time per iteration / GPUs x (1 + Table 1 at the tightest placement) = duration_s (to one
    iteration event), so a job on its tightest placement runs as long on both sides."""
    jobs = dally_trace(40, seed=3, poisson_per_day=50.0)
    table = overheads()
    paths = write_public_inputs(jobs, tmp_path, 2, table, 300.0, "table1")
    rows = {int(r["job_id"]): r for r in json.loads(paths["jobs"].read_text())}
    for j in jobs:
        r = rows[int(j.job_id[1:])]
        assert int(r["max_parallelism"]) == j.num_gpus and float(r["arrival_time"]) == j.submit_time
        run_s = int(r["total_iterations"]) * float(r["time_per_iteration"]) / j.num_gpus
        assert run_s * (1 + tightest_overhead(j.model, j.num_gpus, table)) == pytest.approx(
            j.duration_s, abs=EVENT_S * (1 + tightest_overhead(j.model, j.num_gpus, table)))
    assert tightest_overhead("mobilenetv3", GPUS_PER_MACHINE, table) == pytest.approx(0.42)
    assert tightest_overhead("mobilenetv3", 1, table) == 0.0


def test_workbook_text_is_read_per_job(tmp_path):
    """The POI stand-in's text (## sheet, header, rows) gives each job's end, arrival, waits and GPU time."""
    book = tmp_path / "Dally.xlsx"
    book.write_text("## job-stats\nJobId,Start-time,End-time,Running-time,Queue-delay,%Queue-delay,GPU-time,"
                    "%GPU-time,Comp-time,%Comp-Time,Comm-time,x,x,x,x,x,x,x,x,makespan,Arrival-time\n"
                    "7.0,10.0,110.0,100.0,40.0,40.0,60.0,60.0,50.0,50.0,10.0,0,0,0,0,0,0,0,0,110.0,5.0\n"
                    "## cluster-timeline-stats\nTimestamp\n1.0\n")
    row = read_workbook(book)[7]
    assert (row["end"] - row["arrival"], row["queue"], row["gpu_time"], row["comm"]) == (105.0, 40.0, 60.0, 10.0)


FAKE_ALLOCATOR = """package com.wisr.mlsched.globalsched;
public class InterJobScheduler {
	interface Job { boolean isWaitingForResources(); java.util.Set<Integer> getGPUsAvailableForNextIteration(); }
	public static int bidders(java.util.List<Job> jobs) {
		int n = 0;
		for (Job job : jobs) {
			if (!job.getGPUsAvailableForNextIteration().isEmpty()) {
				continue;
			}
			n++;
		}
		return n;
	}
}
"""


@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)")
def test_variant_changes_one_line_and_compiles_in_the_work_folder(tmp_path):
    """--public-variant running-jobs-wait: the allocator's module, read from the checkout, gains the one
    line that lets only waiting jobs bid, and is compiled in the working folder; the checkout is not
    touched. A checkout without the line it changes is refused."""
    module = tmp_path / "checkout" / "src" / "main" / "java" / "com" / "wisr" / "mlsched" / "globalsched"
    module.mkdir(parents=True)
    (module / "InterJobScheduler.java").write_text(FAKE_ALLOCATOR)
    classes = compile_variant(tmp_path / "checkout", tmp_path / "build", "running-jobs-wait", tmp_path / "work")
    assert (classes / "com" / "wisr" / "mlsched" / "globalsched" / "InterJobScheduler.class").exists()
    changed = (tmp_path / "work" / "variant-running-jobs-wait" / "src" / "InterJobScheduler.java").read_text()
    assert changed.count("if (!job.isWaitingForResources()) continue;") == 1
    assert changed.index("Resources()) continue") < changed.index("NextIteration().isEmpty")
    assert (module / "InterJobScheduler.java").read_text() == FAKE_ALLOCATOR
    (module / "InterJobScheduler.java").write_text(FAKE_ALLOCATOR.replace("!job.getGPUs", "! job.getGPUs"))
    with pytest.raises(SystemExit, match="no longer has the line"):
        compile_variant(tmp_path / "checkout", tmp_path / "build", "running-jobs-wait", tmp_path / "work2")
