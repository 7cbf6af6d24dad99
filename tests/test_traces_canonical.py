"""Canonical trace schema: CSV/JSONL round trips, format detection, row validation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from halyard.datamodel import JobSpec, Parallelism, ValidationError
from halyard.traces import CANONICAL_COLUMNS, TraceLoad, read_trace, write_trace

# The hand-written rows below give the first 14 columns (a header may leave optional ones out).
HEADER = ",".join(c for c in CANONICAL_COLUMNS if c != "logical_workers")


def job(job_id: str = "j1", submit_time: float = 0.0, **kw) -> JobSpec:
    kw.setdefault("model", "resnet50")
    kw.setdefault("num_gpus", 1)
    kw.setdefault("duration_s", 60.0)
    return JobSpec(job_id=job_id, submit_time=submit_time, **kw)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_canonical_columns_order_and_required() -> None:
    assert CANONICAL_COLUMNS == (
        "job_id", "submit_time", "model", "num_gpus", "iterations", "duration_s", "batch_size",
        "tenant", "user", "gpu_type", "min_gpus", "max_gpus", "priority", "deadline", "logical_workers",
    )


# ----------------------------------------------------------------- round trips

_text = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12)
_ident = _text.filter(lambda s: s.strip() != "")
_time = st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)
_extra_key = _text.filter(lambda k: k not in CANONICAL_COLUMNS)


@st.composite
def jobspecs(draw: st.DrawFn, job_id: str) -> JobSpec:
    num_gpus = draw(st.integers(1, 512))
    submit = draw(_time)
    iterations = draw(st.integers(0, 10**12))
    duration = draw(st.one_of(
        st.none(), st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)))
    if iterations == 0 and duration is None:
        iterations = 1
    deadline = draw(st.one_of(st.none(), _time.map(lambda d: submit + d)))
    return JobSpec(
        job_id=job_id,
        submit_time=submit,
        model=draw(_ident),
        num_gpus=num_gpus,
        iterations=iterations,
        duration_s=duration,
        batch_size=draw(st.integers(0, 10**6)),
        tenant=draw(_text),
        user=draw(st.one_of(st.just(""), _text)),
        gpu_type=draw(st.one_of(st.none(), _text)),
        min_gpus=draw(st.one_of(st.none(), st.integers(1, num_gpus))),
        max_gpus=draw(st.one_of(st.none(), st.integers(num_gpus, 4096))),
        priority=draw(st.integers(-1000, 1000)),
        deadline=deadline if deadline is None or math.isfinite(deadline) else None,
        extra=draw(st.dictionaries(_extra_key, _text, max_size=3)),
    )


@st.composite
def traces(draw: st.DrawFn) -> list[JobSpec]:
    ids = draw(st.lists(_ident, min_size=0, max_size=8, unique=True))
    return [draw(jobspecs(i)) for i in ids]


def sorted_by_time(jobs: list[JobSpec]) -> list[JobSpec]:
    return sorted(jobs, key=lambda j: j.submit_time)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=traces())
def test_round_trip_property(tmp_path: Path, suffix: str, jobs: list[JobSpec]) -> None:
    path = tmp_path / f"t{suffix}"
    write_trace(jobs, path)
    load = read_trace(path, strict=True)
    assert load.errors == ()
    assert load.format == suffix[1:]
    assert list(load.jobs) == sorted_by_time(jobs)
    for a, b in zip(load.jobs, sorted_by_time(jobs), strict=True):
        # bit-exact floats, not merely ==
        assert a.submit_time.hex() == float(b.submit_time).hex()
        assert dict(a.extra) == dict(b.extra)


def test_round_trip_examples_keep_types(tmp_path: Path) -> None:
    jobs = [
        job("a", 0.1 + 0.2, duration_s=1 / 3, tenant="vc1", extra={"timestamp": "2017-10-09 07:01:55"}),
        job("b", 5.0, iterations=1000, duration_s=None, gpu_type="V100", min_gpus=1, max_gpus=8,
            priority=-3, deadline=7200.5, user="alice", batch_size=256),
    ]
    for suffix in (".csv", ".jsonl"):
        path = tmp_path / f"x{suffix}"
        write_trace(jobs, path)
        back = read_trace(path, strict=True).jobs
        assert list(back) == jobs
        assert type(back[0].submit_time) is float and back[0].submit_time == 0.1 + 0.2
        assert type(back[1].iterations) is int and back[1].duration_s is None
        assert back[0].extra == {"timestamp": "2017-10-09 07:01:55"}


def test_jobs_sorted_by_submit_time_then_file_order(tmp_path: Path) -> None:
    p = write(tmp_path, "t.csv", f"{HEADER}\n"
              "c,10,m,1,0,5,,,,,,,,\n"
              "a,5,m,1,0,5,,,,,,,,\n"
              "b,10,m,1,0,5,,,,,,,,\n"
              "d,5,m,1,0,5,,,,,,,,\n")
    load = read_trace(p)
    assert [j.job_id for j in load.jobs] == ["a", "d", "c", "b"]


def test_csv_defaults_and_unknown_columns_kept_in_extra(tmp_path: Path) -> None:
    p = write(tmp_path, "t.csv", "job_id,submit_time,model,num_gpus,duration_s,vc,note\n"
                                 "j,1.5,gnmt,2,30,abc,\n")
    (j,) = read_trace(p, strict=True).jobs
    assert j == JobSpec(job_id="j", submit_time=1.5, model="gnmt", num_gpus=2, duration_s=30.0,
                        extra={"vc": "abc"})  # empty cell: key absent
    assert j.tenant == "default" and j.iterations == 0 and j.gpu_type is None


def test_jsonl_unknown_keys_kept_as_text(tmp_path: Path) -> None:
    p = write(tmp_path, "t.jsonl", json.dumps({
        "job_id": "j", "submit_time": 0, "model": "m5", "num_gpus": 1, "iterations": 10,
        "gpu_type": None, "vc": "abc", "attempts": [1, 2]}) + "\n")
    (j,) = read_trace(p, strict=True).jobs
    assert j.extra == {"vc": "abc", "attempts": "[1, 2]"}
    assert j.gpu_type is None and j.submit_time == 0.0


# ------------------------------------------------------------- malformed rows

BAD_CSV = (
    f"{HEADER}\n"                                    # line 1
    "ok,0,resnet50,1,0,60,,,,,,,,\n"                 # line 2: fine
    "badint,1,resnet50,x,0,60,,,,,,,,\n"             # line 3: num_gpus not an integer
    "neg,2,resnet50,-2,0,60,,,,,,,,\n"               # line 4: negative num_gpus
    "\n"                                             # line 5: blank, skipped silently
    "nowork,3,resnet50,1,0,,,,,,,,,\n"               # line 6: no iterations, no duration
    "ok,4,resnet50,1,0,60,,,,,,,,\n"                 # line 7: duplicate of line 2
    "nomodel,5,,1,0,60,,,,,,,,\n"                    # line 8: required cell empty
    "short,6,resnet50,1\n"                           # line 9: too few cells
    "badfloat,1e,resnet50,1,0,60,,,,,,,,\n"          # line 10: submit_time not a number
    "late,7,resnet50,1,0,60,,,,,,,,\n"               # line 11: fine
)
BAD_CSV_EXPECTED = [
    (3, "num_gpus", "must be an integer, got 'x'"),
    (4, "num_gpus", "must be >= 1, got -2"),
    (6, "iterations", "give iterations > 0 or a positive duration_s"),
    (7, "job_id", "duplicate job_id 'ok': also on line 2"),
    (8, "model", "required"),
    (9, None, "expected 14 cells"),
    (10, "submit_time", "must be a number, got '1e'"),
]


def test_bad_csv_rows_are_skipped_and_located(tmp_path: Path) -> None:
    p = write(tmp_path, "bad.csv", BAD_CSV)
    load = read_trace(p)
    assert isinstance(load, TraceLoad)
    assert [j.job_id for j in load.jobs] == ["ok", "late"]
    assert load.jobs[0].submit_time == 0.0  # the first "ok" is kept, the duplicate skipped
    assert load.skipped == len(BAD_CSV_EXPECTED)
    got = [(e.line, e.field) for e in load.errors]
    assert got == [(line, field) for line, field, _ in BAD_CSV_EXPECTED]
    for err, (line, field, text) in zip(load.errors, BAD_CSV_EXPECTED, strict=True):
        assert err.source == str(p)
        assert text in err.message
        assert str(err).startswith(f"{p}:{line}")
        if field:
            assert f"field '{field}'" in str(err)


def test_strict_raises_first_bad_row(tmp_path: Path) -> None:
    p = write(tmp_path, "bad.csv", BAD_CSV)
    with pytest.raises(ValidationError) as info:
        read_trace(p, strict=True)
    assert (info.value.source, info.value.line, info.value.field) == (str(p), 3, "num_gpus")


def test_strict_duplicate_names_both_lines(tmp_path: Path) -> None:
    rows = ["a,0,m,1,0,5,,,,,,,,", "b,0,m,1,0,5,,,,,,,,", "a,1,m,1,0,5,,,,,,,,"]
    p = write(tmp_path, "dup.csv", "\n".join([HEADER, *rows]) + "\n")
    with pytest.raises(ValidationError, match="also on line 2") as info:
        read_trace(p, strict=True)
    assert info.value.line == 4 and info.value.field == "job_id"


def test_line_numbers_are_physical_with_multiline_cells(tmp_path: Path) -> None:
    p = write(tmp_path, "t.csv", f"{HEADER}\n"
              '"multi\nline id",0,m,1,0,5,,,,,,,,\n'   # lines 2-3
              "\n"                                    # line 4
              "bad,0,m,0,0,5,,,,,,,,\n")              # line 5
    load = read_trace(p)
    assert [j.job_id for j in load.jobs] == ["multi\nline id"]
    assert [(e.line, e.field) for e in load.errors] == [(5, "num_gpus")]


def test_missing_required_column_in_header_always_raises(tmp_path: Path) -> None:
    p = write(tmp_path, "t.csv", "job_id,submit_time,num_gpus,duration_s\nj,0,1,5\n")
    with pytest.raises(ValidationError) as info:
        read_trace(p)  # not strict: a file-level problem still raises
    assert (info.value.source, info.value.line, info.value.field) == (str(p), 1, "model")


def test_header_without_work_column_raises(tmp_path: Path) -> None:
    p = write(tmp_path, "t.csv", "job_id,submit_time,model,num_gpus\nj,0,m,1\n")
    with pytest.raises(ValidationError, match="iterations or a duration_s"):
        read_trace(p)


def test_unknown_header_lists_accepted_formats(tmp_path: Path) -> None:
    p = write(tmp_path, "t.csv", "id,time,gpus\n1,2,3\n")
    with pytest.raises(ValidationError) as info:
        read_trace(p)
    msg = str(info.value)
    assert str(p) in msg and info.value.line == 1
    for fmt in ("csv", "jsonl", "philly-pollux", "timestamp,duration,num_gpus,gpu_time,cluster"):
        assert fmt in msg


def test_unknown_suffix_and_missing_file(tmp_path: Path) -> None:
    p = write(tmp_path, "t.parquet", "x")
    with pytest.raises(ValidationError, match="accepted formats"):
        read_trace(p)
    with pytest.raises(ValidationError, match="no such trace file"):
        read_trace(tmp_path / "absent.csv")


def test_bad_jsonl_rows(tmp_path: Path) -> None:
    good = {"job_id": "a", "submit_time": 1.0, "model": "m", "num_gpus": 1, "duration_s": 5}
    lines = [
        json.dumps(good),                                 # 1
        "{not json",                                      # 2
        "[1, 2]",                                         # 3
        json.dumps(good | {"job_id": "s", "num_gpus": "4"}),  # 4: string, not integer
        json.dumps(good | {"job_id": "t", "num_gpus": True}),  # 5: bool is not an integer
        json.dumps({k: v for k, v in good.items() if k != "model"} | {"job_id": "u"}),  # 6
        "",                                               # 7: blank
        json.dumps(good | {"job_id": "v", "num_gpus": -1}),  # 8
        json.dumps(good),                                 # 9: duplicate of line 1
        json.dumps(good | {"job_id": "w", "duration_s": None}),  # 10: no work
        json.dumps(good | {"job_id": "x", "submit_time": "soon"}),  # 11
        '{"job_id": "y", "submit_time": NaN, "model": "m", "num_gpus": 1, "duration_s": 5}',  # 12
    ]
    p = write(tmp_path, "t.jsonl", "\n".join(lines) + "\n")
    load = read_trace(p)
    assert [j.job_id for j in load.jobs] == ["a"]
    assert [(e.line, e.field) for e in load.errors] == [
        (2, None), (3, None), (4, "num_gpus"), (5, "num_gpus"), (6, "model"), (8, "num_gpus"),
        (9, "job_id"), (10, "iterations"), (11, "submit_time"), (12, "submit_time"),
    ]
    assert "must be an integer, got \"4\"" in load.errors[2].message
    assert all(e.source == str(p) for e in load.errors)
    with pytest.raises(ValidationError) as info:
        read_trace(p, strict=True)
    assert info.value.line == 2


# --------------------------------------------------------------------- writing


@pytest.mark.parametrize("field,value", [
    ("parallelism", Parallelism(data=2)),
    ("command", ("python", "train.py")),
    ("env", {"A": "1"}),
])
def test_write_refuses_unrepresentable_fields(tmp_path: Path, field: str, value: object) -> None:
    j = job("p", num_gpus=2, **{field: value})
    path = tmp_path / "t.csv"
    with pytest.raises(ValidationError) as info:
        write_trace([job("ok"), j], path)
    assert info.value.field == field
    assert not path.exists()  # nothing half-written


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_elastic_jobs_with_logical_workers_round_trip(tmp_path: Path, suffix: str) -> None:
    """EasyScale jobs (maxP logical workers over 1..maxP GPUs) survive a write and a read."""
    jobs = [job("e", num_gpus=4, min_gpus=1, max_gpus=4, logical_workers=4), job("plain")]
    write_trace(jobs, tmp_path / f"t{suffix}")
    assert list(read_trace(tmp_path / f"t{suffix}").jobs) == jobs


def test_write_refuses_what_csv_would_read_back_differently(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as info:
        write_trace([job(tenant="")], tmp_path / "t.csv")
    assert info.value.field == "tenant"
    write_trace([job(tenant="")], tmp_path / "t.jsonl")  # JSONL can say "" and null apart
    assert read_trace(tmp_path / "t.jsonl").jobs[0].tenant == ""
    with pytest.raises(ValidationError, match="clashes"):
        write_trace([job(extra={"model": "x"})], tmp_path / "t.jsonl")
    with pytest.raises(ValidationError, match="cannot write"):
        write_trace([job()], tmp_path / "t.txt")


def test_written_csv_uses_canonical_header_then_extra(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_trace([job("a", extra={"vc": "x"}), job("b", extra={"site": "y"})], path)
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(CANONICAL_COLUMNS) + ",vc,site"
    assert lines[1].startswith("a,0.0,resnet50,1,0,60.0,")
    assert read_trace(path).jobs[1].extra == {"site": "y"}


def test_non_utf8_file_is_a_validation_error(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_bytes(HEADER.encode() + b"\nj\xff,0,m,1,0,5,,,,,,,,\n")
    with pytest.raises(ValidationError, match="not UTF-8") as info:
        read_trace(p)
    assert info.value.source == str(p)
