"""Reader for the processed Philly file (shared/traces/README.md §1c)."""

from __future__ import annotations

from collections import Counter
from importlib import resources
from pathlib import Path

import pytest

from halyard.datamodel import ValidationError
from halyard.traces import (
    SYNERGY_IMAGE_MODELS,
    SYNERGY_LANGUAGE_MODELS,
    SYNERGY_SPEECH_MODELS,
    read_philly,
    read_trace,
)
from halyard.traces.philly import assign_models

# The sample ships with the package; the full file is in the workspace's shared/ folder.
SAMPLE = Path(str(resources.files("halyard.data") / "traces" / "philly_sample.csv"))
FULL = Path(__file__).resolve().parents[2] / "shared" / "traces" / "philly_pollux_jobs_full.csv"
HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"
ALL_MODELS = set(SYNERGY_IMAGE_MODELS + SYNERGY_LANGUAGE_MODELS + SYNERGY_SPEECH_MODELS)

needs_full = pytest.mark.skipif(not FULL.exists(), reason="shared Philly file not present")


def write(tmp_path: Path, rows: list[str], name: str = "p.csv") -> Path:
    p = tmp_path / name
    p.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def sample():
    return read_philly(SAMPLE)


def test_sample_counts_and_order(sample) -> None:
    assert sample.format == "philly-pollux" and sample.source == str(SAMPLE)
    assert sample.errors == ()
    assert len(sample.jobs) == 2000
    times = [j.submit_time for j in sample.jobs]
    assert times == sorted(times)
    assert times[0] == 0.0
    # 2017-09-07 09:57:50 .. 2017-10-09 07:01:55 (traces README §1c)
    assert times[-1] == 2_754_245.0
    assert {j.job_id for j in sample.jobs} == {f"philly-{n}" for n in range(1, 2001)}


def test_sample_histograms_as_documented(sample) -> None:
    assert Counter(j.num_gpus for j in sample.jobs) == {1: 1901, 2: 49, 4: 20, 8: 30}
    assert Counter(j.tenant for j in sample.jobs)["6214e9"] == 1648
    durations = [j.duration_s for j in sample.jobs]
    assert min(durations) == 7.0 and max(durations) == 2_643_038.0
    assert sum(d < 60 for d in durations) == 53


def test_sample_row_54_is_readme_job_14199(sample) -> None:
    job = {j.job_id: j for j in sample.jobs}["philly-54"]
    assert job.duration_s == 193_256.0 and job.num_gpus == 8 and job.iterations == 0
    assert job.tenant == "ee9e8c"
    assert job.extra == {"timestamp": "2017-10-07 01:11:39", "cluster": "ee9e8c", "gpu_time": "1546048.0"}


def test_read_trace_detects_philly(sample) -> None:
    load = read_trace(SAMPLE)
    assert load.format == "philly-pollux"
    assert load.jobs == sample.jobs
    assert read_trace(SAMPLE, seed=3).jobs == read_philly(SAMPLE, seed=3).jobs != sample.jobs


def test_models_seeded_and_from_synergy_table(sample) -> None:
    models = [j.model for j in sample.jobs]
    assert set(models) <= ALL_MODELS
    share = Counter(models)
    language = sum(share[m] for m in SYNERGY_LANGUAGE_MODELS) / len(models)
    assert abs(language - 0.70) < 0.05  # default split (20, 70, 10)
    other = read_philly(SAMPLE, seed=1)
    assert [j.job_id for j in other.jobs] == [j.job_id for j in sample.jobs]
    assert [j.model for j in other.jobs] != models
    only_speech = read_philly(SAMPLE, split=(0, 0, 100))
    assert {j.model for j in only_speech.jobs} == set(SYNERGY_SPEECH_MODELS)


def test_model_of_a_row_depends_only_on_seed_and_row_number() -> None:
    rows = [5, 1, 3, 1000, 2]
    together = assign_models(rows, seed=9)
    assert together == [assign_models([r], seed=9)[0] for r in rows]
    assert assign_models(rows[::-1], seed=9) == together[::-1]
    with pytest.raises(ValidationError):
        assign_models([1], seed=-1)


