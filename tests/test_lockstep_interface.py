"""Replay's lockstep sits behind one interface (controlplane/replay_lockstep.py): the control plane calls
:class:`Lockstep` and never asks whether it runs in lockstep. These tests hold the two sides of that
seam together: both implementations answer every member of the interface with its signature, and a
live control plane gets the no-op while replay's gets the lockstep."""

from __future__ import annotations

import inspect

import pytest

from halyard.clock import ManualClock
from halyard.controlplane.replay_lockstep import Lockstep, NoLockstep, ReplayLockstep
from halyard.controlplane.service import ControlPlane
from halyard.controlplane.store import SqliteStore
from halyard.datamodel import parse_cluster
from halyard.policies import make_policy
from halyard.scheduling.timing import performance_model_for
from halyard.testing.cluster import small_cluster_toml


def _members(cls: type) -> dict[str, object]:
    names = [n for n in vars(Lockstep) if not n.startswith("_")] + list(Lockstep.__annotations__)
    return {n: getattr(cls, n, None) for n in names}


@pytest.mark.parametrize("impl", [NoLockstep, ReplayLockstep])
def test_each_lockstep_answers_the_whole_interface_with_its_signatures(impl: type) -> None:
    wanted = _members(Lockstep)
    assert len(wanted) >= 10  # the interface was read, not an empty list
    for name, member in wanted.items():
        got = getattr(impl, name, None)
        assert got is not None, f"{impl.__name__} lacks {name}"
        if callable(member):
            assert inspect.iscoroutinefunction(got) == inspect.iscoroutinefunction(member), name
            assert list(inspect.signature(got).parameters) == list(inspect.signature(member).parameters), name
        else:
            assert isinstance(got, bool), name


@pytest.mark.parametrize(("lockstep", "impl"), [(False, NoLockstep), (True, ReplayLockstep)])
async def test_a_live_control_plane_gets_the_no_op_and_replay_the_lockstep(lockstep: bool, impl: type) -> None:
    toml = small_cluster_toml(1)
    cluster = parse_cluster(toml)
    policy = make_policy("fifo")
    cp = ControlPlane(cluster, policy, performance_model_for(policy), ManualClock(), SqliteStore(":memory:"),
                      cluster_toml=toml, lockstep=lockstep)
    assert type(cp.sync) is impl
    assert cp.sync.arrival_time(7.0, 3.0) == (7.0 if lockstep else 3.0)  # replay keeps its client's stamp
