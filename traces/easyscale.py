"""EasyScale's trace experiment workload (papers/easyscale-elastic-training.txt §5.2).

The paper: Table 1's models, "job arrival time ... configured according to Microsoft [59]"
(Gandiva's Philly-derived arrivals), "job runtime distribution ... down-sampled from our
production training jobs" (not published), every job in one tenant at one priority, and
"the minimal number of GPUs was set to 0 in EasyScale". What is drawn here, by a seeded
generator (the same arguments always give the same trace):

* model: uniform over :data:`EASYSCALE_MODELS` (Table 1 without Electra, which has no
  step-time figure in the artifact; the catalog's ``bert-large`` carries its BERT figures);
* arrivals: Poisson at ``rate_per_hour`` (Microsoft's traces, as Gandiva and Gavel model them);
* GPUs requested: 1 / 2 / 4 / 8 with probability 70 / 10 / 15 / 5 % (Gavel's trace
  generator's scale factors for Philly-like jobs, REFERENCE-NUMBERS.md Baseline parameters);
* GPU type requested: V100 / P100 / T4 in proportion to ``type_shares`` (default the
  easyscale-64 cluster's 32 / 16 / 16 GPUs; the paper's YARN-CS "allocates the same type of
  GPUs (e.g., all V100 GPUs) for a job based on its requirement"; the trace's requirements are
  not published, so they follow the cluster's mix);
* or, with ``demand`` (e.g. :data:`ARTIFACT_DEMAND`), the GPUs and their type drawn together from
  weighted ``(gpus, type)`` pairs;
* run time on the requested GPUs: ``60 x 10^U(1.5, 3)`` s with probability 0.8, else
  ``60 x 10^U(3, 4)`` s (Gavel's generator, the same source; the production distribution is
  not public), times ``duration_scale``.

``elastic=True`` makes EasyScale jobs: ``maxP`` = the GPUs requested (``logical_workers``; the
job's global batch is what it was tuned for on that many GPUs), ``min_gpus`` 1 (a job holding
no GPUs is pending, which is the paper's "minimum 0": it waits for its first proposal) and
``max_gpus`` = ``maxP``, and no GPU type (EasyScale's schedulers choose the types; the
requested type is kept in ``extra["requested_gpu_type"]``). ``elastic=False`` gives the same
jobs as plain gang-scheduled DDP jobs of the requested type, what YARN-CS runs.
"""

from __future__ import annotations

import math

import numpy as np

from halyard.datamodel import JobSpec, ValidationError
from halyard.traces.generator import (
    DURATION_LONG_EXPONENT,
    DURATION_SHORT_EXPONENT,
    DURATION_SHORT_PROB,
    DURATION_UNIT_S,
    GPU_DEMAND_CHOICES,
    GPU_DEMAND_PROBS,
)

EASYSCALE_MODELS = ("shufflenetv2", "resnet50", "vgg19", "yolov3", "neumf", "bert-large", "swint")
# The public artifact's §5.2 trace (sUntvoOk/EasyScale_info_for_SC23 simulator/workloads/test.csv, 62 jobs
# once repeated names are merged as its simulator merges them): (maxP = GPUs YARN-CS gang-allocates,
# preferred type, jobs). Half the jobs ask for all 32 V100s; none asks for fewer than 4 GPUs.
ARTIFACT_DEMAND: tuple[tuple[int, str, int], ...] = (
    (4, "V100", 1), (8, "V100", 4), (16, "V100", 10), (32, "V100", 33), (8, "P100", 4), (16, "P100", 7), (8, "T4", 3))
ARTIFACT_JOBS = sum(jobs for *_, jobs in ARTIFACT_DEMAND)  # 62
ARTIFACT_RATE_PER_HOUR = 47.5  # its 62 arrivals span 115-4814 s
EASYSCALE_64_TYPE_SHARES = (("V100", 32), ("P100", 16), ("T4", 16))


