"""Every preset against every suffix: it composes and simulates, or it is refused by name.

A suffix is an augmentation (``+cassini``, ``+starvation-guard``, ``+migrate``, ...) or a pipeline
stage (``,placement=synergy-tune``, ``,adjust=gandiva-migration``, ...), and every one the registry
holds is tried on every preset it holds (none listed by hand). An augmentation declares the
capabilities it needs of the policy (policies/capabilities.py) and the registry checks them before
it composes, so a policy that lacks one (``fifo+migrate``: Dally's options; ``pollux+cassini-joint``:
a per-job placement) is refused with a :class:`ValidationError` naming the suffix, the policy and
what it lacks, never a traceback mid-run (``halyard simulate --policy gavel+cassini`` once died with
an AttributeError; Gavel now runs adjusters after its own pass). A composition that is accepted
must run a small trace to the end.
"""

from __future__ import annotations

import pytest
from factories import job

from halyard.datamodel import JobState, ValidationError
from halyard.emulator import PerformanceModel
from halyard.policies import Adjustable, Adjuster, NeedsProfiles, StagedPolicy, make_policy, policy_names
from halyard.policies.adjusting import free_after
from halyard.policies.capabilities import MEANS
from halyard.policies.registry import AUGMENTATIONS, DALLY_READINGS, STAGES
from halyard.scheduling import Simulator

PRESETS = policy_names()
PIPELINE_SUFFIXES = [f"{kind}={name}" for kind, names in STAGES.items() for name in sorted(names)]


def _composed(name: str):
    """The policy for ``name``, or the ValidationError that refused it."""
    try:
        return make_policy(name)
    except ValidationError as err:
        return err


def _runs(name: str, policy, cluster) -> None:
    jobs = [job(g, job_id=f"a{i}", submit=20.0 * i, iterations=200, model=m)
            for i, (g, m) in enumerate([(1, "resnet18"), (2, "vgg11"), (4, "resnet50"), (2, "alexnet")])]
    sim = Simulator(cluster, policy, PerformanceModel(data_stalls=policy.resource_sensitive), round_s=60.0)
    sim.run(jobs)
    assert all(r.state is JobState.COMPLETED for r in sim.core.records.values()), name


@pytest.mark.parametrize("augmentation", sorted(AUGMENTATIONS))
@pytest.mark.parametrize("base", PRESETS)
def test_every_preset_takes_an_augmentation_or_refuses_it_by_name(base, augmentation, small_cluster):
    name = f"{base}+{augmentation}"
    policy = _composed(name)
    if isinstance(policy, ValidationError):
        assert policy.field == "policy"
        assert f"+{augmentation}" in str(policy) and f"{base!r}" in str(policy), str(policy)
        missing = [cap for cap in AUGMENTATIONS[augmentation].needs if not isinstance(make_policy(base), cap)]
        for cap in missing:  # the refusal names every capability the preset lacks, in words
            assert f"{cap.__name__} ({MEANS[cap]})" in str(policy), str(policy)
        if augmentation.startswith("cassini") and not missing:
            assert augmentation == "cassini-joint" and "per-job placement" in str(policy)  # policies/cassini.py
        return
    if augmentation in DALLY_READINGS.get(base, ("", ()))[1]:  # a rule the preset has on: idempotent, no suffix
        assert policy.name == base
    else:
        assert policy.name.endswith(f"+{augmentation}")
    if augmentation.startswith("cassini"):
        assert isinstance(policy, Adjustable) and policy.adjusters[-1].name == augmentation
    _runs(name, policy, small_cluster)


@pytest.mark.parametrize("suffix", PIPELINE_SUFFIXES)
@pytest.mark.parametrize("base", PRESETS)
def test_every_preset_takes_a_pipeline_stage_or_refuses_it_by_name(base, suffix, small_cluster):
    name = f"{base},{suffix}"
    policy = _composed(name)
    if isinstance(policy, ValidationError):
        assert policy.field == "policy"
        assert not isinstance(make_policy(base), StagedPolicy) or "+" in base, str(policy)
        assert f"{base!r}" in str(policy) and "staged preset" in str(policy), str(policy)
        return
    kind, _, stage = suffix.partition("=")
    assert (kind, stage) in policy.stages() or (kind == "ordering" and policy.ordering.name == stage)
    _runs(name, policy, small_cluster)


def test_every_preset_runs_adjusters_after_its_pass():
    """Adjusters run in one place (policies/adjusting.py) after every pass, staged or the policy's own
    (Gavel, Crius and ElasticFlow, refused +cassini before they did)."""
    assert not [n for n in PRESETS if not isinstance(make_policy(n), Adjustable)]


class Watching(Adjuster):
    """An adjuster that changes nothing and checks, every pass, that the free resources it is given are
    the cluster once the plan is applied (what a pass's own ledger must say), and that it learns only
    from plans the core applied."""

    name = "watching"
    acts_without_pending = True

    def __init__(self) -> None:
        self.passes = self.applied = 0

    def adjust(self, view, plan, free, state) -> None:
        expected = free_after(view, plan)
        assert (free.gpus.tolist(), free.cpus.tolist(), free.memory_mb.tolist(), free.gpu_mask) == (
            expected.gpus.tolist(), expected.cpus.tolist(), expected.memory_mb.tolist(), expected.gpu_mask)
        state.put("watching/seen", True)
        self.passes += 1

    def on_applied(self, view, plan, state) -> None:
        assert state.get("watching/seen", False)
        self.applied += 1


@pytest.mark.parametrize("base", ["gavel", "crius", "elasticflow", "dally", "pollux", "fifo", "synergy-tune:srtf"])
def test_adjusters_after_an_own_pass_see_the_cluster_after_it(base, small_cluster):
    policy = make_policy(base)
    watching = Watching()
    policy.adjusters = (*policy.adjusters, watching)
    assert ("adjust", "watching") in policy.stages() and policy.acts_without_pending
    _runs(base, policy, small_cluster)
    assert watching.passes > 0 and 0 < watching.applied <= watching.passes


def test_only_crius_needs_profiles_before_a_first_pass():
    assert {n for n in PRESETS if isinstance(make_policy(n), NeedsProfiles)} == {n for n in PRESETS
                                                                                 if n.startswith("crius")}
