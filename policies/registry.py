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
    dally-literal+migrate+worse-half+hysteresis  # the paper's Dally with Halyard's own rules (policies/dally.py)

An augmentation (``AUGMENTATIONS``) is named as a ``+suffix`` on any preset that declares the
capabilities it needs (policies/capabilities.py; a preset without them is refused by name before
anything is composed): Cassini wraps the preset's per-job placement (compatibility-ranked
candidates) and appends its time-shift adjuster (policies/cassini.py says why it takes both).

Today's names (``fifo``, ``tiresias``, ``synergy-tune:srtf``, ...) are presets.
Dally's preset is one policy (its placement-aware preemption needs its ordering and
offers at once, policies/dally.py says why), but its ordering (``nw-sens``) and its
delay scheduling (``delay-scheduling``, auto-tuned timers) are stages any pipeline
may name: ``ordering=nw-sens,placement=synergy-tune``. :func:`make_policy` parses
a name and raises :class:`ValidationError` naming the unknown part.

Every factory is named by module path (``"tiresias:TwoDimensionalLas"``, a module of this package and
an attribute of it) and imported when a policy names it, so ``make_policy("fifo")`` imports FIFO's
stages and not Gavel's scipy, Crius' plan search or Synergy-OPT's ILP: one module's import error or
cost reaches only the policies that use it. The names are spelled out here; tests/test_policy_registry.py
holds them to the modules' own tables (``ORDERINGS``, ``MECHANISMS``, ``DALLY_OPTIONS``).
"""

from __future__ import annotations

import difflib
import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from halyard.datamodel import ValidationError
from halyard.policies.capabilities import Adjustable, HasOrdering, HasPlacement, TakesDallyOptions, require
from halyard.policies.ordering import ORDERINGS, Fifo, Las, Srtf
from halyard.policies.placement import FirstFitConsolidated
from halyard.policies.staged import StagedPolicy
from halyard.policies.stages import AdmitAll, FixedSize, Policy


def resolve(path: str) -> Any:
    """The attribute ``path`` names, ``"module:attribute"`` of this package, its module imported now."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(f"halyard.policies.{module}"), attribute)


def new(path: str, *args: Any, **kwargs: Any) -> Any:
    """``resolve(path)(*args, **kwargs)``: an object of a class (or factory) imported when first made."""
    return resolve(path)(*args, **kwargs)


def lazy(path: str, *args: Any, **kwargs: Any) -> Callable[[], Any]:
    """A factory of no arguments for ``path``, importing nothing until called (a registry's entry)."""
    return functools.partial(new, path, *args, **kwargs)


@dataclass(frozen=True)
class Augmentation:
    """A ``+suffix``: the function (a module path) that applies it, with ``args`` and ``kwargs`` after the
    policy, and the capabilities (policies/capabilities.py) it needs of the policy, checked before the
    module is imported or the policy changed."""

    path: str
    needs: tuple[type, ...] = ()
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def apply(self, suffix: str, policy: Policy) -> Policy:
        require(policy, suffix, self.needs)
        return new(self.path, policy, *self.args, **self.kwargs)


def _synergy_mechanism(name: str) -> Any:
    """A fresh Synergy placement ``name`` (policies/synergy.py MECHANISMS)."""
    return resolve("synergy:MECHANISMS")[name]()


def _cassini_on(preset: str) -> Policy:
    """A fresh ``preset`` with the registry's +cassini (its capability check included)."""
    return AUGMENTATIONS["cassini"].apply("cassini", _PRESETS[preset]())


# Synergy's mechanisms (policies/synergy.py MECHANISMS), stage names and halves of preset names.
SYNERGY_MECHANISMS = (
    "proportional", "synergy-greedy", "synergy-tune", "proportional-every-pass", "synergy-greedy-every-pass",
    "synergy-tune-every-pass", "synergy-tune-keep-gpus", "synergy-tune-raise", "synergy-opt",
    "synergy-opt-every-pass", "synergy-opt-fit-running",
)
# Dally's options (policies/dally.py DALLY_OPTIONS): rules of Halyard's own, off in the paper's presets.
DALLY_OPTIONS = ("migrate", "worse-half", "hysteresis", "lease", "reauction", "no-preemption", "hoard",
                 "staggered", "first-fit", "drop-short-waits", "manual-start", "auction-on-release", "release-delay",
                 "event-leases", "no-rounds")

