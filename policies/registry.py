"""Policies by name: presets, and pipelines composed from stages by name.

One registry per extension point (Kubernetes' in-tree registry: name -> factory),
and a compact grammar for a pipeline::

    ordering=las,placement=synergy-tune          # any stage left out takes its default
    tiresias,adjust=gandiva-migration            # a staged preset with stages replaced
    ordering=srtf,adjust=gandiva-migration+...   # several adjusters, in order, joined by '+'
    fifo,priority=first,preempt=priority         # priorities first; lower-priority jobs preempted
    fifo,admission=tenant-quota,preempt=quota-reclaim   # Kueue-style quotas, borrowing, reclaim
    tiresias+cassini                             # a preset with an augmentation appended
    synergy-tune:srtf+cassini, dally+cassini
    dally+migrate+worse-half+hysteresis          # Dally with Halyard's own rules (policies/dally.py)

An augmentation (``AUGMENTATIONS``) is named as a ``+suffix`` on any preset: Cassini
wraps the preset's per-job placement (compatibility-ranked candidates) and appends its
time-shift adjuster (policies/cassini.py says why it takes both).

Today's names (``fifo``, ``tiresias``, ``synergy-tune:srtf``, ...) are presets.
Dally's preset is one policy (its placement-aware preemption needs its ordering and
offers at once, policies/dally.py says why), but its ordering (``nw-sens``) and its
delay scheduling (``delay-scheduling``, auto-tuned timers) are stages any pipeline
may name: ``ordering=nw-sens,placement=synergy-tune``. :func:`make_policy` parses
a name and raises :class:`ValidationError` naming the unknown part.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from types import MappingProxyType

from halyard.datamodel import ValidationError
from halyard.policies.cassini import CassiniShifts, augment
from halyard.policies.crius import Crius
from halyard.policies.dally import (
    DALLY_OPTIONS,
    AutoTuner,
    Dally,
    DelayScheduling,
    ManualTimers,
    NwSensOrdering,
    with_option,
)
from halyard.policies.easyscale import (
    EasyScaleOptions,
    EasyScalePlacement,
    SmallestProposal,
    easyscale_heter,
    easyscale_homo,
)
from halyard.policies.elasticflow import ElasticFlow
from halyard.policies.gandiva import ConsolidatingMigration, NetworkAgnostic
from halyard.policies.gavel import Gavel
from halyard.policies.ordering import ORDERINGS, Fifo, Las, Srtf, starvation_guard
from halyard.policies.placement import FirstFitConsolidated
from halyard.policies.pollux import Pollux
from halyard.policies.staged import StagedPolicy
from halyard.policies.stages import AdmitAll, FixedSize, Policy
from halyard.policies.synergy import MECHANISMS, make_synergy, srtf_by_speedup
from halyard.policies.tenancy import PriorityFirst, PriorityPreemption, QuotaReclaim, TenantQuota
from halyard.policies.themis import LeasedFinishTimeFairness, RandomPlacement
from halyard.policies.tiresias import SkewConsolidation, TwoDimensionalLas
from halyard.policies.yarn import OneTypeConsolidated, yarn_cs

# One registry per extension point: stage name -> factory.
STAGES: Mapping[str, Mapping[str, Callable[[], object]]] = MappingProxyType({
    "admission": MappingProxyType({"all": AdmitAll, "tenant-quota": TenantQuota,
                                   "tenant-quota-strict": lambda: TenantQuota(borrowing=False)}),
    "ordering": MappingProxyType({**ORDERINGS, "tiresias-2das": TwoDimensionalLas, "nw-sens": NwSensOrdering,
                                  "themis": LeasedFinishTimeFairness}),
    "sizing": MappingProxyType({"fixed": FixedSize, "easyscale-smallest": SmallestProposal}),
    "placement": MappingProxyType({"consolidated": FirstFitConsolidated, "tiresias-skew": SkewConsolidation,
                                   "network-agnostic": NetworkAgnostic, "delay-scheduling": DelayScheduling,
                                   "one-type": OneTypeConsolidated, "easyscale": EasyScalePlacement,
                                   "random": RandomPlacement, **MECHANISMS}),
    "adjust": MappingProxyType({"gandiva-migration": ConsolidatingMigration, "easyscale-homo": easyscale_homo,
                                "easyscale-heter": easyscale_heter, "cassini": CassiniShifts}),
    "preempt": MappingProxyType({"priority": PriorityPreemption, "quota-reclaim": QuotaReclaim}),
})
# Augmentations named as a '+suffix' on a preset: name -> (policy -> augmented policy).
# Dally's options (``dally+migrate``, ``dally-manual+worse-half+hysteresis``, ...) are rules of Halyard's
# own, off in the paper's presets (policies/dally.py); they apply to a Dally policy only.
# ``+starvation-guard`` is the public Synergy simulator's rule for SRTF/LAS (policies/ordering.py).
AUGMENTATIONS: Mapping[str, Callable[[Policy], Policy]] = MappingProxyType({
    "cassini": augment,
    "cassini-lock": lambda policy: augment(policy, lock=True),
    "starvation-guard": starvation_guard,
    "srtf-by-speedup": srtf_by_speedup,
    **{option: (lambda policy, o=option: with_option(policy, o)) for option in DALLY_OPTIONS},
})

_PRESETS: dict[str, Callable[[], Policy]] = {
    "fifo": lambda: StagedPolicy("fifo", Fifo(), placement=FirstFitConsolidated()),
    "srtf": lambda: StagedPolicy("srtf", Srtf(), placement=FirstFitConsolidated()),
    "las": lambda: StagedPolicy("las", Las(), placement=FirstFitConsolidated()),
    # Dally as the paper writes it (its own Policy: offers and accept/reject, policies/dally.py) with
    # the auto-tuner of Algorithm 2, and Dally-manual with the paper's 12 h + 12 h timers. Halyard's
    # own rules are '+migrate', '+worse-half', '+hysteresis' and '+lease' on either (AUGMENTATIONS).
    "dally": lambda: Dally(AutoTuner(), name="dally"),
    "dally-manual": lambda: Dally(ManualTimers(), name="dally-manual"),
    # Dally's baselines: Tiresias (discretised 2D-LAS, skew-based consolidation) and
    # Gandiva (FIFO, network-agnostic placement, migration to tighter placements).
    "tiresias": lambda: StagedPolicy("tiresias", TwoDimensionalLas(), placement=SkewConsolidation()),
    "gandiva": lambda: StagedPolicy("gandiva", Fifo(), placement=NetworkAgnostic(),
                                    adjusters=(ConsolidatingMigration(),)),
    # EasyScale (§3.4, §5.2; policies/easyscale.py): FIFO, a new job's smallest proposal on the
    # fastest type with room, then greedy scale-out proposals each round, on one GPU type (homo) or
    # mixed types (heter). Its baseline, YARN-CS: FIFO, gang scheduling, one GPU type per job.
    "easyscale-homo": lambda: StagedPolicy(
        "easyscale-homo", Fifo(), sizing=SmallestProposal(),
        placement=EasyScalePlacement(EasyScaleOptions(heterogeneous=False)), adjusters=(easyscale_homo(),)),
    "easyscale-heter": lambda: StagedPolicy(
        "easyscale-heter", Fifo(), sizing=SmallestProposal(), placement=EasyScalePlacement(),
        adjusters=(easyscale_heter(),)),
    "yarn-cs": lambda: yarn_cs(),
    # Crius (Algorithm 1, its own Policy: policies/crius.py says why) at the paper's search depth 3;
    # FCFS, its baseline, is FIFO with consolidated placement.
    "crius": lambda: Crius(name="crius"),
    # Crius-DDL (§8.5): strict deadlines, early drop; a scheduled job is never suspended.
    "crius-ddl": lambda: Crius(deadlines=True, suspend=False, name="crius-ddl"),
    # Ablation (ours): Crius without suspending opportunistic jobs (docs/crius.md).
    "crius-no-suspend": lambda: Crius(suspend=False, name="crius-no-suspend"),
    # The ablations of §8.6 (Fig. 20): no adaptivity scaling (GPU count fixed), no heterogeneity scaling
    # (a running job keeps its GPU type).
    "crius-na": lambda: Crius(adaptivity=False, name="crius-na"),
    "crius-nh": lambda: Crius(heterogeneity=False, name="crius-nh"),
    "fcfs": lambda: StagedPolicy("fcfs", Fifo(), placement=FirstFitConsolidated()),
    "gavel": lambda: Gavel(),  # max-throughput LP and rounds (policies/gavel.py)
    # ElasticFlow (deadline admission, drops what it cannot admit) and ElasticFlow-LS (loosened deadlines).
    "elasticflow": lambda: ElasticFlow(loosened=False, name="elasticflow"),
    "elasticflow-ls": lambda: ElasticFlow(),
}
# Synergy (policies/synergy.py): MECHANISM:ORDERING for every mechanism and ordering,
# e.g. synergy-tune:srtf, synergy-greedy:fifo, proportional:las, synergy-opt:ftf.
for _mechanism in MECHANISMS:
    for _ordering in ORDERINGS:
        _PRESETS[f"{_mechanism}:{_ordering}"] = (lambda m=_mechanism, o=_ordering: make_synergy(m, o))


# The Cassini thesis' baselines (§4.4.2, §4.5.1, policies/themis.py): Themis (finish-time fairness
# with 10-minute leases, consolidated placement) and Random placement.
_PRESETS["themis"] = lambda: StagedPolicy("themis", LeasedFinishTimeFairness(), placement=FirstFitConsolidated())
_PRESETS["random"] = lambda: StagedPolicy("random", Fifo(), placement=RandomPlacement())
# Pollux (§4.5.1's second baseline; policies/pollux.py): goodput-optimised re-allocation each pass.
_PRESETS["pollux"] = lambda: Pollux()
# Cassini on the schedulers it augments (§4.4.2): Themis, and beside it Tiresias and Synergy's
# packing (shifts only: a batch placement has no per-job candidates), and Pollux (Po+Cassini).
for _base in ("themis", "tiresias", "synergy-tune:srtf", "pollux"):
    _PRESETS[f"{_base}+cassini"] = (lambda b=_base: augment(_PRESETS[b]()))


SUGGESTIONS = 3  # close names offered for a misspelt one (difflib's default cutoff, 0.6, decides "close")
# Offered when no name is close: the presets a newcomer most likely means (one per family).
COMMON_PRESETS = ("fifo", "srtf", "las", "tiresias", "gandiva", "dally", "synergy-tune:srtf", "easyscale-heter",
                  "crius", "themis", "pollux")


def did_you_mean(word: str, names: list[str]) -> str:
    """``did you mean 'fifo'? `` for a misspelt name, or a short list of common presets when nothing is
    close: never all of them (the full list of presets is about 2,000 characters)."""
    close = difflib.get_close_matches(word, names, n=SUGGESTIONS)
    if close:
        return f"did you mean {' or '.join(repr(n) for n in close)}? "
    return f"common presets: {', '.join(COMMON_PRESETS)}; "


def policy_names() -> list[str]:
    """The presets; any pipeline of registered stages is a name too (:func:`make_policy`)."""
    return sorted(_PRESETS)


def stage_names(kind: str) -> list[str]:
    return sorted(STAGES[kind])


def _stage(kind: str, name: str) -> object:
    try:
        return STAGES[kind][name]()
    except KeyError:
        raise ValidationError(f"unknown {kind} stage {name!r} (known: {', '.join(stage_names(kind))})",
                              field="policy") from None


def make_policy(name: str) -> Policy:
    """A fresh policy for a preset name or a pipeline (see the module docstring)."""
    text = name.strip()
    if text in _PRESETS:
        return _PRESETS[text]()
    base, plus, suffixes = text.partition("+")
    if plus and "=" not in text and "," not in text:
        policy = make_policy(base)
        for suffix in suffixes.split("+"):
            augmentation = AUGMENTATIONS.get(suffix.strip())
            if augmentation is None:
                raise ValidationError(f"unknown augmentation {suffix.strip()!r} in {name!r} "
                                      f"(known: {', '.join(sorted(AUGMENTATIONS))})", field="policy")
            policy = augmentation(policy)
        return policy
    if "=" not in text and "," not in text:
        raise ValidationError(f"unknown policy {name!r}; {did_you_mean(text, policy_names())}`halyard policies` "
                              f"lists the {len(_PRESETS)} presets and the stages a pipeline such as "
                              "ordering=las,placement=synergy-tune can name", field="policy")
    parts = [p.strip() for p in text.split(",")]
    base = StagedPolicy(text, Fifo())
    if "=" not in parts[0]:
        preset = _PRESETS.get(parts[0])
        built = preset() if preset is not None else None
        if not isinstance(built, StagedPolicy):
            why = "is not a staged preset" if built is not None else "is not a preset"
            staged = ", ".join(n for n in policy_names() if not n.startswith("dally"))
            raise ValidationError(f"{parts[0]!r} {why}; a pipeline starts from a staged preset ({staged}) "
                                  f"or from stages", field="policy")
        base = built
        base.name = text
        parts = parts[1:]
    seen: set[str] = set()
    priority_first = False
    for part in parts:
        kind, sep, value = (s.strip() for s in part.partition("="))
        if not sep or not value:
            raise ValidationError(f"pipeline part {part!r} is not STAGE=NAME", field="policy")
        if kind not in STAGES and kind != "priority":
            raise ValidationError(f"unknown stage kind {kind!r} in {part!r} (known: {', '.join(STAGES)}, priority)",
                                  field="policy")
        if kind in seen:
            raise ValidationError(f"stage {kind!r} is given twice", field="policy")
        seen.add(kind)
        if kind == "adjust":
            base.adjusters = tuple(_stage(kind, v.strip()) for v in value.split("+"))  # type: ignore[misc]
        elif kind == "preempt":
            base.preemptions = tuple(_stage(kind, v.strip()) for v in value.split("+"))  # type: ignore[misc]
        elif kind == "priority":
            if value != "first":
                raise ValidationError(f"priority={value!r}: the only choice is 'first' (a higher JobSpec.priority "
                                      "goes first, the ordering breaks ties)", field="policy")
            priority_first = True
        else:
            setattr(base, kind, _stage(kind, value))
    if priority_first:  # after the ordering is known, whichever part named it
        base.ordering = PriorityFirst(base.ordering)
    return base

