"""Profiles as data (`halyard profiles show`), and monotonicity of the iteration time in bandwidth."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.emulator.profiles import format_profile, list_rows, profile_rows

PM = PerformanceModel()


def test_show_resnet50_lists_its_numbers_and_their_sources():
    rows = {r.field: r for r in profile_rows(PM, "resnet50")}
    for field in ("reference_batch", "gradient_bytes", "backward_fraction", "activation_bytes",
                  "compute_s.V100", "compute_s.H200", "memory.T4", "data.best_speedup", "restart_cost_s"):
        assert field in rows and len(rows[field].source) > 10, field
    assert rows["compute_s.V100"].value == PM.profile("resnet50").compute_s["V100"]
    assert not rows["compute_s.A100"].estimated and rows["compute_s.H200"].estimated
    text = format_profile(PM, "resnet50")
    assert "Gavel" in text and "ElasticFlow" in text and "GPU scaling rule" in text and "* estimate" in text
    assert [r[0] for r in list_rows(PM)] == list(PM.models())


def _cluster(fabric: float, nic_gbit: float, uplink_gbit: float):
    return parse_cluster(f"""
name = "c"
[[racks]]
name = "r{{i}}"
count = 2
uplink_gbit_s = {uplink_gbit}
[[racks.nodes]]
name = "{{rack}}-n{{i}}"
count = 2
gpu_type = "V100"
gpus = 4
cpus = 12
memory_gb = 250
fabric = "nvlink"
fabric_gbyte_s = {fabric}
nic_gbit_s = {nic_gbit}
""")


PLACEMENTS = (
    Allocation((NodeAllocation("r0-n0", (0, 1, 2, 3), 0, 0),)),
    Allocation((NodeAllocation("r0-n0", (0, 1), 0, 0), NodeAllocation("r0-n1", (0, 1), 0, 0))),
    Allocation((NodeAllocation("r0-n0", (0, 1), 0, 0), NodeAllocation("r1-n0", (0, 1), 0, 0))),
)


@settings(max_examples=30, deadline=None)
@given(model=st.sampled_from(PM.models()), fabric=st.floats(10, 600), nic=st.floats(10, 800),
       uplink=st.floats(10, 1600), factor=st.floats(1.0, 8.0), which=st.integers(0, 2),
       algorithm=st.sampled_from(("ring", "tree", "auto")))
def test_more_bandwidth_is_never_slower(model, fabric, nic, uplink, factor, which, algorithm):
    """Property (issue 4): raising any link's bandwidth never lengthens an iteration."""
    pm = PerformanceModel(allreduce=algorithm)
    spec = JobSpec(job_id="j", submit_time=0.0, model=model, num_gpus=4, iterations=1)
    base = _cluster(fabric, nic, uplink)
    faster = _cluster(*[v * factor if i == which else v for i, v in enumerate((fabric, nic, uplink))])
    for a in PLACEMENTS:
        assert pm.iteration_time(spec, a, faster).total_s <= pm.iteration_time(spec, a, base).total_s + 1e-12