# One registry per extension point: stage name -> factory.
STAGES: Mapping[str, Mapping[str, Callable[[], object]]] = MappingProxyType({
    "admission": MappingProxyType({"all": AdmitAll, "tenant-quota": lazy("tenancy:TenantQuota"),
                                   "tenant-quota-strict": lazy("tenancy:TenantQuota", borrowing=False)}),
    "ordering": MappingProxyType({**ORDERINGS, "tiresias-2das": lazy("tiresias:TwoDimensionalLas"),
                                  "nw-sens": lazy("dally_stages:NwSensOrdering"),
                                  "themis": lazy("themis:LeasedFinishTimeFairness")}),
    "sizing": MappingProxyType({"fixed": FixedSize, "easyscale-smallest": lazy("easyscale:SmallestProposal")}),
    "placement": MappingProxyType({
        "consolidated": FirstFitConsolidated, "tiresias-skew": lazy("tiresias:SkewConsolidation"),
        "network-agnostic": lazy("gandiva:NetworkAgnostic"), "delay-scheduling": lazy("dally_stages:DelayScheduling"),
        "one-type": lazy("yarn:OneTypeConsolidated"), "easyscale": lazy("easyscale:EasyScalePlacement"),
        "random": lazy("themis:RandomPlacement"),
        **{m: functools.partial(_synergy_mechanism, m) for m in SYNERGY_MECHANISMS}}),
    "adjust": MappingProxyType({"gandiva-migration": lazy("gandiva:ConsolidatingMigration"),
                                "easyscale-homo": lazy("easyscale:easyscale_homo"),
                                "easyscale-heter": lazy("easyscale:easyscale_heter"),
                                "cassini": lazy("cassini:CassiniShifts")}),
    "preempt": MappingProxyType({"priority": lazy("tenancy:PriorityPreemption"),
                                 "quota-reclaim": lazy("tenancy:QuotaReclaim")}),
})
# Augmentations named as a '+suffix' on a preset: name -> (policy -> augmented policy).
# Dally's options (``dally+migrate``, ``dally-manual+worse-half+hysteresis``, ...) are rules of Halyard's
# own, off in the paper's presets (policies/dally.py); they apply to a Dally policy only.
# ``+starvation-guard`` is the public Synergy simulator's rule for SRTF/LAS (policies/ordering.py).
AUGMENTATIONS: Mapping[str, Augmentation] = MappingProxyType({
    "cassini": Augmentation("cassini:augment", (Adjustable,)),
    "cassini-lock": Augmentation("cassini:augment", (Adjustable,), kwargs={"lock": True}),
    "cassini-joint": Augmentation("cassini:augment", (Adjustable, HasPlacement), kwargs={"joint": True}),
    "starvation-guard": Augmentation("ordering:starvation_guard", (HasOrdering,)),
    "srtf-by-speedup": Augmentation("synergy:srtf_by_speedup", (HasOrdering, HasPlacement)),
    **{option: Augmentation("dally:with_option", (TakesDallyOptions,), (option,)) for option in DALLY_OPTIONS},
})


# Dally's presets: name -> (delay timers, the DALLY_OPTIONS its rules switch on).
#
# `dally` is the reading of the authors' evaluation: Dally as their reference simulator
# (aakash-sharma/cluster-sim) runs it, less its mid-lease bids, which hold won GPUs idle ('+hoard', an option).
# At every lease end every lease-ended job gives its GPUs back and bids again with the waiting jobs, never-run
# jobs first, no preemption between lease ends ('reauction'); a lease ends at the job's own instant, not at a
# round boundary ('auction-on-release'), at the end of the iteration event that crosses it ('event-leases'), and
# its auction runs 1 s per released GPU later ('release-delay'), the releases of one instant auctioned together
# (policies/dally_release.py). Beside cluster-sim with only the mid-lease bids removed (its --public-variant
# running-jobs-wait), on the same 60-job inputs, its mean JCT and makespan agree within 5% at 2 and 4 racks,
# batch and Poisson (docs/reproductions/dally-public-comparison.md): the closest of the readings measured.
# 500 jobs on 4 racks, batch (docs/reproductions/dally-reproduction.md, five draws): makespan and average JCT far
# below Tiresias', makespan level with Gandiva's and average JCT above it (the paper has it below both).
# The reading that was the preset before it, with each lease end's jobs released one at a time at round
# boundaries, is `dally-literal+reauction+staggered` (within 5% of cluster-sim at 4 racks only).
# The paper's text alone (§4.3: offers, delay timers, Nw_sens preemption, no lease ends) is
# `dally-literal`, kept unchanged as a named variant.
#
# The rules a reading switches on are idempotent as '+suffixes': `dally+reauction`,
# `dally+auction-on-release+event-leases+release-delay` and the like are `dally` itself, and
# `dally-literal+reauction+auction-on-release+event-leases+release-delay` decides exactly what `dally` decides
# (tests/test_dally_presets.py). Every rule of the set is independent of the timers, so `dally-manual` is the
# same set with the 12 h + 12 h timers.
#
# Halyard's rules on the Nw_sens preemption between lease ends (and '+no-preemption', which switches it off)
# would do nothing on a reading with 'reauction', which preempts nobody between lease ends, as cluster-sim:
# `dally+migrate` is refused, naming `dally-literal+migrate`.
DALLY_CLUSTERSIM_RULES = ("reauction", "auction-on-release", "event-leases", "release-delay")
PREEMPTION_RULES = ("migrate", "worse-half", "hysteresis", "lease", "no-preemption")
DALLY_READINGS: Mapping[str, tuple[str, tuple[str, ...]]] = MappingProxyType({
    "dally": ("dally_timers:AutoTuner", DALLY_CLUSTERSIM_RULES),
    "dally-manual": ("dally_timers:ManualTimers", DALLY_CLUSTERSIM_RULES),
    "dally-literal": ("dally_timers:AutoTuner", ()),
    "dally-manual-literal": ("dally_timers:ManualTimers", ()),
})


