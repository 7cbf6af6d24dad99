"""Cassini's compatibility math (§4.3, Table 4.1, Eq. 4.5) and Algorithms 1-2 (§4.4)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halyard.policies.cassini_math import (
    ANGLES_PER_ITERATION,
    AffinityGraph,
    bfs_time_shifts,
    circle_demand,
    edge_weights,
    link_score,
    score_candidate,
    select_candidate,
    solve_link,
    unified_perimeter_s,
)

C = 10.0


@dataclass(frozen=True)
class Ph:
    duration_s: float
    demand_gbyte_s: float = 0.0


@dataclass(frozen=True)
class Prof:
    phases: tuple[Ph, ...]


def dp(iteration: float, up: float, demand: float = C) -> Prof:
    """Data parallel (Fig. 4.1a): Down, then Up at the end of the iteration."""
    return Prof((Ph(iteration - up), Ph(up, demand)))


def test_fig_4_5_unified_circle_of_40_and_60_ms_is_120():
    """§4.3.2: jobs of 40 ms and 60 ms share a circle of LCM(40, 60) = 120 units; j1 repeats 3 times on it."""
    assert unified_perimeter_s([0.040, 0.060]) == pytest.approx(0.120)
    j1 = dp(0.040, 0.008)
    arcs = circle_demand(j1, 0.120, 120)
    assert (arcs > 0).sum() == 3 * 8  # three Up phases of 8 ms on the 120-arc circle


def test_fig_4_5_rotation_makes_the_pair_fully_compatible():
    """§4.3.2: unrotated, their Up phases meet (score < 1); a rotation gives score 1 (Table 4.1), and the
    time-shift of Eq. 4.5 lies within the rotated job's iteration."""
    j1, j2 = dp(0.040, 0.008), dp(0.060, 0.008)
    assert link_score([j1, j2], C, [0.0, 0.0]) < 1.0
    sol = solve_link([j1, j2], C)
    assert sol.score == pytest.approx(1.0)
    assert sol.perimeter_s == pytest.approx(0.120)
    assert sol.shifts_s[0] == 0.0 and 0.0 < sol.shifts_s[1] < 0.060
    assert link_score([j1, j2], C, sol.shifts_s) == pytest.approx(1.0)


def test_fully_compatible_and_fully_incompatible_extremes():
    """Table 4.1: two jobs Up half the iteration at the link's capacity interleave fully (score 1 at a
    half-iteration shift, 0.5 unshifted); two jobs Up the whole iteration at C score 0 whatever the
    rotation; heavier demand scores negative."""
    half = dp(1.0, 0.5)
    sol = solve_link([half, half], C)
    assert sol.score == pytest.approx(1.0) and sol.shifts_s[1] == pytest.approx(0.5, abs=1.0 / ANGLES_PER_ITERATION)
    assert link_score([half, half], C, [0.0, 0.0]) == pytest.approx(0.5)
    always = Prof((Ph(1.0, C),))
    assert solve_link([always, always], C).score == pytest.approx(0.0)
    heavy = Prof((Ph(1.0, 3 * C),))
    assert solve_link([heavy, heavy], C).score == pytest.approx(1 - 5)


def test_three_jobs_that_fit_a_third_each_interleave():
    """More than two jobs (coordinate ascent): three Up-for-a-third jobs find score 1."""
    third = dp(0.9, 0.3)
    sol = solve_link([third, third, third], C)
    assert sol.score == pytest.approx(1.0)


def test_loop_detection_algorithm_2_line_13():
    """Two jobs that share two links form a loop j1-l1-j2-l2-j1; a chain does not."""
    assert AffinityGraph.of({"a": ["l1", "l2"], "b": ["l1", "l2"]}).has_loop()
    assert not AffinityGraph.of({"a": ["l1"], "b": ["l1", "l2"], "c": ["l2"]}).has_loop()
    # links carrying one job are not in V (Algorithm 2 line 7), so they cannot close a loop
    assert not AffinityGraph.of({"a": ["l1", "n1"], "b": ["l1", "n2"]}).has_loop()


