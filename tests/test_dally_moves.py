"""``reauction``'s moves in an order that finds each move's GPUs free (policies/dally.py ``_write_moves``).

The rounds are specified by the straightforward version below (the one the policy ran before the holder
index): each round, every pending move whose target GPUs no other pending move still holds migrates, in
order; when none can, the first pending move is preempted and started instead. The indexed version must
write the same plan and the same starts on every drawn re-auction, rings and chains included.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from halyard.datamodel import Allocation, NodeAllocation
from halyard.policies.dally import _gpus_of, _write_moves
from halyard.policies.plan import Plan
from halyard.policies.view import allocation_of


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


def test_a_ring_is_broken_by_preempting_its_first_move():
    a, b = on([("n0", 0)]), on([("n0", 1)])
    view = SimpleNamespace(running={"x": Running("x", a), "y": Running("y", b)})
    plan, starts = Plan(), []
    _write_moves(plan, view, {"x": b, "y": a}, starts)  # x and y swap GPUs: neither can move first
    assert [(type(act).__name__, act.job_id) for act in plan.actions] == [("Preempt", "x"), ("Migrate", "y"),
                                                                          ("Start", "x")]