def _dally(name: str, timers: str, rules: tuple[str, ...]) -> Policy:
    """The Dally preset ``name``: Dally with ``timers`` and the options ``rules`` switched on, as the
    '+suffixes' of AUGMENTATIONS switch them (so `dally-literal+reauction+auction-on-release+event-leases+release-delay`
    is `dally`), named ``name``."""
    policy = new("dally:Dally", new(timers), name=name)
    for rule in rules:
        policy = AUGMENTATIONS[rule].apply(rule, policy)
    policy.name = name
    return policy


def spelled_out(name: str) -> str:
    """``name`` with a Dally reading's preset spelled as the paper's text and the rules it switches on
    (``dally+hoard`` -> ``dally-literal+reauction+auction-on-release+event-leases+release-delay+hoard``); any
    other name as it is. Two names of
    one policy spell out alike, and a suffix's base is found by cutting the last '+option' off."""
    head, plus, rest = name.partition("+")
    if head not in DALLY_READINGS or head.endswith("-literal"):
        return name
    literal = f"{head}-literal"
    built_in = DALLY_READINGS[head][1]
    options = [o for o in rest.split("+") if o and o not in built_in] if plus else []
    return "+".join([literal, *built_in, *options])


def _staged(name: str, ordering: str, placement: str, adjusters: tuple[str, ...] = ()) -> Callable[[], Policy]:
    """A staged preset of an ordering, a placement and adjusters, each named by module path."""
    return lambda: StagedPolicy(name, new(ordering), placement=new(placement),
                                adjusters=tuple(new(a) for a in adjusters))