def generate_easyscale_trace(n_jobs: int, *, rate_per_hour: float, seed: int = 0, elastic: bool = True,
                             duration_scale: float = 1.0,
                             type_shares: tuple[tuple[str, int], ...] = EASYSCALE_64_TYPE_SHARES,
                             gpu_probabilities: tuple[float, ...] = GPU_DEMAND_PROBS,
                             demand: tuple[tuple[int, str, float], ...] | None = None) -> list[JobSpec]:
    """``n_jobs`` jobs of EasyScale's §5.2 workload (module docstring), ``es-0000`` ... in arrival order.

    ``gpu_probabilities`` weighs the GPU counts of :data:`GPU_DEMAND_CHOICES` (default Gavel's
    :data:`GPU_DEMAND_PROBS`); ``demand``, if given, replaces both it and ``type_shares`` by weighted
    ``(gpus, type, weight)`` triples drawn together (from the GPU-count stream)."""
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 0:
        raise ValidationError(f"must be an integer >= 0, got {n_jobs!r}", field="n_jobs")
    if not (math.isfinite(rate_per_hour) and rate_per_hour > 0):
        raise ValidationError(f"must be a finite number > 0, got {rate_per_hour!r}", field="rate_per_hour")
    if not (math.isfinite(duration_scale) and duration_scale > 0):
        raise ValidationError(f"must be a finite number > 0, got {duration_scale!r}", field="duration_scale")
    arrival_rng, duration_rng, model_rng, gpu_rng, type_rng = np.random.default_rng(seed).spawn(5)
    submit = np.cumsum(arrival_rng.exponential(3600.0 / rate_per_hour, size=n_jobs))
    short = duration_rng.random(n_jobs) < DURATION_SHORT_PROB
    exponent = np.where(short, duration_rng.uniform(*DURATION_SHORT_EXPONENT, n_jobs),
                        duration_rng.uniform(*DURATION_LONG_EXPONENT, n_jobs))
    durations = DURATION_UNIT_S * 10.0 ** exponent * duration_scale
    models = model_rng.integers(0, len(EASYSCALE_MODELS), size=n_jobs)
    if (len(gpu_probabilities) != len(GPU_DEMAND_CHOICES) or min(gpu_probabilities) < 0
            or sum(gpu_probabilities) <= 0):
        raise ValidationError(f"give {len(GPU_DEMAND_CHOICES)} non-negative weights for {GPU_DEMAND_CHOICES}",
                              field="gpu_probabilities")
    if demand is None:
        weights_g = np.array(gpu_probabilities, dtype=float)
        gpus: np.ndarray | list[int] = gpu_rng.choice(GPU_DEMAND_CHOICES, size=n_jobs, p=weights_g / weights_g.sum())
        weights = np.array([w for _, w in type_shares], dtype=float)
        types = type_rng.choice(len(type_shares), size=n_jobs, p=weights / weights.sum())
        wanted_types = [type_shares[int(t)][0] for t in types]
    else:
        if not demand or any(len(d) != 3 or int(d[0]) < 1 or d[2] < 0 for d in demand) \
                or sum(d[2] for d in demand) <= 0:
            raise ValidationError("give (gpus >= 1, type, weight >= 0) triples with a positive total weight, "
                                  f"got {demand!r}", field="demand")
        weights_d = np.array([d[2] for d in demand], dtype=float)
        picked = gpu_rng.choice(len(demand), size=n_jobs, p=weights_d / weights_d.sum())
        gpus = [demand[int(k)][0] for k in picked]
        wanted_types = [demand[int(k)][1] for k in picked]
    jobs = []
    for i in range(n_jobs):
        g = int(gpus[i])
        wanted = wanted_types[i]
        shape: dict = ({"min_gpus": 1, "max_gpus": g, "logical_workers": g} if elastic else {"gpu_type": wanted})
        jobs.append(JobSpec(job_id=f"es-{i:04d}", submit_time=round(float(submit[i]), 3),
                            model=EASYSCALE_MODELS[int(models[i])], num_gpus=g,
                            duration_s=round(float(durations[i]), 3), extra={"requested_gpu_type": wanted},
                            **shape))
    return jobs
