"""Format registry: detection by header/content, forced formats, file-level errors."""

from __future__ import annotations

import pytest
from trace_samples import BUNDLED, SHARED, write

from halyard.datamodel import ValidationError
from halyard.emulator import PerformanceModel
from halyard.traces import ACCEPTED_FORMATS, FORMAT_NAMES, detect_format, read_trace
from halyard.traces.models import MODEL_TABLES

BUNDLED_SAMPLES = {
    "default.csv": "csv",
    "philly_sample.csv": "philly-pollux",
    "philly_cluster_job_log_readme_examples.json": "philly-raw",
    "elasticflow_itp_raw_cluster01.csv": "itp-raw",
    "elasticflow_itp_annotated_195job.csv": "itp-annotated",
    "gavel_philly_vc2869ce_seed0.trace": "gavel",
    "pollux_workload-6.csv": "pollux",
}


@pytest.mark.parametrize(("name", "fmt"), sorted(BUNDLED_SAMPLES.items()))
def test_bundled_samples_are_detected(name, fmt) -> None:
    assert detect_format(BUNDLED / name).name == fmt


def test_every_format_is_listed() -> None:
    assert set(FORMAT_NAMES) == set(ACCEPTED_FORMATS) == {
        "csv", "jsonl", "philly-pollux", "philly-raw", "itp-raw", "itp-annotated", "gavel", "pollux",
        "alibaba-v2023", "pai-v2020", "helios"}


def test_detection_ignores_the_suffix(tmp_path) -> None:
    # A Gavel trace under another name, an ITP file named .txt, canonical JSONL named .log.
    gavel = tmp_path / "vc.txt"
    gavel.write_bytes((BUNDLED / "gavel_philly_vc2869ce_seed0.trace").read_bytes())
    assert detect_format(gavel).name == "gavel"
    itp = write(tmp_path, "itp.dat", ["num_gpu,duration,submission_time,job_id", "2,700,5,a"])
    assert detect_format(itp).name == "itp-raw"  # columns in another order
    assert read_trace(itp).jobs[0].num_gpus == 2
    jsonl = write(tmp_path, "t.log", ['{"job_id": "a", "submit_time": 0, "model": "m5", "num_gpus": 1, '
                                      '"duration_s": 5}'])
    assert read_trace(jsonl).format == "jsonl"


def test_forced_format_checks_the_file(tmp_path) -> None:
    pollux = BUNDLED / "pollux_workload-6.csv"
    assert read_trace(pollux, format="pollux").format == "pollux"
    with pytest.raises(ValidationError) as info:
        read_trace(pollux, format="helios")
    assert info.value.line == 1 and "not a helios header" in str(info.value)
    with pytest.raises(ValidationError, match="unknown trace format 'parquet'"):
        read_trace(pollux, format="parquet")


def test_unrecognised_and_empty_files(tmp_path) -> None:
    p = write(tmp_path, "x.csv", ["date,vcA,total", "2020-04-01,8,8"])
    with pytest.raises(ValidationError) as info:
        read_trace(p)
    assert "unrecognised trace format" in str(info.value) and "itp-raw" in str(info.value)
    empty = tmp_path / "e.csv"
    empty.write_text("")
    with pytest.raises(ValidationError, match="empty file"):
        read_trace(empty)


def test_not_utf8_is_one_error(tmp_path) -> None:
    p = tmp_path / "w.csv"
    p.write_bytes(b"name,time,application,num_replicas,batch_size\n\xff\xfe,1,cifar10,1,2\n")
    with pytest.raises(ValidationError, match="not UTF-8"):
        read_trace(p)


@pytest.mark.skipif(not (SHARED / "tiresias_60_job.csv").exists(), reason="shared traces not present")
def test_shared_non_job_files_are_refused() -> None:
    for name in ("helios_venus_cluster_gpu_number.csv", "pai_v2020_machine_spec.csv"):
        with pytest.raises(ValidationError, match="unrecognised trace format"):
            detect_format(SHARED / name)


@pytest.mark.parametrize("table", sorted(MODEL_TABLES))
def test_model_tables_name_catalog_models(table) -> None:
    perf = PerformanceModel()
    for source_name, mapping in MODEL_TABLES[table].items():
        assert perf.has_model(mapping.model), (table, source_name, mapping.model)
