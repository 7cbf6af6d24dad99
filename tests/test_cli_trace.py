"""`halyard trace stats|convert|slice` and `halyard simulate --trace` on every format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from trace_samples import BUNDLED, SHARED, write

from halyard.cli import main
from halyard.traces import read_trace

PAI_JOBS = ["j1,i1,u1,Terminated,1000.0,5000.0", "j2,i2,u2,Failed,1100.0,9000.0"]
PAI_TASKS = ["j1,worker,1.0,Terminated,1060.0,4000.0,600.0,29.296875,50.0,MISC",
             "j2,worker,4.0,Failed,1150.0,8500.0,600.0,30.0,100.0,V100"]
HELIOS = ["job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue",
          "11,uA,vcA,8,48,1,COMPLETED,2020-04-01 00:10:00,2020-04-01 00:12:00,2020-04-01 02:12:00,7200,120",
          "12,uB,vcB,2,12,1,FAILED,2020-04-01 00:20:00,2020-04-01 00:21:00,2020-04-01 00:51:00,1800,60"]


def sample(tmp_path: Path, fmt: str) -> Path:
    """A sample file of each format: bundled, from shared/ (Alibaba), or hand-written (PAI, Helios)."""
    bundled = {
        "csv": "default.csv",
        "philly-pollux": "philly_sample.csv",
        "philly-raw": "philly_cluster_job_log_readme_examples.json",
        "itp-raw": "elasticflow_itp_raw_cluster01.csv",
        "itp-annotated": "elasticflow_itp_annotated_195job.csv",
        "gavel": "gavel_philly_vc2869ce_seed0.trace",
        "pollux": "pollux_workload-6.csv",
    }
    if fmt in ("philly-pollux", "itp-raw"):  # the larger samples: their first 300 jobs keep the test fast
        return write(tmp_path, bundled[fmt], (BUNDLED / bundled[fmt]).read_text().splitlines()[:301])
    if fmt in bundled:
        return BUNDLED / bundled[fmt]
    if fmt == "jsonl":
        out = tmp_path / "default.jsonl"
        assert main(["trace", "convert", str(BUNDLED / "default.csv"), "--to", str(out)]) == 0
        return out
    if fmt == "alibaba-v2023":
        path = SHARED / "alibaba_v2023_openb_pod_list_default.csv"
        if not path.exists():
            pytest.skip("the Alibaba v2023 pod list is not in shared/ (it may not be redistributed)")
        # The first 300 pods (a slice written in place of the file, never copied into the repository).
        lines = path.read_text().splitlines()[:301]
        return write(tmp_path, "pods.csv", lines)
    if fmt == "pai-v2020":
        write(tmp_path, "pai_task_table.csv", PAI_TASKS)
        return write(tmp_path, "pai_job_table.csv", PAI_JOBS)
    if fmt == "helios":
        return write(tmp_path, "cluster_log.csv", HELIOS)
    raise AssertionError(fmt)


ALL_FORMATS = ["csv", "jsonl", "philly-pollux", "philly-raw", "itp-raw", "itp-annotated", "gavel", "pollux",
               "alibaba-v2023", "pai-v2020", "helios"]


def test_every_format_has_a_sample() -> None:
    from halyard.traces import FORMAT_NAMES

    assert sorted(ALL_FORMATS) == sorted(FORMAT_NAMES)


@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_simulate_runs_every_format(tmp_path, capsys, fmt) -> None:
    trace = sample(tmp_path, fmt)
    out = tmp_path / "r.json"
    assert main(["simulate", "--trace", str(trace), "--no-progress", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"format {fmt} (detected: " in err
    result = json.loads(out.read_text())
    assert result["trace_format"] == fmt
    assert result["jobs"] == len(read_trace(trace).jobs) > 0
    assert result["completed"] == result["jobs"] and result["rejected"] == 0


def test_stats_text_and_json(capsys) -> None:
    trace = BUNDLED / "elasticflow_itp_raw_cluster01.csv"
    assert main(["trace", "stats", str(trace)]) == 0
    text = capsys.readouterr().out
    assert "jobs           1,595" in text
    assert "1: 1,530 (95.9%)" in text and "64: 26 (1.6%)" in text
    assert "p0 612s" in text and "p100 144,151s" in text
    assert main(["trace", "stats", str(trace), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["format"] == "itp-raw" and stats["jobs"] == 1595
    assert stats["span_s"] == 4_848_400 - 1_932_025
    assert stats["arrival_rate_per_hour"] == pytest.approx(1595 / (stats["span_s"] / 3600))
    assert stats["gpu_demand"] == {"1": 1530, "2": 11, "4": 6, "8": 5, "16": 6, "32": 11, "64": 26}
    assert stats["duration_s"]["p0"] == 612 and stats["iterations"] is None


def test_stats_reports_skipped_and_left_out_rows(tmp_path, capsys) -> None:
    p = write(tmp_path, "c.csv", [HELIOS[0], HELIOS[1],
                                  "13,uC,vcC,x,1,1,COMPLETED,2020-04-01 00:20:00,,,5,0",
                                  "14,uC,vcC,0,1,1,COMPLETED,2020-04-01 00:20:00,,,5,0"])
    assert main(["trace", "stats", str(p), "--json"]) == 0
    captured = capsys.readouterr()
    stats = json.loads(captured.out)
    assert stats["jobs"] == 1 and stats["skipped_rows"] == 1
    assert stats["dropped_rows"] == {"CPU-only job (gpu_num = 0)": 1}
    assert f"skipped: {p}:3, field 'gpu_num'" in captured.err
    assert "skipped 1 malformed row of" in captured.err and "left out 1 valid row, not jobs" in captured.err


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_convert_round_trips(tmp_path, suffix) -> None:
    for name in ("gavel_philly_vc2869ce_seed0.trace", "philly_cluster_job_log_readme_examples.json",
                 "elasticflow_itp_annotated_195job.csv"):
        out = tmp_path / f"{name}{suffix}"
        assert main(["trace", "convert", str(BUNDLED / name), "--to", str(out)]) == 0
        assert read_trace(out).jobs == read_trace(BUNDLED / name).jobs


def test_slice_window_vc_first(tmp_path) -> None:
    src = BUNDLED / "philly_sample.csv"
    jobs = read_trace(src).jobs
    out = tmp_path / "s.csv"
    assert main(["trace", "slice", str(src), "--out", str(out), "--start", "2600000", "--end", "2700000"]) == 0
    kept = read_trace(out).jobs
    assert kept == tuple(j for j in jobs if 2_600_000 <= j.submit_time < 2_700_000)
    assert 0 < len(kept) < len(jobs)
    assert main(["trace", "slice", str(src), "--out", str(out), "--vc", "ee9e8c", "--vc", "11cb48"]) == 0
    assert read_trace(out).jobs == tuple(j for j in jobs if j.tenant in ("ee9e8c", "11cb48"))
    assert main(["trace", "slice", str(src), "--out", str(out), "--vc", "6214e9", "--first", "7"]) == 0
    assert read_trace(out).jobs == tuple(j for j in jobs if j.tenant == "6214e9")[:7]


def test_forced_format(tmp_path, capsys) -> None:
    trace = BUNDLED / "pollux_workload-6.csv"
    assert main(["trace", "stats", str(trace), "--trace-format", "pollux"]) == 0
    assert "format pollux (given by --trace-format)" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["trace", "stats", "POLLUX", "--trace-format", "helios"], "not a helios header"),
    (["trace", "stats", "POLLUX", "--trace-format", "parquet"], "unknown trace format 'parquet'"),
    (["trace", "convert", "POLLUX", "--to", "out.parquet"], "--to"),
    (["trace", "slice", "POLLUX", "--out", "o.csv", "--start", "10", "--end", "5"], "--end"),
    (["trace", "slice", "POLLUX", "--out", "o.csv", "--first", "0"], "--first"),
    (["simulate", "--trace", "BAD", "--strict"], "BAD:3, field 'num_replicas'"),
    (["trace", "stats", "missing.trace"], "no such trace file"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, args, message) -> None:
    bad = write(tmp_path, "bad.csv", ["name,time,application,num_replicas,batch_size",
                                      "a,1,cifar10,1,128", "b,2,cifar10,0,128"])
    args = [str(BUNDLED / "pollux_workload-6.csv") if a == "POLLUX" else str(bad) if a == "BAD" else a
            for a in args]
    message = message.replace("BAD", str(bad))
    os.chdir(tmp_path)
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert message in lines[-1] and lines[-1].startswith("halyard ")
    assert not any("Traceback" in line for line in lines)


def test_as_a_user_runs_it(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "halyard.cli", "trace", "stats",
                           str(BUNDLED / "gavel_philly_vc2869ce_seed0.trace")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "format gavel (detected: 7 tab-separated fields" in proc.stderr
    assert "jobs           533" in proc.stdout
