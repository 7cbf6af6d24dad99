"""Synergy's packer: the first-fit select reads node by node what the per-node array gives (issue 38).

``Packer.select(best_fit=False)`` (GPU-proportional's and GREEDY's first fit) looks only at the nodes with
enough GPUs free, working each one's usable GPUs out with ``Need.max_gpus_at``; the array of every node's
(``Need.max_gpus``, ``Packer.usable``) is built only when no node holds the job alone. Both must answer alike
for every rule, on any free resources, including nodes that take no work and GPU types a job may not use.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from halyard.datamodel import load_cluster
from halyard.policies.facts import ClusterShape
from halyard.policies.resources import FreeResources
from halyard.policies.synergy_packing import Need, Packer

CLUSTER = load_cluster("crius-64")  # two GPU types, so a job's types can rule nodes out
SHAPE = ClusterShape(CLUSTER)
TYPES = [None, "A10", "A40", frozenset({"A10", "A40"})]


@st.composite
def free_resources(draw) -> FreeResources:
    free = FreeResources(CLUSTER)
    for i, node in enumerate(CLUSTER.nodes):
        taken = draw(st.integers(0, node.gpus))
        free.gpus[i] = node.gpus - taken
        free.gpu_mask[i] = (1 << (node.gpus - taken)) - 1
        free.cpus[i] = draw(st.integers(0, node.cpus))
        free.memory_mb[i] = draw(st.integers(0, node.memory_mb))
        free.schedulable[i] = draw(st.booleans()) or draw(st.booleans())  # (mostly schedulable)
    return free


needs = st.one_of(
    st.just(Need(CLUSTER, None, None, False)),  # GPU-proportional
    st.builds(lambda c, m, cap: Need(CLUSTER, c, m, cap), st.integers(0, 40), st.integers(0, 200_000), st.booleans()),
)


class _View:
    """What the packer reads of a view: the cluster, its shape and its facts' node index."""

    def __init__(self) -> None:
        self.cluster, self.shape = CLUSTER, SHAPE
        index = {n.name: i for i, n in enumerate(CLUSTER.nodes)}
        self.facts = type("Facts", (), {"memo": staticmethod(lambda namespace, key, compute: index)})()


@settings(max_examples=300, deadline=None)
@given(free=free_resources(), need=needs, gpus=st.integers(1, 16), types=st.sampled_from(TYPES))
def test_first_fit_reads_what_the_array_gives(free, need, gpus, types):
    array = need.max_gpus(free, SHAPE)
    assert [need.max_gpus_at(free, SHAPE, i) for i in range(len(CLUSTER.nodes))] == array.tolist()
    packer = Packer(_View(), free)  # type: ignore[arg-type]
    usable = packer.usable(need, types)
    fits = [i for i, a in enumerate(usable.tolist()) if a >= gpus]
    picked = packer.select(need, gpus, types, best_fit=False)
    if fits:
        assert picked == [(fits[0], gpus)]
    else:  # several nodes, or none: the array's own path
        packer._first_fit = lambda *args: None  # type: ignore[method-assign]
        assert picked == packer.select(need, gpus, types, best_fit=False)