@needs_full
def test_full_file(sample) -> None:
    full = read_trace(FULL)  # ends with an empty line: skipped silently
    assert full.errors == () and len(full.jobs) == 82_247
    assert len({j.tenant for j in full.jobs}) == 15
    assert {j.num_gpus for j in full.jobs} == {1, 2, 4, 8, 12, 16, 24, 32, 64, 128}
    assert min(j.duration_s for j in full.jobs) == 1.0
    times = [j.submit_time for j in full.jobs]
    assert times == sorted(times) and times[0] == 0.0
    # The sample is the first 2,000 rows: same ids, same models, same raw fields
    # (submit times differ only by the earlier start of the full file).
    by_id = {j.job_id: j for j in full.jobs}
    for j in sample.jobs:
        f = by_id[j.job_id]
        assert (f.model, f.num_gpus, f.duration_s, f.extra) == (j.model, j.num_gpus, j.duration_s, j.extra)


def test_malformed_rows(tmp_path: Path) -> None:
    p = write(tmp_path, [
        "2017-10-09 07:01:55,66.0,1,66.0,aa",        # line 2, row 1: fine
        "2017-10-09 07:01:55,0.0,1,0.0,aa",          # line 3: zero duration
        "2017-10-09 07:01:55,-5,1,-5,aa",            # line 4: negative duration
        "",                                          # line 5: blank
        "2017-10-09 07:01:55,10.0,1.5,15.0,aa",      # line 6: non-integer GPUs
        "2017-10-09 07:01:55,10.0,x,10.0,aa",        # line 7
        "2017-10-09T07:01:55,10.0,1,10.0,aa",        # line 8: wrong timestamp form
        "2017-13-09 07:01:55,10.0,1,10.0,aa",        # line 9: no month 13
        "2017-10-09 07:01:55,10.0,1,10.0",           # line 10: missing cell
        "2017-10-09 07:01:55,ten,1,10.0,aa",         # line 11
        "2017-10-09 07:01:55,10.0,0,0.0,aa",         # line 12: zero GPUs
        "2017-10-09 07:01:55,10.0,1,10.0,",          # line 13: no cluster
        "2017-10-09 06:00:00,20.0,2,40.0,bb",        # line 14, row 12: fine
        "",                                          # line 15
    ])
    load = read_philly(p)
    assert [(e.line, e.field) for e in load.errors] == [
        (3, "duration"), (4, "duration"), (6, "num_gpus"), (7, "num_gpus"), (8, "timestamp"),
        (9, "timestamp"), (10, None), (11, "duration"), (12, "num_gpus"), (13, "cluster"),
    ]
    assert all(e.source == str(p) for e in load.errors)
    assert "must be an integer, got '1.5'" in str(load.errors[2])
    # Bad rows are counted in the row number; blank lines are not.
    assert [(j.job_id, j.submit_time) for j in load.jobs] == [("philly-12", 0.0), ("philly-1", 3715.0)]
    with pytest.raises(ValidationError) as info:
        read_philly(p, strict=True)
    assert (info.value.line, info.value.field) == (3, "duration")


def test_naive_timestamps_ignore_dst(tmp_path: Path) -> None:
    # US-Pacific fell back at 02:00 on 2017-11-05; the reader does no zone arithmetic.
    p = write(tmp_path, ["2017-11-05 03:00:00,1,1,1,aa", "2017-11-05 00:00:00,1,1,1,aa"])
    assert [j.submit_time for j in read_philly(p).jobs] == [0.0, 10_800.0]


def test_wrong_header_raises(tmp_path: Path) -> None:
    p = tmp_path / "p.csv"
    p.write_text("timestamp,duration,num_gpus,cluster\n2017-10-09 07:01:55,1,1,aa\n")
    with pytest.raises(ValidationError) as info:
        read_philly(p)
    assert info.value.line == 1 and info.value.source == str(p)
