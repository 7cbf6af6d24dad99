"""Every registered policy and stage against the protocols the drivers read them through.

Kubernetes checks each plugin against its interface at compile time
(``var _ framework.FilterPlugin = &Fit{}``); here one test walks every preset and
every stage registry, so a member a driver reads can never be missing or of the
wrong kind (the contract of policies/stages.py).
"""

from __future__ import annotations

import pytest
from factories import job

from halyard.datamodel import EventKind, JobState, ValidationError
from halyard.emulator import PerformanceModel
from halyard.policies import (
    STAGES,
    Adjuster,
    Admission,
    BatchPlacement,
    Ordering,
    Placement,
    Plan,
    Policy,
    Preemption,
    Sizing,
    Stage,
    StagedPolicy,
    make_policy,
    policy_names,
)
from halyard.policies.tiresias import TwoDimensionalLas
from halyard.scheduling import SchedulingCore, Simulator
from halyard.scheduling.core import PlanError

PROTOCOLS = {"admission": Admission, "ordering": Ordering, "sizing": Sizing, "adjust": Adjuster, "preempt": Preemption}


@pytest.mark.parametrize("name", policy_names())
def test_every_preset_declares_what_drivers_read(name):
    policy = make_policy(name)
    assert isinstance(policy, Policy)
    for member in ("needs_rounds", "acts_without_pending", "resource_sensitive"):
        assert type(getattr(policy, member)) is bool, member
    stages = policy.stages()
    assert stages and all(isinstance(k, str) and isinstance(c, str) and c for k, c in stages)
    if isinstance(policy, StagedPolicy):
        # a round-based batch placement (Synergy §3) acts only at round boundaries, so it needs the round timer
        assert policy.needs_rounds == (policy.ordering.needs_rounds or any(a.needs_rounds for a in policy.adjusters)
                                       or (policy.placement.batch and policy.placement.rounds))
        assert policy.resource_sensitive == policy.placement.resource_sensitive
        assert [c for _, c in stages] == [s.name for s in policy._all()]


@pytest.mark.parametrize(("kind", "name"), [(k, n) for k, reg in STAGES.items() for n in sorted(reg)])
def test_every_registered_stage_meets_its_protocol(kind, name):
    stage = STAGES[kind][name]()
    assert isinstance(stage, Stage) and stage.name == name
    if kind == "placement":
        assert type(stage.batch) is bool and type(stage.resource_sensitive) is bool
        assert isinstance(stage, BatchPlacement if stage.batch else Placement)
        assert not stage.batch or type(stage.rounds) is bool
    else:
        assert isinstance(stage, PROTOCOLS[kind])
    if kind == "ordering":
        assert all(type(getattr(stage, m)) is bool for m in ("preemptive", "needs_rounds", "arrival_order"))
    if kind == "adjust":
        assert type(stage.acts_without_pending) is bool and type(stage.needs_rounds) is bool


def test_a_pipeline_names_one_choice_per_stage():
    policy = make_policy("ordering=tiresias-2das,placement=synergy-tune,adjust=gandiva-migration")
    assert policy.stages() == [("admission", "all"), ("ordering", "tiresias-2das"), ("sizing", "fixed"),
                               ("placement", "synergy-tune"), ("adjust", "gandiva-migration")]
    assert policy.needs_rounds and policy.resource_sensitive and policy.acts_without_pending
    based = make_policy("tiresias, adjust=gandiva-migration")
    assert isinstance(based.ordering, TwoDimensionalLas) and based.placement.name == "tiresias-skew"
    assert based.name == "tiresias, adjust=gandiva-migration"


@pytest.mark.parametrize(("name", "message"), [
    ("ordering=round-robin",
     "unknown ordering stage 'round-robin' (known: fifo, ftf, las, nw-sens, srtf, themis, tiresias-2das)"),
    ("ordering=las,network=cassini", "unknown stage kind 'network' in 'network=cassini'"),
    ("ordering=las,ordering=srtf", "stage 'ordering' is given twice"),
    ("ordering", "unknown policy 'ordering'"),
    ("fifo,placement", "pipeline part 'placement' is not STAGE=NAME"),
    ("dally,ordering=las", "'dally' is not a staged preset"),
    ("nosuch,ordering=las", "'nosuch' is not a preset"),
])
def test_a_bad_pipeline_names_the_unknown_part(name, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        make_policy(name)
    assert err.value.field == "policy"


def test_a_composed_policy_runs_where_no_preset_does(small_cluster):
    """Tiresias' 2D-LAS ordering with Synergy-TUNE's packing and Gandiva's migration: no paper
    tried it, and it needs no new code."""
    policy = make_policy("ordering=tiresias-2das,placement=synergy-tune,adjust=gandiva-migration")
    jobs = [job(g, job_id=f"c{i}", submit=30.0 * i, iterations=300 + 40 * i, model=m)
            for i, (g, m) in enumerate([(1, "alexnet"), (2, "resnet18"), (8, "resnet50"), (1, "gnmt"),
                                        (3, "vgg11"), (2, "alexnet")])]
    sim = Simulator(small_cluster, policy, PerformanceModel(data_stalls=True), round_s=60.0)
    sim.run(jobs)
    assert all(r.state is JobState.COMPLETED for r in sim.core.records.values())
    kinds = {e.kind for e in sim.core.log}
    # TUNE re-tuned a running job's CPUs (alexnet started at its 12-CPU demand and went back to
    # its share to make room), and Gandiva's adjuster moved a job split by the packing.
    assert {EventKind.RESOURCES, EventKind.MIGRATED} <= kinds


def test_the_core_calls_on_rejected_and_not_on_applied_for_a_refused_plan(small_cluster, perf):
    calls: list[str] = []

    class Broken(Policy):
        name = "broken"

        def schedule(self, view, state):
            plan = Plan()
            plan.preempt("nobody")  # the core refuses it
            return plan

        def on_applied(self, view, plan, state):
            calls.append("applied")

        def on_rejected(self, view, plan, state):
            calls.append("rejected")

    core = SchedulingCore(small_cluster, Broken(), perf)
    core.submit(job(1, job_id="a"), 0.0)
    with pytest.raises(PlanError, match="unknown job"):
        core.schedule(0.0)
    assert calls == ["rejected"] and core.passes == 0
