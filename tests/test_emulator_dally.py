"""Dally Table 1 reproduced with the performance model's formulas (docs/performance-model.md).

Dally Table 1, exposed communication as % of compute, 8 GPUs (machine / rack / network):

    VGG11 1 / 6 / 7, AlexNet 2 / 13 / 100, MobileNetV3 42 / 940 / 19592,
    ResNet18 7 / 116 / 2749, ResNet50 12 / 12 / 38, BERT-large 8 / 23 / 715.
"""

from __future__ import annotations

import math

import pytest

from halyard.datamodel import JobSpec
from halyard.emulator import PerformanceModel
from halyard.emulator.calibration import (
    dally_communication_s,
    dally_fit_loss,
    dally_overheads_pct,
    fit_dally_latencies,
    load_dally_table1,
)
from halyard.emulator.collectives import exposed_s, hierarchical_allreduce_s, ring_allreduce_s


@pytest.fixture(scope="module")
def table():
    return load_dally_table1()


@pytest.fixture(scope="module")
def pct(table):
    return {name: dally_overheads_pct(w, table.network) for name, w in table.workloads.items()}


def test_inputs_are_sourced_and_match_the_catalog(table):
    pm = PerformanceModel()
    assert set(table.workloads) == {"vgg11", "alexnet", "mobilenetv3", "resnet18", "resnet50", "bert-large"}
    for w in table.workloads.values():
        assert pm.has_model(w.name)
        assert all(len(s) > 15 for s in w.sources.values())
        if w.name != "bert-large":  # the catalog's BERT is the full model, Dally's file 66 layers of it
            assert w.gradient_bytes == pytest.approx(pm.profile(w.name).gradient_bytes, rel=1e-3)
            assert w.backward_fraction == pytest.approx(pm.profile(w.name).backward_fraction, abs=1e-3)
    assert table.workloads["resnet18"].compute_s == pytest.approx(147_376_542 * 0.001223 * 1e-9, rel=1e-3)
    assert all(len(s) > 15 for s in table.network.sources.values())


def test_formula_is_the_performance_models(table):
    """Machine: ring of 8 with one message per layer; rack/network: two-level 4 + 4 with a link per
    GPU; exposed with the bucketed-overlap formula over the whole compute (layer-wise overlap)."""
    net, w = table.network, table.workloads["resnet18"]
    assert dally_communication_s(w, net, 0) == pytest.approx(
        ring_allreduce_s(w.gradient_bytes, 8, net.intra_gbyte_s, net.node_latency_s, messages=21))
    assert dally_communication_s(w, net, 2) == pytest.approx(
        2 * 3 / 4 * w.gradient_bytes / 600e9 + 21 * 6 * net.node_latency_s
        + (w.gradient_bytes / 4) / 100e9 + 21 * 2 * net.network_latency_s)
    assert dally_communication_s(w, net, 1) == pytest.approx(hierarchical_allreduce_s(
        w.gradient_bytes, 4, 2, 600.0, 50.0, net.node_latency_s, net.rack_latency_s, messages=21, rails=True))
    comm = dally_communication_s(w, net, 1)
    assert dally_overheads_pct(w, net)[1] == pytest.approx(100 * exposed_s(comm, w.compute_s, 21) / w.compute_s)


def test_recorded_latencies_are_the_fit(table):
    """The three fitted latencies in dally_table1.toml are the grid optimum (benchmarks/fit_dally_table1.py)."""
    best, loss = fit_dally_latencies(table)
    net = table.network
    assert net.node_latency_s == pytest.approx(best.node_latency_s, rel=0.01)
    assert net.rack_latency_s == pytest.approx(best.rack_latency_s, rel=0.01)
    assert net.network_latency_s == pytest.approx(best.network_latency_s, rel=0.01)
    assert dally_fit_loss(table) == pytest.approx(loss, rel=0.01)
    # They land in REFERENCE-NUMBERS' ranges: switch hop ~100 ns, RDMA a few us, network "large".
    assert 5e-8 < net.node_latency_s < 3e-7 and 1e-6 < net.rack_latency_s < 1e-5 and net.network_latency_s > 5e-5


def test_every_model_is_more_exposed_on_farther_tiers(pct):
    for name, (machine, rack, network) in pct.items():
        assert machine <= rack < network, name


def test_network_column_order(pct):
    """Table 1 network column: MobileNetV3 > ResNet18 >> AlexNet > {ResNet50, VGG11}."""
    net = {name: v[2] for name, v in pct.items()}
    assert net["mobilenetv3"] > net["resnet18"] > max(v for k, v in net.items() if k not in ("mobilenetv3", "resnet18"))
    assert net["alexnet"] > net["vgg11"] and net["alexnet"] > net["resnet50"]


def test_rack_and_machine_column_order(pct):
    """Rack: MobileNetV3 > ResNet18 > AlexNet > VGG11 >= ResNet50 (Table 1: 940 > 116 > 13 > 6, 12);
    machine: MobileNetV3 is the most exposed (42%)."""
    rack = {name: v[1] for name, v in pct.items()}
    assert rack["mobilenetv3"] > rack["resnet18"] > rack["alexnet"] > rack["vgg11"] >= rack["resnet50"]
    machine = {name: v[0] for name, v in pct.items()}
    assert max(machine, key=machine.get) == "mobilenetv3"


def test_magnitudes(pct, table):
    """Within a factor of 3.5 (on 1 + %) wherever Table 1 says at least 40%, except BERT-large's
    network cell (715% vs 57%: see docs, 'Where it misses'); MobileNetV3 and ResNet18 stay
    thousands of percent across racks, the CNNs with big layers a few percent on one machine."""
    for name, w in table.workloads.items():
        for tier, (model, paper) in enumerate(zip(pct[name], w.table_pct, strict=True)):
            if paper >= 40 and (name, tier) != ("bert-large", 2):
                assert abs(math.log10((1 + model) / (1 + paper))) < math.log10(3.5), (name, tier, model, paper)
    assert pct["mobilenetv3"][2] > 10_000 and pct["resnet18"][2] > 1_000
    assert pct["mobilenetv3"][0] == pytest.approx(42, abs=5)
    assert all(pct[m][0] < 10 for m in ("vgg11", "alexnet", "resnet18", "resnet50", "bert-large"))


def test_real_compute_hides_most_of_it():
    """Why v0 read ~0%: with real A100 compute (10-1000x Dally's) and sourced hardware the
    all-reduce is a small fraction of an iteration for most of these models."""
    table = load_dally_table1()
    pm = PerformanceModel()
    for name, w in table.workloads.items():
        spec = JobSpec(job_id="j", submit_time=0.0, model=name, num_gpus=8, iterations=1,
                       batch_size=32 if name in ("vgg11", "bert-large") else 64)
        real = pm.ideal_iteration_time(spec, "A100")
        assert real > 3 * w.compute_s, name
