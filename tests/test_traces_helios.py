"""Helios cluster_log.csv (shared/traces/README.md §3).

No Helios job rows were obtained; these rows are hand-written in the format the
HeliosData README documents.
"""

from __future__ import annotations

import pytest
from trace_samples import write

from halyard.datamodel import ValidationError
from halyard.traces import helios, read_helios, read_trace

HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"
ROWS = [
    "4023,uA1b,vcEwI,8,48,1,COMPLETED,2020-04-01 00:10:00,2020-04-01 00:12:00,2020-04-01 02:12:00,7200,120",
    "4024,uC2d,vcWoR,0,4,1,COMPLETED,2020-04-01 00:11:00,2020-04-01 00:11:05,2020-04-01 00:21:05,600,5",
    "4025,uA1b,vcEwI,1,6,1,CANCELLED,2020-04-01 00:12:00,,,0,0",
    "4026,uE3f,vcHvQ,16,96,2,FAILED,2020-04-01 00:05:00,2020-04-01 00:05:30,2020-04-01 00:15:30,600,30",
    "4027,uE3f,vcHvQ,2,12,1,TIMEOUT,2020-04-02 00:05:00,2020-04-02 00:06:00,2020-04-02 00:36:00,1800,60",
]


def test_documented_rows(tmp_path) -> None:
    load = read_trace(write(tmp_path, "cluster_log.csv", [HEADER, *ROWS]))
    assert load.format == "helios" and load.errors == ()
    assert load.dropped == {helios.DROP_CPU_ONLY: 1, helios.DROP_NEVER_RAN: 1}
    assert [(j.job_id, j.submit_time, j.num_gpus, j.duration_s, j.tenant, j.user) for j in load.jobs] == [
        ("4026", 0.0, 16, 600.0, "vcHvQ", "uE3f"),
        ("4023", 300.0, 8, 7200.0, "vcEwI", "uA1b"),
        ("4027", 86400.0, 2, 1800.0, "vcHvQ", "uE3f"),
    ]
    first = load.jobs[0]
    assert first.extra["state"] == "FAILED" and first.extra["source_submit_time"] == "2020-04-01 00:05:00"
    assert first.extra["node_num"] == "2" and first.extra["queue"] == "30"
    assert "job_id" not in first.extra and "user" not in first.extra
    assert first.iterations == 0 and first.model


def test_malformed_rows(tmp_path) -> None:
    p = write(tmp_path, "cluster_log.csv", [
        HEADER,
        "1,u1,vc1,1,4,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:10:00,600,0",  # fine
        "2,u1,vc1,x,4,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:10:00,600,0",
        "3,u1,vc1,1,4,1,COMPLETED,2020/04/01 00:00,2020-04-01 00:00:00,2020-04-01 00:10:00,600,0",
        "4,u1,vc1,1,4,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:10:00,-1,0",
        "5,u1,vc1,-2,4,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:10:00,600,0",
        "6,u1,vc1,1,4,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,later,600,0",
        "7,u1,,1,4,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:10:00,600,0",
        "1,u1,vc1,1,4,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:10:00,600,0",
        "8,u1,vc1,1,4,1,COMPLETED,2020-04-01 00:00:00+08:00,2020-04-01 00:00:00,2020-04-01 00:10:00,600,0",
    ])
    load = read_helios(p)
    assert [(e.line, e.field) for e in load.errors] == [
        (3, "gpu_num"), (4, "submit_time"), (5, "duration"), (6, "gpu_num"), (7, "end_time"), (8, "vc"),
        (9, "job_id"), (10, "submit_time")]
    assert [j.job_id for j in load.jobs] == ["1"]
    with pytest.raises(ValidationError) as info:
        read_helios(p, strict=True)
    assert (info.value.line, info.value.field) == (3, "gpu_num")
