"""on_rack ranks many candidate racks at once (policies/topology.py ``_on_rack_at_once``, issue 38 Deliver 2): the
same rack and the same nodes as filling every candidate rack one by one, on drawn offers of three clusters."""

from __future__ import annotations

import numpy as np
import pytest

from halyard.datamodel import load_cluster
from halyard.policies import topology
from halyard.policies.facts import ClusterShape


@pytest.mark.parametrize("cluster_name", ["philly", "default", "synergy-128"])
def test_racks_ranked_at_once_are_the_racks_filled_one_by_one(cluster_name, monkeypatch):
    cluster = load_cluster(cluster_name)
    shape = ClusterShape(cluster)
    rng = np.random.default_rng(38)
    placed = at_once = 0
    for _ in range(1500):
        busy = rng.random(len(cluster.nodes)) < rng.random()
        avail = np.where(busy, 0, np.minimum(shape.gpus, rng.integers(0, 9, size=len(cluster.nodes))))
        gpus = int(rng.integers(1, 40))
        candidates = int((np.bincount(shape.rack, weights=avail, minlength=shape.n_racks) >= gpus).sum())
        monkeypatch.setattr(topology, "RACKS_ONE_BY_ONE", 0)
        fast = topology.on_rack(avail, shape, gpus)
        monkeypatch.setattr(topology, "RACKS_ONE_BY_ONE", 1 << 30)
        assert fast == topology.on_rack(avail, shape, gpus)
        placed += fast is not None
        at_once += candidates > 1
    assert placed > 300 and at_once > 100


def test_on_machine_on_usable_gpus_arrays_is_the_best_fit_of_the_fits():
    """on_machine answers usable_gpus' int64 arrays with one where and one argmin (issue 38); the answer must be the
    best fit as the fits indexed one by one give it (the general path, which any other array takes): the node with
    the fewest usable GPUs that holds the demand, the lowest such index on ties, or None."""
    rng = np.random.default_rng(38)
    found = missed = 0
    for _ in range(3000):
        avail = rng.integers(0, 9, size=int(rng.integers(1, 400)), dtype=np.int64)
        avail[rng.random(avail.size) < rng.random()] = 0
        gpus = int(rng.integers(1, 10))
        fast = topology.on_machine(avail, gpus)
        fits = np.flatnonzero(avail >= gpus)
        assert fast == (None if not fits.size else [(int(fits[np.argmin(avail[fits])]), gpus)])
        assert fast == topology.on_machine(avail.astype(np.int32), gpus)  # (the general path)
        found += fast is not None
        missed += fast is None
    assert found > 1000 and missed > 300
