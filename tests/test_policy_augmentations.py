"""Every preset against every suffix: it composes and simulates, or it is refused by name.

A suffix is an augmentation (``+cassini``, ``+starvation-guard``, ``+migrate``, ...) or a pipeline
stage (``,placement=synergy-tune``, ``,adjust=gandiva-migration``, ...), and every one the registry
holds is tried on every preset it holds (none listed by hand). An augmentation declares the
capabilities it needs of the policy (policies/capabilities.py) and the registry checks them before
it composes, so a policy that lacks one -- Gavel, Crius and ElasticFlow run their own pass with no
adjusters -- is refused with a :class:`ValidationError` naming the suffix, the policy and what it
lacks, never a traceback mid-run (``halyard simulate --policy gavel+cassini`` once died with an
AttributeError). A composition that is accepted must run a small trace to the end.
"""

from __future__ import annotations

import pytest
from factories import job

from halyard.controlplane import Simulator
from halyard.datamodel import JobState, ValidationError
from halyard.emulator import PerformanceModel
from halyard.policies import Adjustable, NeedsProfiles, StagedPolicy, make_policy, policy_names
from halyard.policies.capabilities import MEANS
from halyard.policies.registry import AUGMENTATIONS, STAGES

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


def test_the_refused_presets_are_the_ones_with_their_own_pass():
    refused = {n for n in PRESETS if not isinstance(make_policy(n), Adjustable)}
    assert {"gavel", "crius", "elasticflow"} <= refused
    assert not refused & {"fifo", "tiresias", "dally", "themis", "pollux", "synergy-tune:srtf"}


def test_only_crius_needs_profiles_before_a_first_pass():
    assert {n for n in PRESETS if isinstance(make_policy(n), NeedsProfiles)} == {n for n in PRESETS
                                                                                 if n.startswith("crius")}
