"""``reauction``'s moves in an order that finds each move's GPUs free (policies/dally.py ``_write_moves``).

The rounds are specified by the straightforward version below (the one the policy ran before the holder
index): each round, every pending move whose target GPUs no other pending move still holds migrates, in
order; when none can, the first pending move is preempted and started instead. The indexed version must
write the same plan and the same starts on every drawn re-auction, rings and chains included.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from types import SimpleNamespace

import pytest

from halyard.datamodel import Allocation, NodeAllocation, StagePlan
from halyard.policies.dally import _gpus_of, _node_bits, _write_moves
from halyard.policies.dally_bids import HeldParts
from halyard.policies.facts import ClusterShape
from halyard.policies.placement import build_allocation, usable_gpus
from halyard.policies.plan import Plan
from halyard.policies.resources import FreeResources, gpu_bits
from halyard.policies.view import allocation_of


def _builds_as(free: FreeResources, picked: list[tuple[int, int]], held: Allocation) -> bool:
    """Whether the re-auction reuses ``held`` for a bid of ``picked`` (``HeldParts.builds_as``,
    policies/dally_bids.py)."""
    return HeldParts.builds_as(free, picked, *HeldParts().of(free.cluster, "job", held))


def write_moves_by_rounds(plan: Plan, view, moves: dict[str, Allocation], starts: list) -> None:
    held = {job_id: _gpus_of(allocation_of(view.running[job_id])) for job_id in moves}
    while moves:
        ready = [j for j, a in moves.items() if not any(_gpus_of(a) & held[k] for k in moves if k != j)]
        if not ready:
            ring = next(iter(moves))
            plan.preempt(ring)
            starts.append((ring, moves.pop(ring)))
            continue
        for job_id in ready:
            plan.migrate(job_id, moves.pop(job_id))
    for job_id, allocation in starts:
        plan.start(job_id, allocation)


@dataclass
class Running:
    job_id: str
    allocation: Allocation


def on(gpus: list[tuple[str, int]]) -> Allocation:
    nodes: dict[str, list[int]] = {}
    for node, gpu in gpus:
        nodes.setdefault(node, []).append(gpu)
    return Allocation(tuple(NodeAllocation(n, tuple(sorted(g)), 1, 1000) for n, g in sorted(nodes.items())))


def draw(rng: random.Random) -> tuple[SimpleNamespace, dict[str, Allocation], list]:
    """Running jobs on disjoint GPUs, and a re-auction moving some of them to disjoint targets that may
    overlap what other jobs hold now (chains and rings), plus pending starts."""
    gpus = [(f"n{n}", g) for n in range(rng.randint(1, 6)) for g in range(8)]
    rng.shuffle(gpus)
    running, i = {}, 0
    while i < len(gpus) and rng.random() < 0.9:
        k = rng.choice((1, 1, 2, 4))
        running[f"j{len(running)}"] = Running(f"j{len(running)}", on(gpus[i:i + k]))
        i += k
    targets = [g for g in gpus]
    rng.shuffle(targets)
    moves, t = {}, 0
    for job_id, job in running.items():
        size = len(_gpus_of(job.allocation))
        if rng.random() < 0.7 and t + size <= len(targets):
            moves[job_id] = on(targets[t:t + size])
            t += size
    starts = [(f"new{k}", on(targets[t + k:t + k + 1])) for k in range(min(2, len(targets) - t))]
    return SimpleNamespace(running=running), moves, starts


@pytest.mark.parametrize("seed", range(300))
def test_the_indexed_rounds_write_the_plan_the_rounds_recomputed_write(seed):
    rng = random.Random(seed)
    view, moves, starts = draw(rng)
    expected_plan, expected_starts = Plan(), list(starts)
    write_moves_by_rounds(expected_plan, view, dict(moves), expected_starts)
    plan, got_starts = Plan(), list(starts)
    _write_moves(plan, view, dict(moves), got_starts)
    assert plan.actions == expected_plan.actions
    assert got_starts == expected_starts


def _parts(allocation: Allocation) -> tuple[tuple[int, int, int, int, int], ...]:
    """The re-auction's ledger parts of ``allocation`` (policies/dally_bids.py), node ``nK`` at index K."""
    return tuple((int(p.node[1:]), len(p.gpus), p.cpus, p.memory_mb, gpu_bits(p.gpus)) for p in allocation.nodes)


