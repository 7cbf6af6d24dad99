"""Synergy's production-derived synthetic trace (Mohan et al., OSDI '22, §5.1).

Recipe (``papers/synergy-multi-resource-scheduling.txt``, "Traces", and the
authors' simulator ``msr-fiddle/synergy`` ``simulator/helpers/utils.py``):

* **Duration** on the GPU-proportional allocation: ``10**x`` minutes, ``x ~ U[1.5, 3]``
  with probability 0.8, else ``x ~ U[3, 4]`` (``get_gavel_like_iter``; the same as
  Gavel's ``60 * 10**U`` seconds, REFERENCE-NUMBERS "Gavel trace generator").
* **Arrival**: a Poisson process at ``rate_per_hour`` (exponential gaps), or all
  jobs at t = 0 for a *static* trace (``rate_per_hour == 0``).
* **Model**: a task (image, language, speech) drawn with the *split* percentages,
  then a model of that task uniformly, from the paper's Table 4.
* **GPU demand**: 1 GPU, or with ``multi_gpu`` 1/2/4/8 GPUs with probability
  0.70/0.10/0.15/0.05 (Synergy's ``get_job_gpu_demand`` and Gavel's generator agree).
  The paper's multi-GPU traces reach 16 GPUs only because their demands are taken
  from Philly, capped at 16 (``parse_philly_trace_full.py``); the synthetic
  generator never draws 16, and neither does this one.

Each attribute has its own random stream (spawned from ``default_rng(seed)``),
so e.g. changing ``rate_per_hour`` rescales the arrival times and leaves every
job's model, duration and GPU count unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

from halyard.datamodel import JobSpec, ValidationError

# Synergy Table 4 ("Models used in this work"), by task. The names are the ones
# the performance model's catalog uses.
SYNERGY_IMAGE_MODELS: tuple[str, ...] = ("shufflenetv2", "alexnet", "resnet18", "mobilenetv2", "resnet50")
SYNERGY_LANGUAGE_MODELS: tuple[str, ...] = ("gnmt", "lstm", "transformer-xl")
SYNERGY_SPEECH_MODELS: tuple[str, ...] = ("m5", "deepspeech")
# Task order of a split: (image, language, speech), as in Synergy §5 "Models".
SYNERGY_TASKS: tuple[str, ...] = ("image", "language", "speech")
SYNERGY_TASK_MODELS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "image": SYNERGY_IMAGE_MODELS,
    "language": SYNERGY_LANGUAGE_MODELS,
    "speech": SYNERGY_SPEECH_MODELS,
})
# Default split (image, language, speech) in percent: REFERENCE-NUMBERS, Synergy section
# (the artifact's default); the paper's experiments also use (30,60,10) and (60,30,10).
SYNERGY_DEFAULT_SPLIT: tuple[int, int, int] = (20, 70, 10)

# Duration: 10**x minutes (Synergy §5.1 "Duration"; Gavel 60 x 10^U s).
DURATION_UNIT_S = 60.0  # x is an exponent of minutes
DURATION_SHORT_PROB = 0.8  # probability that x ~ U[1.5, 3]
DURATION_SHORT_EXPONENT = (1.5, 3.0)
DURATION_LONG_EXPONENT = (3.0, 4.0)

# Multi-GPU demand: Synergy simulator/helpers/utils.py get_job_gpu_demand and the
# Gavel trace generator (REFERENCE-NUMBERS "Gavel trace generator").
GPU_DEMAND_CHOICES: tuple[int, ...] = (1, 2, 4, 8)
GPU_DEMAND_PROBS: tuple[float, ...] = (0.70, 0.10, 0.15, 0.05)

SECONDS_PER_HOUR = 3600.0
_SPLIT_TOTAL = 100.0  # a split is in percent
_SPLIT_TOLERANCE = 1e-9


def task_probabilities(split: Sequence[float]) -> tuple[float, float, float]:
    """Validate a (image, language, speech) split in percent; return probabilities."""
    values = tuple(split)
    if len(values) != len(SYNERGY_TASKS):
        raise ValidationError(f"must have 3 entries (image, language, speech), got {values!r}", field="split")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise ValidationError(f"entries must be finite numbers >= 0, got {values!r}", field="split")
    if abs(sum(values) - _SPLIT_TOTAL) > _SPLIT_TOLERANCE:
        raise ValidationError(f"percentages must sum to 100, got {values!r} (sum {sum(values)})",
                              field="split")
    return (values[0] / _SPLIT_TOTAL, values[1] / _SPLIT_TOTAL, values[2] / _SPLIT_TOTAL)


def generate_synergy_trace(
    n_jobs: int,
    *,
    rate_per_hour: float,
    split: Sequence[float] = SYNERGY_DEFAULT_SPLIT,
    multi_gpu: bool = False,
    seed: int = 0,
    duration_scale: float = 1.0,
    short_prob: float = DURATION_SHORT_PROB,
) -> list[JobSpec]:
    """Generate ``n_jobs`` jobs of Synergy's production-derived trace (module docstring).

    ``rate_per_hour`` is the Poisson arrival rate, 0 for a static trace (all at
    t = 0). ``duration_scale`` multiplies every duration (Synergy scales run
    times to the cluster size, §5.1; 1.0 keeps the paper's distribution).
    ``short_prob`` is the probability of the short mode (``x ~ U[1.5, 3]``); 1.0 leaves the long
    mode out (the traces of the physical testbed, benchmarks/reproduce_synergy.py says why).
    Jobs are ``job-0`` ... in arrival order, with ``duration_s`` set and
    ``iterations = 0``. The same arguments always give the same trace.
    """
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 0:
        raise ValidationError(f"must be an integer >= 0, got {n_jobs!r}", field="n_jobs")
    if not (math.isfinite(rate_per_hour) and rate_per_hour >= 0):
        raise ValidationError(f"must be a finite number >= 0, got {rate_per_hour!r}", field="rate_per_hour")
    if not (math.isfinite(duration_scale) and duration_scale > 0):
        raise ValidationError(f"must be a finite number > 0, got {duration_scale!r}", field="duration_scale")
    if not (math.isfinite(short_prob) and 0.0 <= short_prob <= 1.0):
        raise ValidationError(f"must be a probability in [0, 1], got {short_prob!r}", field="short_prob")
    probs = task_probabilities(split)

    arrival_rng, duration_rng, model_rng, gpu_rng = np.random.default_rng(seed).spawn(4)
    n = n_jobs

    if rate_per_hour > 0:
        gaps = arrival_rng.exponential(SECONDS_PER_HOUR / rate_per_hour, size=n)
        submit = np.cumsum(gaps)
    else:
        submit = np.zeros(n)

    short = duration_rng.random(n) < short_prob
    exponent = np.where(short,
                        duration_rng.uniform(*DURATION_SHORT_EXPONENT, size=n),
                        duration_rng.uniform(*DURATION_LONG_EXPONENT, size=n))
    duration = DURATION_UNIT_S * np.power(10.0, exponent) * duration_scale

    task = model_rng.choice(len(SYNERGY_TASKS), size=n, p=probs)
    pick = model_rng.random(n)

    if multi_gpu:
        gpus = gpu_rng.choice(np.array(GPU_DEMAND_CHOICES), size=n, p=GPU_DEMAND_PROBS)
    else:
        gpus = np.ones(n, dtype=np.int64)

    jobs = []
    for k in range(n):
        models = SYNERGY_TASK_MODELS[SYNERGY_TASKS[task[k]]]
        jobs.append(JobSpec(
            job_id=f"job-{k}",
            submit_time=float(submit[k]),
            model=models[int(pick[k] * len(models))],
            num_gpus=int(gpus[k]),
            iterations=0,
            duration_s=float(duration[k]),
        ))
    return jobs
