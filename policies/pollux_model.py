"""Pollux's goodput model and fitness (Qiao et al., OSDI'21, §3-4): pure functions the policy composes.

* **Statistical efficiency** (§3): with the gradient noise scale ``phi_t``, training at batch
  ``M`` instead of the initial ``M0`` makes ``EFFICIENCY_t(M) = (phi_t + M0) / (phi_t + M)`` as
  much progress per sample (:func:`efficiency`). ``phi_t`` grows as training goes on (Pollux
  paper; the reference simulator's per-epoch traces): here it runs geometrically from the model's
  ``phi_start`` to ``phi_end`` over the job's progress (:func:`noise_scale`; our reading of the
  traces, which rise roughly that way, rather than their epoch tables).
* **Goodput** (§3, the goodput): ``GOODPUT_t(a, M) = THROUGHPUT(a, M) x EFFICIENCY_t(M)``, maximised
  over the batch ``M`` the allocation allows (:func:`best_goodput`). THROUGHPUT comes from
  Halyard's performance model (the caller passes it), not from Pollux's fitted step-time model.
* **Fitness** (§4, PolluxSched): the generalised (power) mean of the jobs' speedups with ``p = -1``,
  ``FITNESS_p(A) = (1/J sum_j SPEEDUP_j(A_j)^p)^(1/p)`` (:func:`fitness`), where
  ``SPEEDUP_j(a) = max_M GOODPUT_j(a, M) / max_M GOODPUT_j(a_f, M)`` against the fair share
  ``a_f`` (an exclusive 1/J of the cluster); a job given nothing has speedup 0, which the
  reference simulator floors at ``SPEEDUP_FLOOR`` so the mean stays defined.
* **Re-allocation penalty** (§4, PolluxSched): a job whose allocation changes has its speedup multiplied by
  ``REALLOC_FACTOR_j(delta) = (T_j - R_j delta) / (T_j + delta)`` (floored at 0), ``T_j`` its age,
  ``R_j`` its re-allocations so far, ``delta`` the re-allocation delay (:func:`realloc_factor`).

The per-model noise scales are :data:`NOISE_SCALES`, each with its source; a model without
figures takes :data:`DEFAULT_NOISE` (documented there).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

# §4, PolluxSched: "p = -1" is Pollux's default fairness exponent (the reference simulator's power mean too).
FITNESS_P = -1.0
# The reference simulator adds 1e-3 to every speedup before the power mean (adaptdl
# simulator/pollux.py, Problem._evaluate), so a job given nothing (speedup 0) does not make the
# p = -1 mean undefined, and the mean still falls steeply with every job left out.
SPEEDUP_FLOOR = 1e-3
# The re-allocation delay delta of REALLOC_FACTOR, seconds: the reference simulator's 30 s
# (adaptdl simulator/pollux.py, Problem._evaluate, ``delay = 30``).
REALLOC_DELAY_S = 30.0
# Batch sizes tried per allocation, geometric from M0 to the largest allowed. The reference code
# samples 50 (adaptdl goodput.py, GoodputFunction.optimize, np.geomspace); ours is 8 to keep a pass
# cheap (every (GPUs, batch) pair costs one performance-model timing, memoised).
BATCH_CANDIDATES = 8


@dataclass(frozen=True, slots=True)
class NoiseScale:
    """A model family's gradient noise scale in samples at the start and end of training, and the
    largest global batch Pollux may train it at, as a multiple of the initial batch."""

    phi_start: float
    phi_end: float
    max_batch_scale: float
    source: str

    def __post_init__(self) -> None:
        if not (self.phi_start > 0.0 and self.phi_end > 0.0 and math.isfinite(self.phi_end)):
            raise ValueError(f"noise scales must be positive and finite, got {self.phi_start}, {self.phi_end}")
        if not self.max_batch_scale >= 1.0:
            raise ValueError(f"max_batch_scale must be >= 1, got {self.max_batch_scale}")


_TRACES = "adaptdl simulator/traces/{}/validation-{}.csv (Pollux's reference simulator, commit de25dcc)"
_HOW = ("phi = M0 x grad_var / grad_sqr at the first and last epoch of the initial-batch trace, rounded; "
        "max batch = the largest validated batch over M0 (applications.py: max_batch_size = max(validation))")

# Pollux's six workloads (Table 1), measured in its reference simulator's traces; Halyard's models map
# to the family that trains most like them (:data:`FAMILY_OF`).
NOISE_SCALES: Mapping[str, NoiseScale] = MappingProxyType({
    # ResNet-50 on ImageNet, M0 = 200: 200 x 5.228/1.126 = 928; 200 x 43.55/0.6037 = 14,430; 800/200.
    "imagenet": NoiseScale(928.0, 14_430.0, 4.0, f"{_TRACES.format('imagenet', 200)}; {_HOW}"),
    # ResNet-18 on CIFAR-10, M0 = 256: 256 x 13.94/17.38 = 205; 256 x 0.1391/0.000485 = 73,400; 2048/256.
    "cifar10": NoiseScale(205.0, 73_400.0, 8.0, f"{_TRACES.format('cifar10', 256)}; {_HOW}"),
    # BERT fine-tuning (SQuAD), M0 = 12: 12 x 35.25 = 423; 12 x 93.69 = 1,124; 384/12.
    "bert": NoiseScale(423.0, 1_124.0, 32.0, f"{_TRACES.format('bert', 12)}; {_HOW}"),
    # YOLOv3, M0 = 8: 8 x 0.0812 = 0.65; 8 x 637.3 = 5,099; 128/8.
    "yolov3": NoiseScale(0.65, 5_099.0, 16.0, f"{_TRACES.format('yolov3', 8)}; {_HOW}"),
    # DeepSpeech2, M0 = 160: 160 x 0.693 = 111; the last epochs' grad_sqr is ~1e-10 (noise), so the end
    # value is taken at epoch 20 (160 x 0.0347/0.000102 = 54,500); 640/160.
    "deepspeech2": NoiseScale(111.0, 54_500.0, 4.0, f"{_TRACES.format('deepspeech2', 160)}; {_HOW} "
                                                    "(end at epoch 20, see the comment)"),
    # NeuMF on MovieLens, M0 = 256: 256 x 72.5 = 18,560; 256 x 2.31e5 = 5.9e7; 16384/256.
    "ncf": NoiseScale(18_560.0, 5.9e7, 64.0, f"{_TRACES.format('ncf', 256)}; {_HOW}"),
})
# Halyard catalog models -> the Pollux family whose figures they take (ours: by task and architecture).
FAMILY_OF: Mapping[str, str] = MappingProxyType({
    **{m: "imagenet" for m in ("resnet50", "vgg11", "vgg16", "vgg19", "wide-resnet101-2", "alexnet",
                               "mobilenetv2", "mobilenetv3", "shufflenetv2", "swint")},
    "resnet18": "cifar10",
    **{m: "bert" for m in ("bert-large", "roberta-base", "camembert-base", "xlm", "gpt1", "gpt2-medium",
                           "gpt3-xl", "transformer-xl", "lstm", "gnmt")},
    "yolov3": "yolov3",
    "deepspeech": "deepspeech2", "m5": "deepspeech2",
    "neumf": "ncf",
})
# A model with no family: ImageNet's figures (Pollux's most common workload family and the one most
# Halyard models are), so its batch may grow at most 4x. Documented in docs/pollux.md.
DEFAULT_NOISE = NOISE_SCALES["imagenet"]


def noise_for(model: str) -> NoiseScale:
    """The noise-scale figures of ``model``'s family, or :data:`DEFAULT_NOISE`."""
    family = FAMILY_OF.get(model)
    return DEFAULT_NOISE if family is None else NOISE_SCALES[family]


