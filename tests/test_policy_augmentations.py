"""Every preset against every augmentation: it composes and simulates, or it is refused by name.

An augmentation (``+cassini``, ``+cassini-lock``) appends an adjuster stage, so it needs a policy
that declares :class:`~halyard.policies.Adjustable`; one that runs its own pass without adjusters
(Gavel, Crius, ElasticFlow) must be refused with a :class:`ValidationError` naming it, not die
mid-run with an AttributeError (``halyard simulate --policy gavel+cassini`` once did).
"""

from __future__ import annotations

import pytest
from factories import job

from halyard.controlplane import Simulator
from halyard.datamodel import JobState, ValidationError
from halyard.emulator import PerformanceModel
from halyard.policies import Adjustable, make_policy, policy_names
from halyard.policies.registry import AUGMENTATIONS

BASES = [n for n in policy_names() if "+" not in n]


def _composed(name: str):
    """The policy for ``name``, or the ValidationError that refused it."""
    try:
        return make_policy(name)
    except ValidationError as err:
        return err


@pytest.mark.parametrize("augmentation", sorted(AUGMENTATIONS))
@pytest.mark.parametrize("base", BASES)
def test_every_preset_takes_an_augmentation_or_refuses_it_by_name(base, augmentation, small_cluster):
    name = f"{base}+{augmentation}"
    policy = _composed(name)
    if isinstance(policy, ValidationError):
        assert policy.field == "policy"
        assert f"+{augmentation}" in str(policy) and f"{base!r}" in str(policy), str(policy)
        if augmentation == "cassini-joint" and isinstance(make_policy(base), Adjustable):
            assert "per-job placement" in str(policy)  # cluster-wide candidates need one (policies/cassini.py)
        elif augmentation.startswith("cassini"):
            assert not isinstance(make_policy(base), Adjustable)
            assert "no adjusters" in str(policy)
        return
    assert policy.name.endswith(f"+{augmentation}")
    if augmentation.startswith("cassini"):
        assert isinstance(policy, Adjustable) and policy.adjusters[-1].name == augmentation
    jobs = [job(g, job_id=f"a{i}", submit=20.0 * i, iterations=200, model=m)
            for i, (g, m) in enumerate([(1, "resnet18"), (2, "vgg11"), (4, "resnet50"), (2, "alexnet")])]
    sim = Simulator(small_cluster, policy, PerformanceModel(data_stalls=policy.resource_sensitive), round_s=60.0)
    sim.run(jobs)
    assert all(r.state is JobState.COMPLETED for r in sim.core.records.values()), name


def test_the_refused_presets_are_the_ones_with_their_own_pass():
    refused = {n for n in BASES if not isinstance(make_policy(n), Adjustable)}
    assert {"gavel", "crius", "elasticflow"} <= refused
    assert not refused & {"fifo", "tiresias", "dally", "themis", "pollux", "synergy-tune:srtf"}
