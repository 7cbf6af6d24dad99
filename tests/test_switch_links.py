"""Switch-to-switch links in the cluster format, routed traffic, and Cassini's Fig. 4.10 testbed.

A cluster with ``[[links]]`` routes a job's traffic between racks over the links of the
shortest paths between them (docs/cluster-format.md, "Switches and links"); one without
keeps the rack uplinks and the spine.
"""

from __future__ import annotations

import pytest
from factories import job

from halyard.datamodel import Allocation, NodeAllocation, ValidationError, load_cluster, parse_cluster
from halyard.emulator.fabric import Fabric

MODEL = "vgg11"  # an all-reduce that fills a 50 Gbit/s link for a good part of its iteration


@pytest.fixture(scope="module")
def testbed():
    return load_cluster("cassini-testbed")


def spread(*nodes: str) -> Allocation:
    return Allocation(tuple(NodeAllocation(n, (0,), 0, 0) for n in nodes))


def test_testbed_has_fig_4_10s_counts(testbed):
    """§4.5.1: 24 one-A100 servers with 50 Gbit/s NICs, 13 logical switches, 48 links, 2:1."""
    assert len(testbed.nodes) == 24 and testbed.total_gpus == 24
    assert {n.gpu_type for n in testbed.nodes} == {"A100"}
    assert {n.nic_gbyte_s for n in testbed.nodes} == {50 / 8}
    assert len(testbed.racks) + len(testbed.switches) == 13  # a rack is its ToR
    assert len(testbed.nodes) + len(testbed.links) == 48  # server links + switch links
    for rack in testbed.racks:  # 2:1 at the ToR: servers' NICs down over the ToR's links up
        down = sum(testbed.nodes[i].nic_gbyte_s for i in rack.node_indices)
        assert down / rack.uplink_gbyte_s == pytest.approx(2.0)


def test_routes_are_shortest_and_symmetric(testbed):
    same_pod, other_pod = testbed.route(0, 1), testbed.route(0, 3)
    assert len(same_pod) == 2 and all(k[0] == "switch" for k in same_pod)  # ToR - agg - ToR
    assert len(other_pod) == 4 and any("core" in k[1] for k in other_pod)  # ToR - agg - core - agg - ToR
    assert testbed.route(3, 0) == other_pod
    # Equal-cost paths are spread over rack pairs (ECMP stand-in): not every pair takes one core.
    cores = {k[1] for a in range(3) for b in range(3, 6) for k in testbed.route(a, b) if k[1].startswith("agg")}
    assert len({c.split("~")[1] for c in cores}) == 3


def test_a_job_crosses_the_links_of_its_route(testbed, perf):
    fabric = Fabric(perf, testbed)
    links = fabric.links_of(spread("tor0-n0", "tor3-n0"))
    kinds = [(link.kind, link.name) for link in links]
    assert kinds[:2] == [("nic", "tor0-n0"), ("nic", "tor3-n0")]
    assert {k for k in kinds[2:]} == set(testbed.route(0, 3))
    assert all(link.capacity_gbyte_s == 50 / 8 for link in links)
    # The job's timing charges the same links the fabric holds it on.
    timing = perf.job_timing(job(2, model=MODEL), spread("tor0-n0", "tor3-n0"), testbed)
    assert {(load.kind, load.name) for load in timing.links} == set(kinds)


def test_jobs_slow_each_other_only_where_routes_share_a_link(testbed, perf):
    """Two cross-pod jobs between the same ToRs share the route's links and contend; a job in the
    other pod's ToRs crosses none of their links and runs at dedicated speed."""
    fabric = Fabric(perf, testbed)
    fabric.place("a", job(2, model=MODEL, job_id="a"), spread("tor0-n0", "tor3-n0"), 0.0)
    fabric.place("b", job(2, model=MODEL, job_id="b"), spread("tor0-n1", "tor3-n1"), 0.0)
    fabric.place("c", job(2, model=MODEL, job_id="c"), spread("tor4-n0", "tor5-n0"), 0.0)
    fabric.settle()
    assert fabric.slowdown("a") > 1.05 and fabric.slowdown("b") > 1.05
    assert fabric.slowdown("c") == 1.0


