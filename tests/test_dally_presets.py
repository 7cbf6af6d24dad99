"""Dally's two readings as presets (policies/registry.py DALLY_READINGS, issue 35 item 2).

``dally`` / ``dally-manual`` are the rules the authors' reference simulator runs (aakash-sharma/cluster-sim,
beside Halyard in docs/reproductions/dally-public-comparison.md): the paper's Dally with ``+reauction``,
``+auction-on-release``, ``+event-leases`` and ``+release-delay`` (CHAIN). ``dally-literal`` /
``dally-manual-literal`` are the paper's §4.3 text. The event logs here hold the preset to what the suffixes
compose, so that the spelled-out chain keeps meaning the preset, and the preset's previous reading,
``dally-literal+reauction+staggered``, stays reachable by that name and decides otherwise.
"""

from __future__ import annotations

import pytest
from factories import job

from halyard.datamodel import ValidationError
from halyard.policies import make_policy
from halyard.scheduling import Simulator

ROUND_S = 60.0  # a lease end every minute of the few hours these jobs run: many re-auctions
# The rules the presets switch on (policies/registry.py DALLY_CLUSTERSIM_RULES), spelled out as suffixes.
CHAIN = "+reauction+auction-on-release+event-leases+release-delay"


def _jobs():
    """Jobs of 1 to 8 GPUs over the small cluster's 2 racks x 2 machines x 4 GPUs, arriving over a few
    minutes, so that some wait, some span machines and lease ends re-auction running jobs."""
    shapes = [(4, "vgg11"), (2, "alexnet"), (6, "resnet18"), (1, "resnet50"), (8, "mobilenetv3"),
              (3, "bert-large"), (4, "vgg11"), (2, "resnet18"), (5, "vgg11"), (2, "resnet50")]
    return [job(g, job_id=f"p{i}", submit=30.0 * i, iterations=400 + 90 * i, model=m)
            for i, (g, m) in enumerate(shapes)]


def _log(name: str, cluster, perf) -> list[tuple]:
    run = Simulator(cluster, make_policy(name), perf, round_s=ROUND_S).run(_jobs())
    return [(e.seq, repr(e.time), e.job_id, e.kind, e.state, e.detail) for e in run.core.log]


@pytest.mark.parametrize(("preset", "literal"), [("dally", "dally-literal"),
                                                  ("dally-manual", "dally-manual-literal")])
def test_the_preset_is_the_literal_reading_with_cluster_sims_lease_rules(small_cluster, perf, preset, literal):
    """The preset decides exactly what the paper's text with cluster-sim's four rules decides (each of them
    applies to the manual timers too), and the preset with its own rules repeated decides it too; the paper's
    text alone, and the previous preset's reading (``+reauction+staggered``), decide otherwise on this workload
    (so the equality is not of two logs that nothing could tell apart)."""
    composed = _log(f"{literal}{CHAIN}", small_cluster, perf)
    assert _log(preset, small_cluster, perf) == composed
    assert _log(f"{preset}+reauction+event-leases", small_cluster, perf) == composed
    assert _log(literal, small_cluster, perf) != composed
    assert _log(f"{literal}+reauction+staggered", small_cluster, perf) != composed
    assert _log(f"{literal}+reauction+auction-on-release", small_cluster, perf) != composed  # each rule acts


def test_the_readings_rules_are_idempotent_suffixes():
    """``dally+reauction``, ``dally+auction-on-release+event-leases+release-delay`` and any order of the
    preset's rules are ``dally`` itself, by name too; another option keeps its suffix in the name."""
    for name in ("dally", "dally+reauction", "dally+auction-on-release", "dally+release-delay+event-leases",
                 f"dally{CHAIN}", "dally+release-delay+reauction"):
        policy = make_policy(name)
        assert policy.name == "dally" and policy.reauction and policy.staggered is None
        assert policy.release is not None and policy.release.events and policy.release.delay
        assert not policy.release.no_rounds and policy.wake_at is not None
        assert not policy.preemption  # cluster-sim preempts nobody between lease ends
    assert make_policy("dally-manual+reauction").name == "dally-manual"
    assert make_policy("dally-manual").release is not None
    assert make_policy(f"dally{CHAIN}+hoard").name == "dally+hoard"
    assert make_policy("dally+hoard").hoard is not None
    # the previous preset's reading is named by its rules; on the preset, +staggered is one more option
    previous = make_policy("dally-literal+reauction+staggered")
    assert previous.reauction and previous.staggered is not None and previous.release is None
    assert make_policy("dally+staggered").name == "dally+staggered"
    literal = make_policy("dally-literal")
    assert not literal.reauction and literal.staggered is None and literal.release is None and literal.preemption
    # what `halyard policies` and GetPolicy show: the readings' stages differ, and say why
    assert ("preemption", "nw-sens") in literal.stages()
    assert ("preemption", "lease-end re-auction every 1 rounds, leases released one at a time") in previous.stages()
    chain = ("lease-end re-auction at each 1-round lease's own end, with the iteration event that crosses it, "
             "auctioned 1 s per released GPU later")
    assert ("preemption", chain) in make_policy("dally").stages()
    assert ("preemption", chain) in make_policy("dally-manual").stages()
    assert ("preemption", f"{chain}, running jobs hoard what they win") in make_policy("dally+hoard").stages()


@pytest.mark.parametrize("option", ["migrate", "worse-half", "hysteresis", "lease", "no-preemption"])
def test_rules_of_the_nw_sens_preemption_are_refused_on_the_reauction_reading(option):
    """They act only through the Nw_sens preemption between lease ends, which cluster-sim's reading has
    not: on ``dally`` they would change nothing, so the name is refused and the paper's reading named."""
    with pytest.raises(ValidationError, match=rf"'dally-literal\+{option}'"):
        make_policy(f"dally+{option}")
    with pytest.raises(ValidationError, match=rf"'dally-manual-literal\+{option}'"):
        make_policy(f"dally-manual+{option}")
    assert make_policy(f"dally-literal+{option}").name == f"dally-literal+{option}"