@pytest.mark.parametrize("seed", range(300))
def test_the_rounds_from_ledger_masks_write_the_plan_the_gpu_pairs_write(seed):
    """The re-auction hands ``_write_moves`` each move's ledger parts (issue 38): its blockers found from the GPU
    bit masks per node must be those of the (node, GPU) pairs, and whether a bid moved (``_node_bits``) what
    ``_gpus_of`` says, on every drawn re-auction."""
    rng = random.Random(seed)
    view, moves, starts = draw(rng)
    expected_plan, expected_starts = Plan(), list(starts)
    write_moves_by_rounds(expected_plan, view, dict(moves), expected_starts)
    parts = {j: (_parts(allocation_of(view.running[j])), _parts(a)) for j, a in moves.items()}
    plan, got_starts = Plan(), list(starts)
    _write_moves(plan, view, dict(moves), got_starts, parts)
    assert plan.actions == expected_plan.actions
    assert got_starts == expected_starts
    for job in view.running.values():
        for other in [*moves.values(), job.allocation]:
            same = _gpus_of(other) == _gpus_of(job.allocation)
            assert (_node_bits(_parts(other)) == _node_bits(_parts(job.allocation))) is same


def test_a_ring_is_broken_by_preempting_its_first_move():
    a, b = on([("n0", 0)]), on([("n0", 1)])
    view = SimpleNamespace(running={"x": Running("x", a), "y": Running("y", b)})
    plan, starts = Plan(), []
    _write_moves(plan, view, {"x": b, "y": a}, starts)  # x and y swap GPUs: neither can move first
    assert [(type(act).__name__, act.job_id) for act in plan.actions] == [("Preempt", "x"), ("Migrate", "y"),
                                                                          ("Start", "x")]


@pytest.mark.parametrize("seed", range(40))
def test_a_retake_reuses_what_it_held_only_when_build_allocation_would_build_it(seed, small_cluster):
    """A lease end's bid that takes back what the job held reuses its allocation unbuilt (policies/dally_bids.py
    ``HeldParts.builds_as``, issue 38): it must say so exactly when ``build_allocation`` gives an equal
    allocation, on drawn free GPUs and held allocations (the one built, or one that differs in GPU ids, CPU,
    memory, a node, logical workers, stages or a time-shift)."""
    rng = random.Random(seed)
    shape = ClusterShape(small_cluster)
    reused = differ = 0
    for _ in range(60):
        free = FreeResources(small_cluster)
        for index in range(len(small_cluster.nodes)):  # some GPUs busy on each node
            node = small_cluster.nodes[index]
            busy = rng.sample(range(node.gpus), rng.randint(0, node.gpus - 1))
            if busy:
                free.take(Allocation((NodeAllocation(node.name, tuple(sorted(busy)), 0, 0),)))
        avail = usable_gpus(free, shape, None)
        nodes = [i for i in range(len(avail)) if avail[i] > 0]
        picked = [(i, rng.randint(1, int(avail[i]))) for i in rng.sample(nodes, min(len(nodes), rng.choice((1, 1, 2))))]
        held = build_allocation(free, picked)
        change = rng.randrange(8)
        part = held.nodes[0]
        if change == 1:
            held = replace(held, nodes=(replace(part, gpus=tuple(g + 1 for g in part.gpus)), *held.nodes[1:]))
        elif change == 2:
            held = replace(held, nodes=(replace(part, cpus=part.cpus + 1), *held.nodes[1:]))
        elif change == 3:
            held = replace(held, nodes=(replace(part, memory_mb=part.memory_mb + 1), *held.nodes[1:]))
        elif change == 4:
            held = held.with_time_shift(rng.choice((0.0, 2.5)))
        elif change == 5:
            held = held.with_workers(held.num_gpus * 2)
        elif change == 6:
            held = replace(held, stages=(StagePlan(held.num_gpus, data=held.num_gpus),))
        elif change == 7 and len(held.nodes) > 1:
            held = replace(held, nodes=held.nodes[::-1])
        assert _builds_as(free, picked, held) == (build_allocation(free, picked) == held)
        reused += _builds_as(free, picked, held)
        differ += not _builds_as(free, picked, held)
    assert reused > 5 and differ > 5