def test_existing_clusters_keep_uplinks(perf):
    default = load_cluster("default")
    assert default.links == () and default.switches == ()
    assert default.inter_rack_links([1, 0]) == (("uplink", "r1"), ("uplink", "r0"))
    assert default.inter_rack_gbyte_s([0, 1]) == default.racks[0].uplink_gbyte_s / default.spine_oversubscription


BASE = """name = "t"
[[racks]]
name = "r{i}"
count = 2
[[racks.nodes]]
gpu_type = "A100"
gpus = 1
cpus = 4
memory_gb = 16
fabric = "pcie"
fabric_gbyte_s = 16
nic_gbit_s = 50
[[switches]]
name = "s"
"""


@pytest.mark.parametrize(("extra", "field", "message"), [
    ('[[links]]\na = "r0"\nb = "x"\ngbit_s = 50\n', "links[0].b", "'x' is neither a rack nor a switch"),
    ('[[links]]\na = "r0"\nb = "s"\ngbit_s = 0\n', "links[0].gbit_s", "must be a positive number"),
    ('[[links]]\na = "r0"\nb = "s"\n', "links[0].gbit_s", "is required"),
    ('[[links]]\na = "r0"\nb = "s"\ngbit_s = 50\n[[links]]\na = "s"\nb = "r0"\ngbit_s = 50\n', "links[1].b",
     "duplicate link"),
    ('[[links]]\na = "r0"\nb = "s"\ngbit_s = 50\n', "links", "no switch links connect rack 'r0' to rack 'r1'"),
    ('[[links]]\na = "r0"\nb = "s"\ngbit_s = 50\nspeed = 1\n', "links[0].speed", "unknown key"),
])
def test_bad_links_are_named(extra, field, message):
    with pytest.raises(ValidationError) as err:
        parse_cluster(BASE + extra, source="t.toml")
    assert f"field '{field}'" in str(err.value) and message in str(err.value)


@pytest.mark.parametrize(("text", "field", "message"), [
    (BASE + '[[links]]\na = ["r0"]\nb = "s"\ngbit_s = 50\n', "links[0].a", "must be the name of a rack or a switch"),
    (BASE.replace('name = "s"', 'name = "s{i}{j}"\ncount = 2') + '[[links]]\na = "r0"\nb = "r1"\ngbit_s = 50\n',
     "switches[0].name", "may hold only the placeholder {i}"),
    (BASE, "switches", "[[switches]] need [[links]]"),
])
def test_malformed_switch_blocks_are_named_not_crashed_on(text, field, message):
    """Wrong types and placeholders in [[switches]]/[[links]] are ValidationErrors naming the field."""
    with pytest.raises(ValidationError) as err:
        parse_cluster(text, source="t.toml")
    assert f"field '{field}'" in str(err.value) and message in str(err.value)


def test_bad_link_errors_carry_the_line():
    text = BASE + '[[links]]\na = "r0"\nb = "s"\ngbit_s = -1\n'
    with pytest.raises(ValidationError, match=r"t\.toml:18, field 'links\[0\]\.gbit_s'"):
        parse_cluster(text, source="t.toml")


def test_uplinks_and_links_do_not_mix():
    text = BASE.replace('count = 2\n', 'count = 2\nuplink_gbit_s = 100\n', 1)
    text += '[[links]]\na = "r0"\nb = "s"\ngbit_s = 50\n[[links]]\na = "r1"\nb = "s"\ngbit_s = 50\n'
    with pytest.raises(ValidationError, match=r"racks\[0\]\.uplink_gbit_s.*has no meaning with \[\[links\]\]"):
        parse_cluster(text, source="t.toml")
    ok = parse_cluster(BASE + '[[links]]\na = "r0"\nb = "s"\ngbit_s = 50\n[[links]]\na = "r1"\nb = "s"\n'
                       'gbit_s = 100\n', source="t.toml")
    assert ok.inter_rack_links([0, 1]) == (("switch", "r0~s"), ("switch", "r1~s"))
    assert ok.inter_rack_gbyte_s([0, 1]) == 50 / 8  # the narrowest link of the route
