"""The data model: cluster files are validated with file, line and field; the job state machine."""

from __future__ import annotations

import itertools

import pytest
from factories import SMALL_CLUSTER_TOML

from halyard.datamodel import (
    InvalidTransition,
    JobSpec,
    JobState,
    ValidationError,
    builtin_clusters,
    check_transition,
    load_cluster,
    parse_cluster,
)


def test_small_cluster_layout(small_cluster):
    assert small_cluster.total_gpus == 16
    assert [n.name for n in small_cluster.nodes] == ["r0-n0", "r0-n1", "r1-n0", "r1-n1"]
    assert [r.node_indices for r in small_cluster.racks] == [(0, 1), (2, 3)]
    node = small_cluster.node("r1-n0")
    assert (node.index, node.rack_index, node.memory_mb) == (2, 1, 250_000)
    assert node.nic_gbyte_s == pytest.approx(25.0)  # 200 Gbit/s / 8
    assert node.proportional_cpus(2) == 6 and node.proportional_memory_mb(1) == 62_500


def test_builtin_clusters_load():
    assert {"default", "philly"} <= set(builtin_clusters())
    philly = load_cluster("philly")
    assert philly.total_gpus == 2816 and len(philly.nodes) == 352  # Helios' Philly size
    assert load_cluster("default").total_gpus == 64


@pytest.mark.parametrize(("edit", "line", "field", "words"), [
    (("gpus = 4", "gpus = 0"), 11, "racks[0].nodes[0].gpus", "positive"),
    (("gpus = 4", 'gpus = "four"'), 11, "racks[0].nodes[0].gpus", "must be int"),
    (('fabric = "nvlink"', 'fabric = "carrier-pigeon"'), 14, "racks[0].nodes[0].fabric", "unknown fabric"),
    (("cpus = 12", "cpus = 12\ncolour = 3"), 13, "racks[0].nodes[0].colour", "unknown key"),
    (("uplink_gbit_s = 400", ""), None, "racks[0].uplink_gbit_s", "required"),
    (('name = "r{i}"', 'name = "rack"'), 4, "racks[0].name", "{i}"),
])
def test_cluster_errors_name_line_and_field(edit, line, field, words):
    text = SMALL_CLUSTER_TOML.replace(*edit)
    with pytest.raises(ValidationError) as err:
        parse_cluster(text, source="bad.toml")
    assert err.value.field == field
    assert err.value.line == line
    assert words in err.value.message
    assert str(err.value).startswith("bad.toml")


def test_cluster_toml_syntax_error_names_line():
    with pytest.raises(ValidationError) as err:
        parse_cluster('name = "x"\n[[racks]\n', source="broken.toml")
    assert err.value.line == 2 and "not valid TOML" in str(err.value)


def test_missing_cluster_file_lists_builtins(tmp_path):
    with pytest.raises(ValidationError, match=r"built-ins: .*default.*philly"):
        load_cluster(tmp_path / "nope.toml")


def test_state_machine_follows_design():
    # DESIGN.md: PENDING -> RUNNING -> (PREEMPTED -> PENDING)* -> COMPLETED | FAILED | CANCELLED
    path = [JobState.PENDING, JobState.RUNNING, JobState.PREEMPTED, JobState.PENDING,
            JobState.RUNNING, JobState.COMPLETED]
    for old, new in itertools.pairwise(path):
        check_transition("j", old, new)
    for old, new in [(JobState.PENDING, JobState.COMPLETED), (JobState.PREEMPTED, JobState.RUNNING),
                     (JobState.COMPLETED, JobState.RUNNING), (JobState.CANCELLED, JobState.PENDING)]:
        with pytest.raises(InvalidTransition, match=f"{old.value} -> {new.value}"):
            check_transition("j", old, new)


@pytest.mark.parametrize(("kw", "field"), [
    ({"num_gpus": 0}, "num_gpus"),
    ({"iterations": 0}, "iterations"),
    ({"submit_time": -1.0}, "submit_time"),
    ({"job_id": " "}, "job_id"),
    ({"min_gpus": 9}, "min_gpus"),
    ({"deadline": -5.0, "submit_time": 0.0}, "deadline"),
])
def test_jobspec_rejects_bad_fields(kw, field):
    args = {"job_id": "a", "submit_time": 0.0, "model": "resnet50", "num_gpus": 2, "iterations": 10} | kw
    with pytest.raises(ValidationError) as err:
        JobSpec(**args)
    assert err.value.field == field


def test_inter_rack_bandwidth_memo_is_bounded(monkeypatch):
    """A long-lived control plane asks for many rack sets: the memo keeps at most the bound, same answers."""
    from halyard.datamodel import cluster as cluster_module
    from halyard.testing.cluster import small_cluster_toml

    c = parse_cluster(small_cluster_toml(32, nodes_per_rack=2))
    pairs = [(a, b) for a in range(16) for b in range(a + 1, 16)]
    fresh = {p: c.inter_rack_gbyte_s(p) for p in pairs}
    monkeypatch.setattr(cluster_module, "INTER_RACK_MEMO_ENTRIES", 8)
    bounded = parse_cluster(small_cluster_toml(32, nodes_per_rack=2))
    assert {p: bounded.inter_rack_gbyte_s(p) for p in pairs} == fresh
    assert len(bounded._inter_rack_bw) == 8