_PRESETS: dict[str, Callable[[], Policy]] = {
    "fifo": lambda: StagedPolicy("fifo", Fifo(), placement=FirstFitConsolidated()),
    "srtf": lambda: StagedPolicy("srtf", Srtf(), placement=FirstFitConsolidated()),
    "las": lambda: StagedPolicy("las", Las(), placement=FirstFitConsolidated()),
    # Dally (its own Policy: offers and accept/reject, policies/dally.py) with the auto-tuner of
    # Algorithm 2, and Dally-manual with the paper's 12 h + 12 h timers, each in two readings
    # (DALLY_READINGS below): `dally` / `dally-manual`, the rules the authors' simulator runs, and
    # `dally-literal` / `dally-manual-literal`, the paper's §4.3 text alone. Halyard's own rules are
    # '+migrate', '+worse-half', '+hysteresis', '+lease', ... on any of them (AUGMENTATIONS).
    **{name: functools.partial(_dally, name, timers, rules) for name, (timers, rules) in DALLY_READINGS.items()},
    # Dally's baselines: Tiresias (discretised 2D-LAS, skew-based consolidation) and
    # Gandiva (FIFO, network-agnostic placement, migration to tighter placements).
    "tiresias": _staged("tiresias", "tiresias:TwoDimensionalLas", "tiresias:SkewConsolidation"),
    "gandiva": _staged("gandiva", "ordering:Fifo", "gandiva:NetworkAgnostic", ("gandiva:ConsolidatingMigration",)),
    # EasyScale (§3.4, §5.2; policies/easyscale.py): FIFO, a new job's smallest proposal on the
    # fastest type with room, then greedy scale-out proposals each round, on one GPU type (homo) or
    # mixed types (heter). Its baseline, YARN-CS: FIFO, gang scheduling, one GPU type per job.
    "easyscale-homo": lambda: StagedPolicy(
        "easyscale-homo", Fifo(), sizing=new("easyscale:SmallestProposal"),
        placement=new("easyscale:EasyScalePlacement", new("easyscale:EasyScaleOptions", heterogeneous=False)),
        adjusters=(new("easyscale:easyscale_homo"),)),
    "easyscale-heter": lambda: StagedPolicy(
        "easyscale-heter", Fifo(), sizing=new("easyscale:SmallestProposal"),
        placement=new("easyscale:EasyScalePlacement"), adjusters=(new("easyscale:easyscale_heter"),)),
    "yarn-cs": lazy("yarn:yarn_cs"),
    # Crius (Algorithm 1, its own Policy: policies/crius.py says why) at the paper's search depth 3;
    # FCFS, its baseline, is FIFO with consolidated placement.
    "crius": lazy("crius:Crius", name="crius"),
    # Crius-DDL (§8.5): strict deadlines, early drop; a scheduled job is never suspended.
    "crius-ddl": lazy("crius:Crius", deadlines=True, suspend=False, name="crius-ddl"),
    # Ablation (ours): Crius without suspending opportunistic jobs (docs/crius.md).
    "crius-no-suspend": lazy("crius:Crius", suspend=False, name="crius-no-suspend"),
    # The ablations of §8.6 (Fig. 20): no adaptivity scaling (GPU count fixed), no heterogeneity scaling
    # (a running job keeps its GPU type).
    "crius-na": lazy("crius:Crius", adaptivity=False, name="crius-na"),
    "crius-nh": lazy("crius:Crius", heterogeneity=False, name="crius-nh"),
    "fcfs": lambda: StagedPolicy("fcfs", Fifo(), placement=FirstFitConsolidated()),
    "gavel": lazy("gavel:Gavel"),  # max-throughput LP and rounds (policies/gavel.py)
    # ElasticFlow (deadline admission, drops what it cannot admit) and ElasticFlow-LS (loosened deadlines).
    "elasticflow": lazy("elasticflow:ElasticFlow", loosened=False, name="elasticflow"),
    "elasticflow-ls": lazy("elasticflow:ElasticFlow"),
}
# Synergy (policies/synergy.py): MECHANISM:ORDERING for every mechanism and ordering,
# e.g. synergy-tune:srtf, synergy-greedy:fifo, proportional:las, synergy-opt:ftf.
for _mechanism in SYNERGY_MECHANISMS:
    for _ordering in ORDERINGS:
        _PRESETS[f"{_mechanism}:{_ordering}"] = lazy("synergy:make_synergy", _mechanism, _ordering)


# The Cassini thesis' baselines (§4.4.2, §4.5.1, policies/themis.py): Themis (finish-time fairness
# with 10-minute leases, consolidated placement) and Random placement.
_PRESETS["themis"] = _staged("themis", "themis:LeasedFinishTimeFairness", "placement:FirstFitConsolidated")
_PRESETS["random"] = _staged("random", "ordering:Fifo", "themis:RandomPlacement")
# Pollux (§4.5.1's second baseline; policies/pollux.py): goodput-optimised re-allocation each pass.
_PRESETS["pollux"] = lazy("pollux:Pollux")
# Cassini on the schedulers it augments (§4.4.2): Themis, and beside it Tiresias and Synergy's
# packing (shifts only: a batch placement has no per-job candidates), and Pollux (Po+Cassini).
for _base in ("themis", "tiresias", "synergy-tune:srtf", "pollux"):
    _PRESETS[f"{_base}+cassini"] = functools.partial(_cassini_on, _base)


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
    head, plus, suffixes = text.partition("+")
    if plus and "=" not in text and "," not in text:
        head = head.strip()
        policy = make_policy(head)
        built_in = DALLY_READINGS[head][1] if head in DALLY_READINGS else ()
        for suffix in (s.strip() for s in suffixes.split("+")):
            if suffix in built_in:  # a rule the preset has on already: idempotent (DALLY_READINGS)
                continue
            if suffix in PREEMPTION_RULES and getattr(policy, "reauction", False):
                literal = head if head.endswith("-literal") else f"{head}-literal"
                raise ValidationError(f"+{suffix} in {name!r} is a rule of Dally's Nw_sens preemption between "
                                      f"lease ends, which {policy.name!r} (lease-end re-auction, as the authors' "
                                      f"simulator) does not run; the paper's Dally with it is '{literal}+{suffix}' "
                                      "(policies/registry.py DALLY_READINGS)", field="policy")
            augmentation = AUGMENTATIONS.get(suffix)
            if augmentation is None:
                raise ValidationError(f"unknown augmentation {suffix!r} in {name!r} "
                                      f"(known: {', '.join(sorted(AUGMENTATIONS))})", field="policy")
            policy = augmentation.apply(suffix, policy)
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
        base.ordering = new("tenancy:PriorityFirst", base.ordering)
    return base

