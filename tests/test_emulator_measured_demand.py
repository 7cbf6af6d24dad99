"""``PerformanceModel(measured_up_demand=...)``: a measured traffic level in place of the modelled one.

The option exists to measure what a traffic difference is worth (issue 35: each difference between a
reproduction and its paper named and measured by an option that removes it). It changes the demand of the
named models' Up phases on every link and nothing else: not the phases' timing, not the iteration time, not
other models, and nothing at all when it is not given.
"""

from __future__ import annotations

import pytest

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, Parallelism, load_cluster
from halyard.emulator import PerformanceModel

CLUSTER = "cassini-testbed"


def _across_two_tors(model: str, batch: int, parallel: Parallelism | None) -> tuple[JobSpec, Allocation]:
    alloc = Allocation(tuple(NodeAllocation(f"tor{r}-n{i}", (0,), 16, 256_000) for r in (0, 1) for i in (0, 1)))
    spec = JobSpec(job_id=model, submit_time=0.0, model=model, batch_size=batch, num_gpus=4, iterations=10,
                   parallelism=parallel)
    return spec, alloc


def test_up_phases_carry_the_measured_demand_and_nothing_else_moves() -> None:
    cluster = load_cluster(CLUSTER)
    spec, alloc = _across_two_tors("gpt3-xl", 2, Parallelism(data=1, tensor=1, pipeline=4))
    plain = PerformanceModel().job_timing(spec, alloc, cluster)
    measured = PerformanceModel(measured_up_demand={"gpt3-xl": 3.0}).job_timing(spec, alloc, cluster)
    assert measured.iteration == plain.iteration
    assert [(x.kind, x.name) for x in measured.links] == [(x.kind, x.name) for x in plain.links]
    assert plain.links
    for a, b in zip(plain.links, measured.links, strict=True):
        assert [p.duration_s for p in a.profile.phases] == [p.duration_s for p in b.profile.phases]
        assert [p.up for p in a.profile.phases] == [p.up for p in b.profile.phases]
        assert {p.demand_gbyte_s for p in b.profile.phases if p.up} == {3.0}
        assert max(p.demand_gbyte_s for p in a.profile.phases) < 1.0  # the model's own level is far lower


def test_other_models_and_the_default_are_untouched() -> None:
    cluster = load_cluster(CLUSTER)
    spec, alloc = _across_two_tors("vgg11", 256, None)
    assert (PerformanceModel(measured_up_demand={"gpt3-xl": 3.0}).job_timing(spec, alloc, cluster)
            == PerformanceModel().job_timing(spec, alloc, cluster))
    dp = PerformanceModel(measured_up_demand={"vgg11": 1.5}).job_timing(spec, alloc, cluster)
    assert dp.links and all({p.demand_gbyte_s for p in x.profile.phases if p.up} == {1.5} for x in dp.links)


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_a_demand_must_be_positive(bad: float) -> None:
    with pytest.raises(ValueError, match="measured_up_demand"):
        PerformanceModel(measured_up_demand={"gpt1": bad})
