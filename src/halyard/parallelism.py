"""Which parallel plans a job can take: the helpers the policies and the emulator share.

- Crius/Alpa stage plans (papers/crius-cell-scheduling.txt §6.1): :func:`pipeline_depths`,
  :func:`stage_splits` and :func:`uniform_plans` enumerate the DP x TP x PP plans of a Cell; the
  Crius and adaptive policies search them, the emulator costs them (halyard.emulator.parallel).
- EasyScale (papers/easyscale-elastic-training.txt §3.2-§3.4): its analytical plan model (Eq. 1),
  the companion module's EST mapping and the model scan that keeps D2-costly models on one GPU type;
  the EasyScale policy plans with them, the emulator charges determinism with the same model list
  (halyard.emulator.elastic.determinism_factor).

One home below both, so that a policy imports nothing of the emulator and the two never disagree
on what a plan is. Imports nothing but the data model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from halyard.datamodel import StagePlan


def pipeline_depths(gpus: int, layers: int) -> tuple[int, ...]:
    """Pipeline stage counts a plan of ``gpus`` GPUs considers: 1, 2, 4, ... up to ``gpus`` and the
    model's layers (Crius §6.1: "log N_G choices ranging from 1 to N_G"; Alpa's inter-operator pass
    slices the layers into power-of-two submeshes)."""
    out, s = [], 1
    while s <= gpus and s <= max(layers, 1):
        out.append(s)
        s *= 2
    return tuple(out)


def stage_splits(gpus: int) -> list[StagePlan]:
    """Every data x tensor split of one stage of ``gpus`` GPUs, least tensor degree first."""
    return [StagePlan(gpus, data=gpus // t, tensor=t) for t in range(1, gpus + 1) if gpus % t == 0]


def uniform_plans(gpus: int, layers: int) -> list[tuple[StagePlan, ...]]:
    """Plans of ``S`` equal stages of ``data x tensor`` GPUs, ``S`` in :func:`pipeline_depths` dividing
    ``gpus``: fewest stages first, then least tensor degree. A model without layer figures
    (``layers`` <= 0) has only data parallelism."""
    if layers <= 0:
        return [(StagePlan(gpus, data=gpus, tensor=1),)]
    return [(split,) * s for s in pipeline_depths(gpus, layers) if gpus % s == 0 for split in stage_splits(gpus // s)]


# ---------------------------------------------------------------- EasyScale
@dataclass(frozen=True, slots=True)
class PlanThroughput:
    """EasyScale Eq. 1: mini-batches per second of a plan, its waste and overload factor."""

    throughput: float
    waste: float
    overload: float
    ests: int
    ests_per_gpu: Mapping[str, int] | None = None  # A_i, set by :func:`best_est_mapping`

    @property
    def steps_per_s(self) -> float:
        """Global steps per second: ``1 / f_overload`` (a step is every EST's local step)."""
        return 1.0 / self.overload

    def waste_fraction(self, gpus: Mapping[str, int], capability: Mapping[str, float]) -> float:
        """Waste over the GPUs' whole capability ``sum_i N_i C_i``: what the artifact's 0.30
        threshold is compared against."""
        return self.waste / sum(n * capability[t] for t, n in gpus.items() if n > 0)


def easyscale_plan_throughput(gpus: Mapping[str, int], capability: Mapping[str, float],
                              ests_per_gpu: Mapping[str, int], max_p: int, *, per_gpu: bool = False
                              ) -> PlanThroughput:
    """EasyScale Eq. 1a-1d for ``N_i`` GPUs of type i (``gpus``), each doing ``C_i``
    mini-batches per second (``capability``) and holding ``A_i`` ESTs (``ests_per_gpu``):

        nEST = sum_i N_i A_i >= maxP                                   (1a)
        f_overload = max_{i, N_i > 0} A_i / C_i                        (1b)
        waste = sum_{i, N_i > 0} (C_i - A_i / f_overload) + (nEST - maxP) / f_overload   (1c)
        throughput = sum_i N_i C_i - waste                             (1d)

    With ``per_gpu=False`` (1c) is applied as printed: the per-type term is counted
    once per GPU type, not per GPU. That is an erratum: every one of the ``N_i`` GPUs
    of an under-loaded type idles ``C_i - A_i / f`` of its capability, so the sum must
    weigh each type's term by ``N_i``. Printed, 2 V100 (C=4) and 2 T4 (C=2) with
    A=(3, 1) and maxP=8 give 11.33 mini-batches/s; the step really takes
    ``f_overload`` = 0.75 s for 8 ESTs, 10.67/s. ``per_gpu=True`` is the corrected
    form, which reduces to ``throughput = maxP / f_overload`` (the intra-job
    scheduler uses it, :func:`best_est_mapping`).
    """
    used = [t for t, n in gpus.items() if n > 0]
    if not used:
        raise ValueError("a plan needs at least one GPU")
    n_est = sum(gpus[t] * ests_per_gpu.get(t, 0) for t in used)
    if n_est < max_p:
        raise ValueError(f"the plan holds {n_est} ESTs, fewer than maxP = {max_p} (Eq. 1a)")
    overload = max(ests_per_gpu.get(t, 0) / capability[t] for t in used)
    weight = {t: gpus[t] if per_gpu else 1 for t in used}
    waste = (sum(weight[t] * (capability[t] - ests_per_gpu.get(t, 0) / overload) for t in used)
             + (n_est - max_p) / overload)
    throughput = sum(gpus[t] * capability[t] for t in used) - waste
    return PlanThroughput(throughput=throughput, waste=waste, overload=overload, ests=n_est)


def best_est_mapping(gpus: Mapping[str, int], capability: Mapping[str, float], max_p: int) -> PlanThroughput:
    """The companion module's plan for one GPU set (EasyScale §3.4): the per-type EST
    counts ``A_i`` that minimise ``f_overload`` (Eq. 1b) subject to Eq. 1a, every GPU
    running at least one EST, scored by the corrected Eq. 1c-1d.

    ``f`` only takes the values ``a / C_i``; at a given ``f`` each type can hold
    ``floor(f C_i)`` ESTs per GPU without becoming the bottleneck, so the smallest
    candidate ``f`` whose capacities add up to ``maxP`` is optimal. The returned
    ``ests_per_gpu`` is that capacity (``nEST >= maxP``); :func:`spread_ests` hands
    out exactly ``maxP``.
    """
    used = sorted(t for t, n in gpus.items() if n > 0)
    if not used:
        raise ValueError("a plan needs at least one GPU")
    total = sum(gpus[t] for t in used)
    if total > max_p:
        raise ValueError(f"{total} GPUs cannot each run one of maxP = {max_p} ESTs")
    floor_f = max(1.0 / capability[t] for t in used)  # every GPU runs >= 1 EST
    candidates = sorted({a / capability[t] for t in used for a in range(1, max_p + 1)
                         if a / capability[t] >= floor_f * (1 - 1e-12)})
    for f in candidates:
        per = {t: max(1, math.floor(f * capability[t] * (1 + 1e-12))) for t in used}
        if sum(gpus[t] * per[t] for t in used) >= max_p:
            return _plan_with(gpus, capability, per, max_p)
    raise AssertionError("unreachable: f = maxP / min C_i always covers maxP")


def _plan_with(gpus: Mapping[str, int], capability: Mapping[str, float], per: Mapping[str, int],
               max_p: int) -> PlanThroughput:
    plan = easyscale_plan_throughput(gpus, capability, per, max_p, per_gpu=True)
    return PlanThroughput(plan.throughput, plan.waste, plan.overload, plan.ests, dict(per))


def spread_ests(gpu_types: Sequence[str], capacity: Mapping[str, int], capability: Mapping[str, float],
                max_p: int) -> list[int]:
    """Exactly ``maxP`` ESTs over GPUs of ``gpu_types`` (in order), at most ``capacity[t]`` on a GPU
    of type t (the plan's ``A_i``): fill every GPU to its capacity, then take the surplus
    (``nEST - maxP``, the over-provisioning of Eq. 1a) back one EST at a time from the GPU whose
    local steps take longest (``A / C`` largest; ties: the later GPU), which never raises the step time."""
    counts = [capacity[t] for t in gpu_types]
    surplus = sum(counts) - max_p
    if surplus < 0:
        raise ValueError(f"capacities hold {sum(counts)} ESTs, fewer than maxP = {max_p}")
    for _ in range(surplus):
        g = max((i for i in range(len(counts)) if counts[i] > 1),
                key=lambda i: (counts[i] / capability[gpu_types[i]], i))
        counts[g] -= 1
    return counts


D2_COSTLY_MODELS = frozenset({
    # §5.1.3's second category, by name:
    "shufflenetv2", "resnet50", "vgg19", "yolov3",
    # the catalog's other convolution networks, by the paper's criterion (§3.3: models that rely on
    # hardware-specific convolution kernels): an extension, not a measured list
    "alexnet", "resnet18", "mobilenetv2", "mobilenetv3", "vgg11", "m5",
})
"""Models for which D2 costs :data:`DETERMINISM_D2_OVERHEAD`; EasyScale keeps them on one GPU type (§3.3)."""


def needs_homogeneous(model: str) -> bool:
    """EasyScale's model scan (§3.3): a model that relies on hardware-specific kernels trains on
    homogeneous GPUs only, because D2 would cost it :data:`~halyard.emulator.elastic.DETERMINISM_D2_OVERHEAD`."""
    return model in D2_COSTLY_MODELS