def noise_scale(noise: NoiseScale, progress: float) -> float:
    """``phi_t`` at ``progress`` (fraction of the job's work done, clipped to [0, 1]): geometric
    from ``phi_start`` to ``phi_end`` (module docstring)."""
    f = min(max(progress, 0.0), 1.0)
    return noise.phi_start * (noise.phi_end / noise.phi_start) ** f


def efficiency(phi: float, m0: float, m: float | Sequence[float]) -> float | list[float]:
    """Pollux §3 (statistical efficiency): ``EFFICIENCY_t(M) = (phi_t + M0) / (phi_t + M)``; 1 at ``M = M0``."""
    if phi < 0.0 or m0 <= 0.0:
        raise ValueError(f"phi must be >= 0 and M0 > 0, got phi={phi!r}, M0={m0!r}")
    if isinstance(m, Sequence):
        return [(phi + m0) / (phi + x) for x in m]
    return (phi + m0) / (phi + m)


def batch_candidates(m0: int, largest: int, count: int = BATCH_CANDIDATES) -> list[int]:
    """Global batches from ``m0`` to ``largest``, geometric, distinct, ascending (``m0`` first)."""
    if largest <= m0 or count < 2:
        return [m0]
    out = sorted({round(m0 * (largest / m0) ** (i / (count - 1))) for i in range(count)})
    return [m for m in out if m0 <= m <= largest]


def best_goodput(throughput: Mapping[int, float], phi: float, m0: int) -> tuple[float, int]:
    """§3's goodput maximised over the batch: ``max_M THROUGHPUT(M) x EFFICIENCY_t(M)`` over the batches
    given (``throughput``: global batch -> samples per second; batches that do not fit are left out),
    and the batch that reaches it (the smallest on a tie). (0, m0) when no batch fits."""
    best, chosen = 0.0, m0
    for m in sorted(throughput):
        g = throughput[m] * (phi + m0) / (phi + m)
        if g > best:
            best, chosen = g, m
    return best, chosen


def realloc_factor(age_s: float, reallocations: int, delay_s: float = REALLOC_DELAY_S) -> float:
    """Pollux §4, PolluxSched: ``REALLOC_FACTOR(delta) = max(T - R delta, 0) / (T + delta)``."""
    if age_s < 0.0 or reallocations < 0 or delay_s <= 0.0:
        raise ValueError(f"age {age_s!r} and re-allocations {reallocations!r} must be >= 0, delay > 0")
    return max(age_s - reallocations * delay_s, 0.0) / (age_s + delay_s)


def fitness(speedups: Sequence[float], p: float = FITNESS_P, floor: float = SPEEDUP_FLOOR) -> float:
    """Pollux §4, PolluxSched: ``(1/J sum_j (SPEEDUP_j + floor)^p)^(1/p)``, the generalised mean (p != 0)."""
    if not speedups:
        raise ValueError("fitness of no jobs is undefined")
    if p == 0.0:
        raise ValueError("p = 0 (the geometric mean) is not Pollux's fitness; give p != 0")
    if any(s < 0.0 for s in speedups):
        raise ValueError(f"speedups must be >= 0, got {list(speedups)}")
    return (sum((s + floor) ** p for s in speedups) / len(speedups)) ** (1.0 / p)
