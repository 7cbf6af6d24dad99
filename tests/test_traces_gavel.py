"""Gavel 7-field .trace files (shared/traces/README.md §4b)."""

from __future__ import annotations

from collections import Counter

import pytest
from trace_samples import BUNDLED, write

from halyard.datamodel import ValidationError
from halyard.traces import read_gavel, read_trace
from halyard.traces.gavel import parse_job_type

SAMPLE = BUNDLED / "gavel_philly_vc2869ce_seed0.trace"
CMD1 = "cd %s/w && python3 train.py --data_dir %s/data"
CMD0 = "cd %s/w && python3 main.py"


@pytest.fixture(scope="module")
def sample():
    return read_trace(SAMPLE)


def test_sample_as_documented(sample) -> None:
    assert sample.format == "gavel" and sample.errors == () and len(sample.jobs) == 533
    assert Counter(j.num_gpus for j in sample.jobs) == {8: 379, 32: 70, 1: 65, 4: 11, 2: 6, 16: 2}
    steps = [j.iterations for j in sample.jobs]
    assert min(steps) == 617 and max(steps) == 55_459_546
    assert all(j.duration_s is None and j.batch_size == 0 for j in sample.jobs)
    times = [j.submit_time for j in sample.jobs]
    assert times == sorted(times) and times[0] == 0.0 and times[-1] == 8_141_054.0
    assert len(Counter(j.extra["job_type"] for j in sample.jobs)) == 26


def test_first_row(sample) -> None:
    first = sample.jobs[0]
    assert first.job_id == "gavel-1"
    assert (first.model, first.num_gpus, first.iterations) == ("transformer-xl", 4, 5_352_613)
    assert first.extra["job_type"] == "Transformer (batch size 128)"
    assert first.extra["job_type_batch_size"] == "128"
    assert first.extra["num_steps_arg"] == "-step" and first.extra["arrival_time"] == "0.000000"
    a3c = next(j for j in sample.jobs if j.extra["job_type"] == "A3C")
    assert a3c.model == "m5" and "job_type_batch_size" not in a3c.extra


def test_models_by_job_type(sample) -> None:
    by_type = {j.extra["job_type"].split(" (")[0]: j.model for j in sample.jobs}
    assert by_type == {"ResNet-50": "resnet50", "ResNet-18": "resnet18", "Transformer": "transformer-xl",
                       "LM": "lstm", "Recommendation": "resnet50", "CycleGAN": "resnet50", "A3C": "m5"}


def test_parse_job_type() -> None:
    assert parse_job_type("ResNet-50 (batch size 32)") == ("ResNet-50", "32")
    assert parse_job_type("CycleGAN") == ("CycleGAN", None)


def test_malformed_rows(tmp_path) -> None:
    def row(*fields: str) -> str:
        return "\t".join(fields)

    p = write(tmp_path, "t.trace", [
        row("LM (batch size 20)", CMD1, "--steps", "1", "1000", "10.5", "2"),      # 1: fine (gavel-1)
        row("LM (batch size 20)", CMD1, "--steps", "1", "1000", "10.5"),           # 2: 6 fields
        row("Magic (batch size 2)", CMD1, "--steps", "1", "1000", "1", "1"),       # 3: unknown type
        row("A3C", CMD1, "--steps", "0", "1000", "1", "1"),                         # 4: two %s, needs_data_dir 0
        row("A3C", CMD0, "--steps", "2", "1000", "1", "1"),                         # 5: needs_data_dir 2
        row("A3C", CMD0, "--steps", "0", "0", "1", "1"),                            # 6: zero steps
        "",                                                                          # 7: blank, not numbered
        row("A3C", CMD0, "--steps", "0", "10", "soon", "1"),                        # 8: arrival
        row("A3C", CMD0, "--steps", "0", "10", "1", "0"),                           # 9: zero GPUs
        row("CycleGAN", CMD0, "-n", "0", "50", "3.25", "1"),                        # 10: fine (gavel-9)
    ])
    load = read_gavel(p)
    assert [(e.line, e.field) for e in load.errors] == [
        (2, None), (3, "job_type"), (4, "command"), (5, "needs_data_dir"), (6, "total_steps"),
        (8, "arrival_time"), (9, "scale_factor")]
    assert [(j.job_id, j.submit_time, j.model) for j in load.jobs] == [
        ("gavel-9", 0.0, "resnet50"), ("gavel-1", 7.25, "lstm")]
    with pytest.raises(ValidationError) as info:
        read_gavel(p, strict=True)
    assert info.value.line == 2 and "7 tab-separated fields" in str(info.value)
