"""Alibaba PAI v2020 job + task tables (shared/traces/README.md §2a).

No job or task rows were obtained, so these rows are hand-written in the
documented form: headerless CSV, the columns of the upstream .header files,
times as integer-valued float seconds on the shifted clock, plan_gpu in percent
of a GPU, inst_num as pandas writes it (a float).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from trace_samples import SHARED, write

from halyard.datamodel import ValidationError
from halyard.traces import detect_format, pai, read_pai, read_trace
from halyard.traces.pai import PAI_JOB_COLUMNS, PAI_TASK_COLUMNS, shanghai_time

JOBS = [
    "j1,i1,u1,Terminated,1000.0,5000.0",   # 1: worker 1 x 50 % GPU -> 1 GPU
    "j2,i2,u2,Failed,1100.0,9000.0",       # 2: ps (no GPU) + 4 workers x 100 % + evaluator 50 % -> 4.5 -> 5
    "j3,i3,u1,Running,1200.0,",            # 3: running: dropped
    "j4,i4,u3,Terminated,1300.0,2000.0",   # 4: CPU job: dropped
    "j5,i5,u3,Terminated,900.0,8000.0",    # 5: 800 % on one instance -> 8 GPUs, earliest
    "j6,i6,u4,Terminated,1500.0,1600.0",   # 6: no task rows: dropped
    "j7,i7,u4,Terminated,0.0,1600.0",      # 7: start 0 = missing: dropped
]
TASKS = [
    "j1,worker,1.0,Terminated,1060.0,4000.0,600.0,29.296875,50.0,MISC",
    "j2,ps,1.0,Terminated,1200.0,8000.0,800.0,30.0,,",
    "j2,worker,4.0,Failed,1150.0,8500.0,600.0,30.0,100.0,V100",
    "j2,evaluator,1.0,Terminated,1300.0,8400.0,400.0,10.0,50.0,V100M32",
    "j3,worker,1.0,Running,1250.0,,600.0,29.0,100.0,T4",
    "j4,tensorflow,2.0,Terminated,1310.0,1900.0,1200.0,40.0,0.0,",
    "j5,worker,1.0,Terminated,1000.0,7900.0,6400.0,400.0,800.0,V100M32",
    "j7,worker,1.0,Terminated,1000.0,1500.0,600.0,29.0,100.0,P100",
    "jx,worker,1.0,Terminated,1000.0,1500.0,600.0,29.0,100.0,P100",  # no job row: dropped
]


def tables(tmp_path: Path, jobs: list[str], tasks: list[str]) -> Path:
    write(tmp_path, "pai_task_table.csv", tasks)
    return write(tmp_path, "pai_job_table.csv", jobs)


def test_documented_columns_match_upstream_headers() -> None:
    for name, columns in (("job", PAI_JOB_COLUMNS), ("task", PAI_TASK_COLUMNS)):
        header = SHARED / f"pai_v2020_{name}_table.header"
        if header.exists():
            assert tuple(header.read_text().strip().split(",")) == columns


def test_jobs_from_both_tables(tmp_path) -> None:
    job_table = tables(tmp_path, JOBS, TASKS)
    load = read_trace(job_table)
    assert load.format == "pai-v2020" and load.errors == ()
    assert load.dropped == {pai.DROP_UNFINISHED: 2, pai.DROP_CPU_ONLY: 1, pai.DROP_NO_TASKS: 1,
                            pai.DROP_ORPHAN_TASKS: 1}
    by_id = {j.job_id: j for j in load.jobs}
    assert [j.job_id for j in load.jobs] == ["j5", "j1", "j2"]  # by submission (job start_time)
    j1, j2, j5 = by_id["j1"], by_id["j2"], by_id["j5"]
    assert (j5.submit_time, j1.submit_time, j2.submit_time) == (0.0, 100.0, 200.0)
    # Fractional GPUs round up; the exact demand stays in extra.
    assert (j1.num_gpus, j1.extra["gpu_fraction"]) == (1, "0.5")
    assert (j2.num_gpus, j2.extra["gpu_fraction"], j2.extra["plan_gpu_total"]) == (5, "4.5", "450.0")
    assert j5.num_gpus == 8
    # Run time: earliest task start to latest task end.
    assert (j1.duration_s, j2.duration_s, j5.duration_s) == (2940.0, 7350.0, 6900.0)
    assert j2.user == "u2" and j2.tenant == "default" and j2.gpu_type is None
    assert j2.extra["source_gpu_type"] == "V100|V100M32" and j2.extra["tasks"] == "3"
    assert j2.extra["status"] == "Failed" and j2.extra["inst_id"] == "i2"
    # Asia/Shanghai wall clock of the shifted epoch: 1100 s after 1970-01-01 08:00 local.
    assert j2.extra["submit_local"] == "1970-01-01 08:18:20+08:00" == shanghai_time(1100.0)
    # Either table may be given.
    assert read_trace(tmp_path / "pai_task_table.csv").jobs == load.jobs


def test_detected_by_content_too(tmp_path) -> None:
    p = write(tmp_path, "jobs_job_table_part1.csv", JOBS)
    write(tmp_path, "jobs_task_table_part1.csv", TASKS)
    assert detect_format(p).name == "pai-v2020"
    assert [j.job_id for j in read_trace(p).jobs] == ["j5", "j1", "j2"]
    # The upstream column-name files are not tables.
    header = write(tmp_path, "pai_job_table.header", [",".join(PAI_JOB_COLUMNS)])
    with pytest.raises(ValidationError, match="unrecognised trace format"):
        detect_format(header)


def test_malformed_rows(tmp_path) -> None:
    jobs = [
        "j1,i1,u1,Terminated,1000.0,5000.0",   # 1
        "j2,i2,u2,Done,1000.0,5000.0",         # 2: unknown status
        "j3,i3,u2,Terminated,soon,5000.0",     # 3: time
        "j1,i9,u1,Terminated,1000.0,5000.0",   # 4: duplicate job_name
        "j4,i4,u4,Terminated,1000.0",          # 5: a cell short
        "j5,i5,u5,Terminated,1000.0,5000.0",   # 6: its task row is bad -> job removed
        "j6,i6,u6,Terminated,1000.0,5000.0",   # 7
    ]
    tasks = [
        "j1,worker,1.0,Terminated,1000.0,4000.0,600.0,29.0,100.0,P100",   # 1
        "j5,worker,1.5,Terminated,1000.0,4000.0,600.0,29.0,100.0,P100",   # 2: inst_num not whole
        "j6,worker,1.0,Terminated,1000.0,4000.0,600.0,29.0,-100.0,P100",  # 3: negative plan_gpu
        "j6,ps,1.0,Terminated,1000.0,4000.0,600.0,29.0,,",                # 4
    ]
    job_table = tables(tmp_path, jobs, tasks)
    load = read_pai(job_table)
    located = [(Path(e.source).name, e.line, e.field) for e in load.errors]
    assert located == [
        ("pai_job_table.csv", 2, "status"), ("pai_job_table.csv", 3, "start_time"),
        ("pai_job_table.csv", 4, "job_name"), ("pai_job_table.csv", 5, None),
        ("pai_task_table.csv", 2, "inst_num"), ("pai_task_table.csv", 3, "plan_gpu")]
    assert [j.job_id for j in load.jobs] == ["j1"]
    with pytest.raises(ValidationError) as info:
        read_pai(job_table, strict=True)
    assert (Path(info.value.source).name, info.value.line) == ("pai_job_table.csv", 2)


def test_missing_partner_table_is_an_error_of_the_file(tmp_path) -> None:
    p = write(tmp_path, "pai_job_table.csv", JOBS)
    with pytest.raises(ValidationError, match="task table is missing"):
        read_pai(p)
    q = write(tmp_path, "jobs.csv", JOBS)
    with pytest.raises(ValidationError, match="side by side"):
        read_pai(q)