def test_algorithm_1_fig_4_8_path_signs():
    """Eqs. 4.7-4.9: t_j1 = 0, t_j2 = (-t^l1_j1 + t^l1_j2) mod iter_j2,
    t_j3 = (t_j2 - t^l2_j2 + t^l2_j3) mod iter_j3."""
    graph = AffinityGraph.of({"j1": ["l1"], "j2": ["l1", "l2"], "j3": ["l2"]})
    w = {("j1", "l1"): 0.3, ("j2", "l1"): 0.1, ("j2", "l2"): 0.05, ("j3", "l2"): 0.4}
    iters = {"j1": 1.0, "j2": 1.0, "j3": 0.5}
    t = bfs_time_shifts(graph, w, iters)
    assert t["j1"] == 0.0
    assert t["j2"] == pytest.approx((-0.3 + 0.1) % 1.0)
    assert t["j3"] == pytest.approx((t["j2"] - 0.05 + 0.4) % 0.5)


@st.composite
def forests(draw) -> dict[str, list[str]]:
    """A random loop-free job/link graph: each new link joins one existing job to new ones."""
    jobs = ["j0"]
    links: dict[str, list[str]] = {}
    for li in range(draw(st.integers(1, 5))):
        anchor = draw(st.sampled_from(jobs))
        new = [f"j{len(jobs) + i}" for i in range(draw(st.integers(1, 2)))]
        jobs += new
        links[f"l{li}"] = [anchor, *new]
    out: dict[str, list[str]] = {j: [] for j in jobs}
    for link, members in links.items():
        for j in members:
            out[j].append(link)
    return out


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_eq_4_6_holds_on_every_link_of_a_loop_free_graph(data):
    """Theorem 1 / Eq. 4.6: with equal iteration times (so mod iter = mod p^l), for every pair on every
    link, (t_a - t_b) mod p = (t^l_a - t^l_b) mod p."""
    job_links = data.draw(forests())
    graph = AffinityGraph.of(job_links)
    assert not graph.has_loop()
    p = 1.0
    w = {(j, link): data.draw(st.floats(0.0, 0.999)) for link, js in graph.links.items() for j in js}
    t = bfs_time_shifts(graph, w, dict.fromkeys(graph.jobs, p))
    assert set(t) == set(graph.jobs)  # uniqueness: every job exactly one shift
    for link, js in graph.links.items():
        for a in js:
            for b in js:
                lhs = (t[a] - t[b]) % p
                rhs = (w[(a, link)] - w[(b, link)]) % p
                assert min(abs(lhs - rhs), p - abs(lhs - rhs)) < 1e-9


def test_algorithm_1_keeps_each_links_best_score_with_mixed_iteration_times():
    """Line 17's modulo is the job's own iteration, which keeps every link's pattern (a job repeats every
    iteration): the unique shifts score on each link what Table 4.1 found for it."""
    a, b, c = dp(0.040, 0.008), dp(0.060, 0.008), dp(0.040, 0.020)
    profiles = {"a": a, "b": b, "c": c}
    job_links = {"a": ["l1"], "b": ["l1", "l2"], "c": ["l2"]}
    scored = score_candidate(job_links, lambda link, jobs: solve_link([profiles[j] for j in jobs], C))
    t = bfs_time_shifts(scored.graph, edge_weights(scored), {j: sum(p.duration_s for p in profiles[j].phases)
                                                             for j in profiles})
    for link, jobs in scored.graph.links.items():
        assert link_score([profiles[j] for j in jobs], C, [t[j] for j in jobs]) == pytest.approx(
            scored.solutions[link].score)


def test_algorithm_2_never_chooses_a_candidate_with_a_loop():
    """Lines 13-15 and 24-25: a looped candidate is discarded even when it would score higher; among
    the rest the best mean compatibility wins, ties keep the base order."""
    half, always = dp(1.0, 0.5), Prof((Ph(1.0, C),))
    profiles = {"x": half, "y": half, "z": always}

    def solve(link, jobs):
        return solve_link([profiles[j] for j in jobs], C)

    looped = score_candidate({"x": ["l1", "l2"], "y": ["l1", "l2"]}, solve)  # perfect score, but a loop
    bad = score_candidate({"x": ["l1"], "z": ["l1"]}, solve)
    good = score_candidate({"x": ["l1"], "y": ["l1"]}, solve)
    alone = score_candidate({"x": ["l1"], "y": ["l2"]}, solve)
    assert looped.score is None
    assert select_candidate([looped, bad, good]) == 2
    assert select_candidate([looped]) is None
    assert select_candidate([alone, good]) == 0  # both 1.0: the base policy's first stays
